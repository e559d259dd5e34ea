//! `gwctl user`: people who sign in to the web console. A user has a role
//! like a credential (`admin`, `operator-readonly`, or `account`, bound to
//! one account) and sets its own password through a one-time link, which
//! `create` and `reset-password` print; nobody else ever chooses or sees it.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::credentials::Role;
use crate::flags::{Page, Status};
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// User verbs. A user is named by its sign-in name.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a user and print the one-time link that sets its password.
    #[command(after_help = "Examples:\n  \
        gwctl user create ann@example.com --role admin\n  \
        gwctl user create bob --role account --account acme\n  \
        gwctl user create dashboards --role operator-readonly -o json")]
    Create {
        /// The sign-in name: letters, digits and . _ @ - (kept lower case).
        name: String,
        /// What the user may do.
        #[arg(long, value_enum)]
        role: Role,
        /// The account an `account` user belongs to: id or name.
        #[arg(long, required_if_eq("role", "account"))]
        account: Option<String>,
    },
    /// List users, by id; never their passwords.
    #[command(alias = "ls", after_help = "Examples:\n  gwctl user list\n  gwctl user list --status disabled -o json")]
    List {
        /// Only users of this status.
        #[arg(long, value_enum)]
        status: Option<Status>,
        /// Only users of this account (id or name).
        #[arg(long)]
        account: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Disable a user: it cannot sign in, and its sessions end at once.
    #[command(after_help = "Examples:\n  gwctl user disable bob")]
    Disable {
        /// The user's sign-in name.
        name: String,
    },
    /// Enable a disabled user again.
    #[command(after_help = "Examples:\n  gwctl user enable bob")]
    Enable {
        /// The user's sign-in name.
        name: String,
    },
    /// End a user's sessions and print a one-time link that sets a new
    /// password (the old one works until the link is used).
    #[command(after_help = "Examples:\n  gwctl user reset-password bob")]
    ResetPassword {
        /// The user's sign-in name.
        name: String,
    },
}

/// A user and its one-time link, as printed.
struct WithLink(pb::UserLink);

/// Runs one user verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create { name, role, account } => {
            let account_id = match &account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let request = pb::CreateUserRequest { name, role: role.as_str().to_owned(), account_id };
            let created = admin.create_user(request).await.rpc()?;
            render_link(out, created)
        }
        Command::List { status, account, page } => {
            let account_id = match &account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let status = status.map(|s| s.as_str().to_owned()).unwrap_or_default();
            let list = admin.list_users(pb::ListRequest { status, account_id, ..page.request() }).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Disable { name } => set_enabled(admin, out, name, false).await,
        Command::Enable { name } => set_enabled(admin, out, name, true).await,
        Command::ResetPassword { name } => {
            let reset = admin.reset_user_password(pb::UserRef { name }).await.rpc()?;
            render_link(out, reset)
        }
    }
}

async fn set_enabled(admin: &mut Admin, out: Output, name: String, enabled: bool) -> Result<String> {
    let user = admin.update_user(pb::UpdateUserRequest { name, enabled: Some(enabled) }).await.rpc()?;
    output::render_changed(out, "user", &user, if enabled { "enabled" } else { "disabled" })
}

/// The user and its link. A link that is only a path means the console has
/// no public URL (it is off): said on stderr, so the link still prints.
fn render_link(out: Output, answer: pb::UserLink) -> Result<String> {
    if answer.link.starts_with('/') {
        eprintln!(
            "note: the console is off (no public URL is configured); the link works once it is on, \
             appended to the console's address"
        );
    }
    output::render_one(out, &WithLink(answer))
}

// === impl Render for pb::User ===

impl Render for pb::User {
    const COLUMNS: &'static [&'static str] = &["ID", "NAME", "ROLE", "ACCOUNT", "STATUS", "PASSWORD", "LAST LOGIN"];
    const WIDE: &'static [&'static str] = &["CREATED"];
    type Json = schema::User;

    fn json(&self) -> schema::User {
        self.into()
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.role.clone(),
            or_dash(&self.account_id),
            self.status.clone(),
            password(self),
            output::time(self.last_login_at),
        ]
    }

    fn wide_row(&self) -> Vec<String> {
        vec![output::time(self.created_at)]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("name", self.name.clone()),
            ("role", self.role.clone()),
            ("account", or_dash(&self.account_id)),
            ("status", self.status.clone()),
            ("password", password(self)),
            ("created", output::time(self.created_at)),
            ("last login", output::time(self.last_login_at)),
        ]
    }
}

// === impl Render for WithLink ===

impl Render for WithLink {
    const COLUMNS: &'static [&'static str] = &["NAME", "LINK", "LINK EXPIRES"];
    type Json = schema::UserLink;

    fn json(&self) -> schema::UserLink {
        (&self.0).into()
    }

    fn name(&self) -> String {
        self.0.user.as_ref().map(|u| u.name.clone()).unwrap_or_default()
    }

    fn row(&self) -> Vec<String> {
        vec![self.name(), self.0.link.clone(), output::time(self.0.expires_at)]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = self.0.user.clone().unwrap_or_default().fields();
        fields.push(("link", self.0.link.clone()));
        fields.push(("link expires", output::time(self.0.expires_at)));
        fields
    }
}

fn password(user: &pb::User) -> String {
    if user.has_password { "set".into() } else { "not set".into() }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() { "-".into() } else { text.into() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn link(link: &str) -> pb::UserLink {
        let user = pb::User { id: "usr_1".into(), name: "bob".into(), role: "account".into(), ..Default::default() };
        pb::UserLink { user: Some(user), link: link.into(), expires_at: 1_798_761_600 }
    }

    #[test]
    fn the_link_and_its_expiry_are_printed() {
        let text = render_link(Output::Table, link("https://console.example.com/welcome?ticket=abc")).unwrap();
        assert!(text.contains("https://console.example.com/welcome?ticket=abc"), "{text}");
        assert!(text.contains("link expires") && text.contains("2027-01-01T00:00:00Z"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&render_link(Output::Json, link("/welcome?ticket=abc")).unwrap()).unwrap();
        assert_eq!((json["name"].as_str(), json["link"].as_str()), (Some("bob"), Some("/welcome?ticket=abc")));
        assert_eq!(json["link_expires_at"], 1_798_761_600);
        assert!(json.get("password_hash").is_none());
    }
}
