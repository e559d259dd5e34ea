//! `gwctl account`: accounts hold the balance that every token of theirs
//! spends (optionally capped per day, week, month or rolling hours), and
//! the groups those tokens may use.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs};
use crate::flags::{CsvList, Page, Status};
use crate::money;
use crate::output::{self, Output, Render};
use crate::window::{self, WindowArgs};
use crate::{resolve, schema};

/// Account verbs. Wherever an account is named, its id or its (unique)
/// name will do.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create an account.
    #[command(after_help = "Examples:\n  \
        gwctl account create --name acme --balance 100\n  \
        gwctl account create --name internal --unlimited --groups default,vip\n  \
        gwctl account create --name team --unlimited --period month --period-quota 500 --time-zone America/New_York")]
    Create(CreateArgs),
    /// List accounts, by id.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl account list\n  \
        gwctl account list --status disabled -o name\n  \
        gwctl account list --group vip --limit 50 --continue acc_k2x9"
    )]
    List(ListArgs),
    /// Show one account.
    #[command(
        alias = "show",
        after_help = "Examples:\n  gwctl account get acme\n  gwctl account get acc_3k2j9x -o json\n  gwctl account show    # an account credential's own account"
    )]
    Get {
        /// Id or name of the account [default: an account credential's own].
        account: Option<String>,
    },
    /// Add to (or, with a negative amount, deduct from) an account's balance.
    #[command(
        alias = "top-up",
        after_help = "Examples:\n  gwctl account topup acme --amount 25\n  gwctl account topup acme --amount -2.5"
    )]
    Topup {
        /// Id or name of the account.
        account: String,
        /// US dollars, up to 6 decimals; negative deducts.
        #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd)]
        amount: i64,
    },
    /// Change an account; flags left out stay as they are.
    #[command(after_help = "Examples:\n  \
        gwctl account update acme --groups default,vip\n  \
        gwctl account update acme --status disabled\n  \
        gwctl account update acc_3k2j9x --name acme-corp\n  \
        gwctl account update acme --period week --period-quota 50")]
    Update(UpdateArgs),
    /// Delete an account (it must have no tokens left).
    #[command(
        alias = "rm",
        after_help = "Examples:\n  gwctl account delete acme --dry-run\n  gwctl account delete acme --yes"
    )]
    Delete(DeleteArgs),
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Name of the account, unique among accounts.
    #[arg(long)]
    name: String,
    /// Opening balance in US dollars.
    #[arg(long, default_value = "0", value_parser = money::parse_usd_non_negative)]
    balance: i64,
    /// Never refuse requests for the balance.
    #[arg(long)]
    unlimited: bool,
    /// Groups the account's tokens may use, comma-separated.
    #[arg(long, default_value = "default")]
    groups: CsvList,
    #[command(flatten)]
    window: WindowArgs,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only accounts in this status.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Only accounts allowed this group.
    #[arg(long)]
    group: Option<String>,
    #[command(flatten)]
    page: Page,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Id or name of the account.
    account: String,
    /// New name, unique among accounts.
    #[arg(long)]
    name: Option<String>,
    /// Replaces the allowed groups, comma-separated.
    #[arg(long)]
    groups: Option<CsvList>,
    /// The balance may go below zero without refusals, as on create;
    /// `--unlimited false` ends that.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    unlimited: Option<bool>,
    /// Enable or disable every token of the account.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Replaces the window budget (all of its flags at once).
    #[command(flatten)]
    window: WindowArgs,
}

