//! The provider flags of `gwctl channel create` and `update`, named as each
//! provider's console names them, turned into the channel's settings and,
//! for Bedrock and Vertex, its key (`AKID:SECRET[:TOKEN]`, a service
//! account's JSON). Secrets come from files, standard input (`-`, once) or,
//! with `--aws-env`, the AWS variables; none needs the command line.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// Flags for the Azure, Bedrock and Vertex kinds (Gemini takes `--key`).
#[derive(Debug, Default, clap::Args)]
pub struct ProviderArgs {
    /// Azure OpenAI resource name; the base URL becomes
    /// https://<resource>.openai.azure.com.
    #[arg(long, help_heading = "Azure OpenAI (--type azure)")]
    pub resource: Option<String>,
    /// Deployment to call, with a dated --api-version (the v1 API takes the
    /// deployment's name as the model instead).
    #[arg(long, help_heading = "Azure OpenAI (--type azure)")]
    pub deployment: Option<String>,
    /// `v1` (the default: the v1 API) or a dated version such as
    /// 2024-10-21 (deployment URLs).
    #[arg(long, value_name = "VERSION", help_heading = "Azure OpenAI (--type azure)")]
    pub api_version: Option<String>,
    /// Send the key as a Microsoft Entra ID bearer token instead of
    /// `api-key`; `--entra=false` goes back to `api-key`.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Azure OpenAI (--type azure)"
    )]
    pub entra: Option<bool>,

    /// AWS region of the Bedrock runtime, such as us-east-1.
    #[arg(long, help_heading = "AWS Bedrock (--type bedrock)")]
    pub region: Option<String>,
    /// IAM access key id (AKIA… or ASIA…); not secret.
    #[arg(long, value_name = "ID", help_heading = "AWS Bedrock (--type bedrock)")]
    pub access_key_id: Option<String>,
    /// IAM secret access key; `-` reads standard input. Prefer
    /// --secret-access-key-file or --aws-env.
    #[arg(
        long,
        value_name = "KEY",
        conflicts_with = "secret_access_key_file",
        help_heading = "AWS Bedrock (--type bedrock)"
    )]
    pub secret_access_key: Option<String>,
    /// File holding the secret access key; `-` reads standard input.
    #[arg(long, value_name = "PATH", help_heading = "AWS Bedrock (--type bedrock)")]
    pub secret_access_key_file: Option<PathBuf>,
    /// STS session token of temporary credentials; `-` reads standard input.
    #[arg(
        long,
        value_name = "TOKEN",
        conflicts_with = "session_token_file",
        help_heading = "AWS Bedrock (--type bedrock)"
    )]
    pub session_token: Option<String>,
    /// File holding the session token; `-` reads standard input.
    #[arg(long, value_name = "PATH", help_heading = "AWS Bedrock (--type bedrock)")]
    pub session_token_file: Option<PathBuf>,
    /// Take what the flags leave out from AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (the token only with
    /// the id from the environment too), else AWS_BEARER_TOKEN_BEDROCK as
    /// a Bedrock API key.
    #[arg(long, help_heading = "AWS Bedrock (--type bedrock)")]
    pub aws_env: bool,
    /// A Bedrock API key instead of IAM credentials; `-` reads standard
    /// input. Prefer --bedrock-api-key-file.
    #[arg(
        long,
        value_name = "KEY",
        conflicts_with = "bedrock_api_key_file",
        help_heading = "AWS Bedrock (--type bedrock)"
    )]
    pub bedrock_api_key: Option<String>,
    /// File holding a Bedrock API key; `-` reads standard input.
    #[arg(long, value_name = "PATH", help_heading = "AWS Bedrock (--type bedrock)")]
    pub bedrock_api_key_file: Option<PathBuf>,

    /// Google Cloud project id [default: the service account's project_id].
    #[arg(long, help_heading = "Vertex AI (--type vertex)")]
    pub project: Option<String>,
    /// Vertex AI region, such as us-east5 or europe-west1, or `global`.
    #[arg(long, help_heading = "Vertex AI (--type vertex)")]
    pub location: Option<String>,
    /// The service account's JSON key file, as downloaded from the Cloud
    /// console (keep it mode 0600); it becomes the channel's key.
    #[arg(long, value_name = "PATH", help_heading = "Vertex AI (--type vertex)")]
    pub service_account_file: Option<PathBuf>,
    /// OAuth token endpoint [default: Google's, https://oauth2.googleapis.com/token].
    #[arg(long, value_name = "URL", help_heading = "Vertex AI (--type vertex)")]
    pub token_url: Option<String>,
}

