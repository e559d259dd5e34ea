//! `gwctl credentials`: who may use the admin API. A credential has a role
//! (`admin`, `operator-readonly`, or `account`, bound to one account), and a
//! secret shown once, when it is created or rotated (or written to
//! `--key-file` instead). The control plane keeps only its hash.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs};
use crate::flags::Page;
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// Credential verbs. A credential is named by its id.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a credential and print its secret, the only time it is shown.
    #[command(after_help = "Examples:\n  \
        gwctl credentials create --role operator-readonly --name dashboards\n  \
        gwctl credentials create --role account --account acme --key-file ~/.config/gwctl/acme.key\n  \
        gwctl credentials create --role admin --import-key-file ./vault-admin.key -o json")]
    Create(CreateArgs),
    /// List credentials, by id; never their secrets.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  gwctl credentials list\n  gwctl credentials list --account acme -o json"
    )]
    List {
        /// Only credentials bound to this account (id or name).
        #[arg(long)]
        account: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Revoke a credential: its secret stops working at once, on every replica.
    #[command(after_help = "Examples:\n  gwctl credentials revoke cred_8f2k1m --yes")]
    Revoke(DeleteArgs),
    /// Give a credential a new secret; the old one stops working at once.
    #[command(after_help = "Examples:\n  \
        gwctl credentials rotate cred_8f2k1m\n  \
        gwctl credentials rotate cred_8f2k1m --key-file ~/.config/gwctl/acme.key")]
    Rotate {
        /// Id of the credential.
        credential: String,
        /// Write the new secret to this file (mode 0600) instead of printing it.
        #[arg(long, value_name = "PATH")]
        key_file: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// What the credential may do.
    #[arg(long, value_enum)]
    role: Role,
    /// The account an `account` credential is bound to: id or name.
    #[arg(long, required_if_eq("role", "account"))]
    account: Option<String>,
    /// A label for people.
    #[arg(long, default_value = "", hide_default_value = true)]
    name: String,
    /// Write the secret to this file (mode 0600) instead of printing it.
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,
    /// Import the secret held in this file (at least 32 characters) instead of minting one.
    #[arg(long, value_name = "PATH", conflicts_with = "key_file")]
    import_key_file: Option<PathBuf>,
}

/// A credential's role, as the control plane spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Everything.
    Admin,
    /// Every read, no write.
    OperatorReadonly,
    /// One account's tokens, balance and usage.
    Account,
}