/// Runs one account verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let request = pb::CreateAccountRequest {
                name: args.name,
                balance_micros: args.balance,
                unlimited: args.unlimited,
                groups: args.groups.into(),
                window: args.window.request(),
            };
            output::render_one(out, &admin.create_account(request).await.rpc()?)
        }
        Command::List(args) => {
            let request = pb::ListRequest {
                status: args.status.map(|s| s.as_str().to_owned()).unwrap_or_default(),
                group: args.group.unwrap_or_default(),
                ..args.page.request()
            };
            let list = admin.list_accounts(request).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Get { account } => {
            let id = match account {
                Some(account) => resolve::account(admin, &account).await?,
                None => String::new(),
            };
            output::render_one(out, &admin.get_account(pb::GetRequest { id }).await.rpc()?)
        }
        Command::Topup { account, amount } => {
            let id = resolve::account(admin, &account).await?;
            let request = pb::TopUpRequest { id, amount_micros: amount };
            let account = admin.top_up_account(request).await.rpc()?;
            let what =
                format!("topped up by {} (balance {})", output::usd(amount), output::usd(account.balance_micros));
            output::render_changed(out, "account", &account, &what)
        }
        Command::Update(mut args) => {
            args.account = resolve::account(admin, &args.account).await?;
            let request = update_request(args);
            output::render_changed(out, "account", &admin.update_account(request).await.rpc()?, "updated")
        }
        Command::Delete(args) => {
            let id = resolve::account(admin, &args.target).await?;
            if !args.dry_run {
                confirm::delete(&args, &format!("account {id} ({:?})", args.target))?;
                admin.delete_account(pb::GetRequest { id: id.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "account", &id, args.dry_run)
        }
    }
}

fn update_request(args: UpdateArgs) -> pb::UpdateAccountRequest {
    pb::UpdateAccountRequest {
        id: args.account,
        name: args.name,
        unlimited: args.unlimited,
        set_groups: args.groups.is_some(),
        groups: args.groups.map(Vec::from).unwrap_or_default(),
        status: args.status.map(|s| s.as_str().to_string()),
        window: args.window.request(),
    }
}

// === impl Render for pb::Account ===

impl Render for pb::Account {
    const COLUMNS: &'static [&'static str] = &["ID", "NAME", "STATUS", "BALANCE", "USED", "GROUPS"];
    const WIDE: &'static [&'static str] = &["WINDOW", "CREATED"];
    type Json = schema::Account;

    fn json(&self) -> schema::Account {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.status.clone(),
            balance(self),
            output::usd(self.used_micros),
            output::list(&self.groups, "-"),
        ]
    }

    fn wide_row(&self) -> Vec<String> {
        vec![window::summary(self.window.as_ref()), output::time(self.created_at)]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("id", self.id.clone()),
            ("name", self.name.clone()),
            ("status", self.status.clone()),
            ("balance", balance(self)),
            ("used", output::usd(self.used_micros)),
            ("groups", output::list(&self.groups, "-")),
            ("created", output::time(self.created_at)),
        ];
        fields.extend(window::fields(self.window.as_ref()));
        fields
    }
}

fn balance(account: &pb::Account) -> String {
    let balance = output::usd(account.balance_micros);
    if account.unlimited { format!("unlimited ({balance})") } else { balance }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn account_json_has_micros_and_exact_dollars() {
        let account = pb::Account { id: "acc_1".into(), balance_micros: 100_100_000, ..Default::default() };
        let json = serde_json::to_value(account.json()).unwrap();
        assert_eq!(json["balance_micros"], 100_100_000);
        assert_eq!(json["balance_usd"], "100.100000");
        assert_eq!(account.name(), "acc_1");
    }

    #[test]
    fn update_only_sets_groups_when_given() {
        let args = UpdateArgs {
            account: "a".into(),
            name: None,
            groups: None,
            unlimited: Some(true),
            status: Some(Status::Disabled),
            window: WindowArgs::default(),
        };
        let request = update_request(args);
        assert!(!request.set_groups);
        assert_eq!(request.unlimited, Some(true));
        assert_eq!(request.status.as_deref(), Some("disabled"));

        let args = UpdateArgs {
            account: "a".into(),
            name: None,
            groups: Some("".parse().unwrap()),
            unlimited: None,
            status: None,
            window: WindowArgs::default(),
        };
        let request = update_request(args);
        assert!(request.set_groups && request.groups.is_empty());
    }
}