/// What the provider flags give a channel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Provided {
    /// Settings to set; an empty value removes one (on update).
    pub settings: HashMap<String, String>,
    /// The channel's key when the flags make it (Bedrock, Vertex).
    pub key: Option<String>,
}

/// Standard input, which one secret at most may be read from.
pub struct Stdin<F> {
    read: Option<F>,
}

// === impl Stdin ===

impl<F: FnOnce() -> io::Result<String>> Stdin<F> {
    /// Standard input read by `read`.
    pub fn new(read: F) -> Stdin<F> {
        Stdin { read: Some(read) }
    }

    /// Its whole text; an error the second time.
    pub fn take(&mut self, what: &str) -> Result<String> {
        match self.read.take() {
            Some(read) => read().with_context(|| format!("reading the {what} from standard input")),
            None => bail!("only one secret can come from standard input; give the {what} from a file"),
        }
    }
}

// === impl ProviderArgs ===

impl ProviderArgs {
    /// Each flag given, with the channel kind it belongs to.
    fn given(&self) -> Vec<(&'static str, &'static str)> {
        let flags = [
            ("--resource", "azure", self.resource.is_some()),
            ("--deployment", "azure", self.deployment.is_some()),
            ("--api-version", "azure", self.api_version.is_some()),
            ("--entra", "azure", self.entra.is_some()),
            ("--region", "bedrock", self.region.is_some()),
            ("--access-key-id", "bedrock", self.access_key_id.is_some()),
            (
                "--secret-access-key",
                "bedrock",
                self.secret_access_key.is_some() || self.secret_access_key_file.is_some(),
            ),
            ("--session-token", "bedrock", self.session_token.is_some() || self.session_token_file.is_some()),
            ("--aws-env", "bedrock", self.aws_env),
            ("--bedrock-api-key", "bedrock", self.bedrock_api_key.is_some() || self.bedrock_api_key_file.is_some()),
            ("--project", "vertex", self.project.is_some()),
            ("--location", "vertex", self.location.is_some()),
            ("--service-account-file", "vertex", self.service_account_file.is_some()),
            ("--token-url", "vertex", self.token_url.is_some()),
        ];
        flags.into_iter().filter(|(_, _, given)| *given).map(|(flag, kind, _)| (flag, kind)).collect()
    }