/// Runs one credential verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let account_id = match &args.account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let key = match &args.import_key_file {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .trim()
                    .to_owned(),
                None => String::new(),
            };
            let request =
                pb::CreateCredentialRequest { name: args.name, role: args.role.as_str().to_owned(), account_id, key };
            let created = admin.create_credential(request).await.rpc()?;
            // An imported secret is the operator's already: not printed again.
            let shown = args.import_key_file.is_none();
            render_created(out, &created, args.key_file.as_deref(), shown)
        }
        Command::List { account, page } => {
            let account_id = match &account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let list = admin.list_credentials(pb::ListRequest { account_id, ..page.request() }).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Revoke(args) => {
            let id = args.target.clone();
            if !args.dry_run {
                confirm::delete(&args, &format!("credential {id}"))?;
                admin.revoke_credential(pb::GetRequest { id: id.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "credential", &id, args.dry_run)
        }
        Command::Rotate { credential, key_file } => {
            let rotated = admin.rotate_credential(pb::GetRequest { id: credential }).await.rpc()?;
            render_created(out, &rotated, key_file.as_deref(), true)
        }
    }
}

/// The created (or rotated) credential with its secret. With `key_file`
/// the secret goes to that file, never to the output; without `shown` (an
/// import) it is left out. Otherwise JSON and YAML carry it as `key`, the
/// table shows it last with a warning, and `-o name` prints the id only.
fn render_created(
    out: Output,
    created: &pb::CreatedCredential,
    key_file: Option<&Path>,
    shown: bool,
) -> Result<String> {
    let credential = created.credential.clone().unwrap_or_default();
    if let Some(path) = key_file {
        write_secret(path, &created.key)?;
    }
    let key = (shown && key_file.is_none()).then(|| created.key.clone());
    let json = || schema::CreatedCredential {
        credential: (&credential).into(),
        key: key.clone(),
        key_file: key_file.map(|p| p.display().to_string()),
    };
    match out {
        Output::Json => output::json_text(&json()),
        Output::Yaml => output::yaml_text(&json()),
        Output::Name => {
            if key.is_some() {
                eprintln!("warning: -o name prints the credential id only; its secret is not shown again");
            }
            Ok(format!("{}\n", credential.id))
        }
        Output::Table | Output::Wide | Output::Csv => {
            let mut fields = credential.fields();
            match (&key, key_file) {
                (Some(key), _) => fields.push(("key", key.clone())),
                (None, Some(path)) => fields.push(("key file", path.display().to_string())),
                (None, None) => {}
            }
            let mut text = output::fields_text(&fields);
            if key.is_some() {
                text.push_str("warning: copy the secret now; it is not shown again\n");
            }
            Ok(text)
        }
    }
}

/// Writes `secret` to a new file at `path`, readable by the owner only; a
/// missing parent directory is made private (0700). Refuses to replace an
/// existing file.
fn write_secret(path: &Path, secret: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| {
        format!("creating {} (an existing file is never replaced; the secret was not saved)", path.display())
    })?;
    writeln!(file, "{secret}").and_then(|()| file.sync_all()).with_context(|| format!("writing {}", path.display()))
}

// === impl Role ===

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::OperatorReadonly => "operator-readonly",
            Role::Account => "account",
        }
    }
}

// === impl Render for pb::Credential ===

impl Render for pb::Credential {
    const COLUMNS: &'static [&'static str] = &["ID", "NAME", "ROLE", "ACCOUNT", "KEY", "CREATED", "LAST USED"];
    const WIDE: &'static [&'static str] = &["ROTATED"];
    type Json = schema::Credential;

    fn json(&self) -> schema::Credential {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.role.clone(),
            or_dash(&self.account_id),
            self.key_prefix.clone(),
            output::time(self.created_at),
            output::time(self.last_used_at),
        ]
    }

    fn wide_row(&self) -> Vec<String> {
        vec![output::time(self.rotated_at)]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("name", self.name.clone()),
            ("role", self.role.clone()),
            ("account", or_dash(&self.account_id)),
            ("key prefix", self.key_prefix.clone()),
            ("created", output::time(self.created_at)),
            ("last used", output::time(self.last_used_at)),
            ("rotated", output::time(self.rotated_at)),
        ]
    }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() { "-".into() } else { text.into() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn created() -> pb::CreatedCredential {
        let credential = pb::Credential { id: "cred_1".into(), role: "admin".into(), ..Default::default() };
        pb::CreatedCredential { credential: Some(credential), key: "gwcred-the-secret".into() }
    }

    #[test]
    fn a_secret_written_to_a_file_is_not_printed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys").join("admin.key");
        let text = render_created(Output::Json, &created(), Some(&path), true).unwrap();
        assert!(!text.contains("the-secret"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["key"], serde_json::Value::Null);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "gwcred-the-secret\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let again = render_created(Output::Json, &created(), Some(&path), true).unwrap_err();
        assert!(format!("{again:#}").contains("never replaced"), "{again:#}");
    }

    #[test]
    fn a_minted_secret_is_printed_once_and_an_imported_one_never() {
        let json: serde_json::Value =
            serde_json::from_str(&render_created(Output::Json, &created(), None, true).unwrap()).unwrap();
        assert_eq!(json["key"], "gwcred-the-secret");
        assert_eq!(json["id"], "cred_1");
        let table = render_created(Output::Table, &created(), None, false).unwrap();
        assert!(!table.contains("the-secret"), "{table}");
    }
}