    /// The kind the flags given belong to; `None` when none is given.
    pub fn kind(&self) -> Option<&'static str> {
        self.given().first().map(|(_, kind)| *kind)
    }

    /// Whether any provider flag is given.
    pub fn any(&self) -> bool {
        !self.given().is_empty()
    }

    /// The key the credential flags make for one more key of a `kind`
    /// channel's pool (`channel key add`): the settings flags belong to the
    /// whole channel and are refused here, with where they go instead.
    pub fn pool_key<F: FnOnce() -> io::Result<String>>(
        self,
        kind: &str,
        env: &dyn Fn(&str) -> Option<String>,
        stdin: &mut Stdin<F>,
    ) -> Result<Option<String>> {
        const SETTINGS: [&str; 8] = [
            "--resource",
            "--deployment",
            "--api-version",
            "--entra",
            "--region",
            "--project",
            "--location",
            "--token-url",
        ];
        if let Some((flag, _)) = self.given().into_iter().find(|(flag, _)| SETTINGS.contains(flag)) {
            bail!("{flag} is a setting of the whole channel, not of one key: change it with gwctl channel update");
        }
        Ok(self.resolve(kind, env, stdin)?.key)
    }

    /// The settings and key the flags give a `kind` channel. Fails on a flag
    /// of another kind, on a secret that is empty or cannot be read, and on
    /// a service-account file that is not one. `env` reads a variable (only
    /// with `--aws-env`).
    pub fn resolve<F: FnOnce() -> io::Result<String>>(
        self,
        kind: &str,
        env: &dyn Fn(&str) -> Option<String>,
        stdin: &mut Stdin<F>,
    ) -> Result<Provided> {
        if let Some((flag, other)) = self.given().into_iter().find(|(_, k)| *k != kind) {
            bail!("{flag} is for --type {other} channels; this channel's type is {kind}");
        }
        let mut provided = Provided::default();
        let mut set = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                provided.settings.insert(name.to_owned(), value.trim().to_owned());
            }
        };
        match kind {
            "azure" => {
                set("resource", self.resource);
                set("deployment", self.deployment);
                set("api_version", self.api_version);
                set("auth", self.entra.map(|entra| if entra { "entra" } else { "api-key" }.to_owned()));
            }
            "vertex" => {
                let account = self.service_account_file.as_deref().map(service_account).transpose()?;
                let project = self.project.or_else(|| account.as_ref().and_then(|a| a.project.clone()));
                set("project", project);
                set("location", self.location);
                set("token_url", self.token_url);
                provided.key = account.map(|a| a.json);
            }
            "bedrock" => {
                let region = self.region.clone();
                let (auth, key) = self.bedrock_key(env, stdin)?;
                set("region", region);
                set("auth", auth.map(str::to_owned));
                provided.key = key;
            }
            _ => {}
        }
        Ok(provided)
    }

    /// Bedrock's `auth` and key from the credential flags (and, with
    /// `--aws-env`, the environment).
    fn bedrock_key<F: FnOnce() -> io::Result<String>>(
        self,
        env: &dyn Fn(&str) -> Option<String>,
        stdin: &mut Stdin<F>,
    ) -> Result<(Option<&'static str>, Option<String>)> {
        let env = |name: &str| if self.aws_env { env(name).filter(|v| !v.trim().is_empty()) } else { None };
        let api_key = secret(self.bedrock_api_key, self.bedrock_api_key_file, "Bedrock API key", stdin)?;
        let secret_key = secret(self.secret_access_key, self.secret_access_key_file, "secret access key", stdin)?;
        let token = secret(self.session_token, self.session_token_file, "session token", stdin)?;
        if let Some(api_key) = api_key {
            if self.access_key_id.is_some() || secret_key.is_some() || token.is_some() {
                bail!("give either --bedrock-api-key or IAM credentials (--access-key-id …), not both");
            }
            return Ok((Some("api-key"), Some(api_key)));
        }
        let (id, token) = match (self.access_key_id, token) {
            (Some(id), token) => (Some(id), token),
            // A session token belongs to the access key id it came with.
            (None, token) => (env("AWS_ACCESS_KEY_ID"), token.or_else(|| env("AWS_SESSION_TOKEN"))),
        };
        let secret_key = secret_key.or_else(|| env("AWS_SECRET_ACCESS_KEY"));
        match (id, secret_key) {
            (Some(id), Some(secret_key)) => {
                let mut key = format!("{}:{secret_key}", id.trim());
                if let Some(token) = token {
                    key = format!("{key}:{token}");
                }
                Ok((Some("sigv4"), Some(key)))
            }
            (Some(_), None) => bail!(
                "--access-key-id needs its secret: --secret-access-key-file PATH, --secret-access-key - (standard input) or --aws-env"
            ),
            (None, Some(_)) => {
                bail!("the secret access key needs its --access-key-id (or AWS_ACCESS_KEY_ID with --aws-env)")
            }
            (None, None) if token.is_some() => bail!("--session-token needs --access-key-id and its secret"),
            (None, None) => match env("AWS_BEARER_TOKEN_BEDROCK") {
                Some(api_key) => Ok((Some("api-key"), Some(api_key.trim().to_owned()))),
                None if self.aws_env => bail!(
                    "--aws-env found neither AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY nor AWS_BEARER_TOKEN_BEDROCK"
                ),
                None => Ok((None, None)),
            },
        }
    }
}

/// A secret given as a value, `-` (standard input) or a file; trimmed,
/// never empty.
fn secret<F: FnOnce() -> io::Result<String>>(
    value: Option<String>,
    file: Option<PathBuf>,
    what: &str,
    stdin: &mut Stdin<F>,
) -> Result<Option<String>> {
    let text = match (value, file) {
        (Some(value), _) if value == "-" => stdin.take(what)?,
        (None, Some(path)) if path.as_os_str() == "-" => stdin.take(what)?,
        (Some(value), _) => value,
        (None, Some(path)) => {
            std::fs::read_to_string(&path).with_context(|| format!("reading the {what} from {}", path.display()))?
        }
        (None, None) => return Ok(None),
    };
    let text = text.trim().to_owned();
    if text.is_empty() {
        bail!("the {what} is empty (an unset variable?)");
    }
    Ok(Some(text))
}

/// A service account's JSON key as read from its file.
struct ServiceAccount {
    json: String,
    project: Option<String>,
}

/// Reads and checks the service-account file at `path`; warns when other
/// users may read it. Errors never quote the file's content.
fn service_account(path: &Path) -> Result<ServiceAccount> {
    let json = std::fs::read_to_string(path)
        .with_context(|| format!("reading the service-account file {}", path.display()))?;
    warn_if_shared(path);
    let value: serde_json::Value = serde_json::from_str(&json).ok().unwrap_or_default();
    let text = |name: &str| value.get(name).and_then(serde_json::Value::as_str).filter(|s| !s.is_empty());
    if text("client_email").is_none() || text("private_key").is_none() {
        bail!(
            "{} is not a service account's JSON key (it needs client_email and private_key; create one under IAM > Service accounts > Keys)",
            path.display()
        );
    }
    // On one line: the control plane refuses keys with control characters.
    Ok(ServiceAccount { project: text("project_id").map(str::to_owned), json: value.to_string() })
}

/// Prints a warning when the group or others may read `path`.
#[cfg(unix)]
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            eprintln!(
                "warning: {} holds a private key and is readable by other users (mode {mode:o}); chmod 600 it",
                path.display()
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_: &Path) {}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub(super) mod tests {
    use super::*;

    const SA: &str = r#"{"type":"service_account","project_id":"acme-ai","client_email":"gw@acme-ai.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\nX\n-----END PRIVATE KEY-----\n"}"#;

    /// `args` as the provider flags of a command line.
    pub(in crate::channel) fn parse(args: &[&str]) -> ProviderArgs {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ProviderArgs,
        }
        Cli::parse_from(std::iter::once("gwctl").chain(args.iter().copied())).args
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn resolve(kind: &str, args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> Result<Provided> {
        parse(args).resolve(kind, env, &mut Stdin::new(|| Ok("from-stdin\n".to_owned())))
    }

    fn settings(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn azure_flags_become_settings() {
        let args = ["--resource", "contoso", "--api-version", "2024-10-21", "--deployment", "gpt4o", "--entra"];
        let provided = resolve("azure", &args, &no_env).unwrap();
        let expected =
            [("resource", "contoso"), ("api_version", "2024-10-21"), ("deployment", "gpt4o"), ("auth", "entra")];
        assert_eq!(provided, Provided { settings: settings(&expected), key: None });
        assert_eq!(resolve("azure", &["--entra=false"], &no_env).unwrap().settings, settings(&[("auth", "api-key")]));
    }

    #[test]
    fn bedrock_credentials_are_composed_into_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "wJalrXUtnFEMI\n").unwrap();
        let file = file.to_str().unwrap();
        let args = ["--region", "eu-west-1", "--access-key-id", "AKIAEXAMPLE", "--secret-access-key-file", file];
        let provided = resolve("bedrock", &args, &no_env).unwrap();
        assert_eq!(provided.key.as_deref(), Some("AKIAEXAMPLE:wJalrXUtnFEMI"));
        assert_eq!(provided.settings, settings(&[("region", "eu-west-1"), ("auth", "sigv4")]));

        let with_token = ["--access-key-id", "ASIAEX", "--secret-access-key-file", file, "--session-token", "-"];
        assert_eq!(
            resolve("bedrock", &with_token, &no_env).unwrap().key.as_deref(),
            Some("ASIAEX:wJalrXUtnFEMI:from-stdin")
        );
        let api_key = resolve("bedrock", &["--bedrock-api-key", "-"], &no_env).unwrap();
        assert_eq!((api_key.key.as_deref(), api_key.settings["auth"].as_str()), (Some("from-stdin"), "api-key"));
    }

    #[test]
    fn aws_env_fills_only_what_the_flags_leave_out() {
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIAENV".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("envsecret".to_owned()),
            "AWS_SESSION_TOKEN" => Some("envtoken".to_owned()),
            _ => None,
        };
        assert_eq!(
            resolve("bedrock", &["--aws-env"], &env).unwrap().key.as_deref(),
            Some("AKIAENV:envsecret:envtoken")
        );
        let own_id = resolve("bedrock", &["--aws-env", "--access-key-id", "AKIAFLAG"], &env).unwrap();
        assert_eq!(own_id.key.as_deref(), Some("AKIAFLAG:envsecret"), "the env token belongs to the env id");
        assert_eq!(resolve("bedrock", &[], &env).unwrap().key, None, "the environment is read only with --aws-env");
        let bearer = |name: &str| (name == "AWS_BEARER_TOKEN_BEDROCK").then(|| "ABSKkey".to_owned());
        let provided = resolve("bedrock", &["--aws-env"], &bearer).unwrap();
        assert_eq!((provided.key.as_deref(), provided.settings["auth"].as_str()), (Some("ABSKkey"), "api-key"));
        let nothing = resolve("bedrock", &["--aws-env"], &no_env).unwrap_err().to_string();
        assert!(nothing.contains("AWS_ACCESS_KEY_ID"), "{nothing}");
    }

    #[test]
    fn incomplete_or_mixed_credentials_are_refused() {
        let half = resolve("bedrock", &["--access-key-id", "AKIAX"], &no_env).unwrap_err().to_string();
        assert!(half.contains("--secret-access-key-file"), "{half}");
        let both = ["--bedrock-api-key", "k", "--access-key-id", "AKIAX"];
        assert!(resolve("bedrock", &both, &no_env).unwrap_err().to_string().contains("not both"));
        let twice = ["--access-key-id", "A", "--secret-access-key", "-", "--session-token", "-"];
        assert!(resolve("bedrock", &twice, &no_env).unwrap_err().to_string().contains("only one secret"));
        let empty = resolve("bedrock", &["--bedrock-api-key", " "], &no_env).unwrap_err().to_string();
        assert!(empty.contains("empty"), "{empty}");
        let wrong_kind = resolve("azure", &["--region", "us-east-1"], &no_env).unwrap_err().to_string();
        assert!(wrong_kind.contains("--region is for --type bedrock"), "{wrong_kind}");
    }

    #[test]
    fn a_service_account_file_is_the_key_and_names_the_project() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sa.json");
        std::fs::write(&file, SA).unwrap();
        let path = file.to_str().unwrap();
        let provided = resolve("vertex", &["--service-account-file", path, "--location", "global"], &no_env).unwrap();
        let key: serde_json::Value = serde_json::from_str(provided.key.as_deref().unwrap()).unwrap();
        assert_eq!(key, serde_json::from_str::<serde_json::Value>(SA).unwrap());
        assert_eq!(provided.settings, settings(&[("project", "acme-ai"), ("location", "global")]));
        let own = resolve("vertex", &["--service-account-file", path, "--project", "other"], &no_env).unwrap();
        assert_eq!(own.settings["project"], "other", "--project wins over the file's project_id");

        std::fs::write(&file, r#"{"private_key":"TOPSECRET"}"#).unwrap();
        let error = resolve("vertex", &["--service-account-file", path], &no_env).unwrap_err().to_string();
        assert!(error.contains("client_email") && !error.contains("TOPSECRET"), "{error}");
    }
}
