//! `gwctl account`: accounts hold the balance that every token of theirs
//! spends, and the groups those tokens may use.

use anyhow::Result;
use gw_proto::pb;
use serde_json::Value;

use crate::client::{Admin, RpcResult};
use crate::flags::{CsvList, Status};
use crate::money;
use crate::output::{self, Output, Render};

/// Account verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create an account.
    Create(CreateArgs),
    /// List accounts.
    #[command(alias = "ls")]
    List,
    /// Show one account.
    Get { id: String },
    /// Add to (or, with a negative amount, deduct from) an account's balance.
    #[command(alias = "top-up")]
    Topup {
        id: String,
        /// US dollars, up to 6 decimals; negative deducts.
        #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd)]
        amount: i64,
    },
    /// Change an account; flags left out stay as they are.
    Update(UpdateArgs),
    /// Delete an account.
    #[command(alias = "rm")]
    Delete { id: String },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
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
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    id: String,
    #[arg(long)]
    name: Option<String>,
    /// Replaces the allowed groups, comma-separated.
    #[arg(long)]
    groups: Option<CsvList>,
    #[arg(long)]
    unlimited: Option<bool>,
    #[arg(long, value_enum)]
    status: Option<Status>,
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
            };
            output::render_one(out, &admin.create_account(request).await.rpc()?)
        }
        Command::List => {
            let list = admin.list_accounts(pb::ListRequest {}).await.rpc()?;
            output::render_list(out, &list.items)
        }
        Command::Get { id } => output::render_one(out, &admin.get_account(pb::GetRequest { id }).await.rpc()?),
        Command::Topup { id, amount } => {
            let request = pb::TopUpRequest { id, amount_micros: amount };
            output::render_one(out, &admin.top_up_account(request).await.rpc()?)
        }
        Command::Update(args) => {
            let request = update_request(args);
            output::render_one(out, &admin.update_account(request).await.rpc()?)
        }
        Command::Delete { id } => {
            admin.delete_account(pb::GetRequest { id: id.clone() }).await.rpc()?;
            output::render_deleted(out, "account", &id)
        }
    }
}

fn update_request(args: UpdateArgs) -> pb::UpdateAccountRequest {
    pb::UpdateAccountRequest {
        id: args.id,
        name: args.name,
        unlimited: args.unlimited,
        set_groups: args.groups.is_some(),
        groups: args.groups.map(Vec::from).unwrap_or_default(),
        status: args.status.map(|s| s.as_str().to_string()),
    }
}

// === impl Render for pb::Account ===

impl Render for pb::Account {
    const COLUMNS: &'static [&'static str] = &["ID", "NAME", "STATUS", "BALANCE", "USED", "GROUPS", "CREATED"];

    fn to_json(&self) -> Value {
        let mut object = output::to_object(self);
        output::add_usd(&mut object, &[("balance", self.balance_micros), ("used", self.used_micros)]);
        Value::Object(object)
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.status.clone(),
            balance(self),
            output::usd(self.used_micros),
            output::list(&self.groups, "-"),
            output::time(self.created_at),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("name", self.name.clone()),
            ("status", self.status.clone()),
            ("balance", balance(self)),
            ("used", output::usd(self.used_micros)),
            ("groups", output::list(&self.groups, "-")),
            ("created", output::time(self.created_at)),
        ]
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
    fn account_json_adds_usd_next_to_micros() {
        let account = pb::Account {
            id: "acc_1".into(),
            name: "acme".into(),
            balance_micros: 100_100_000,
            used_micros: 250_000,
            groups: vec!["default".into()],
            status: "enabled".into(),
            ..Default::default()
        };
        let json = account.to_json();
        assert_eq!(json["balance"], 100.1);
        assert_eq!(json["balance_micros"], 100_100_000);
        assert_eq!(json["used"], 0.25);
        assert_eq!(json["used_micros"], 250_000);
        assert_eq!(json["groups"], serde_json::json!(["default"]));
        assert_eq!(json["id"], "acc_1");
    }

    #[test]
    fn update_only_sets_groups_when_given() {
        let args = UpdateArgs {
            id: "a".into(),
            name: None,
            groups: None,
            unlimited: Some(true),
            status: Some(Status::Disabled),
        };
        let request = update_request(args);
        assert!(!request.set_groups);
        assert_eq!(request.unlimited, Some(true));
        assert_eq!(request.status.as_deref(), Some("disabled"));

        let args =
            UpdateArgs { id: "a".into(), name: None, groups: Some("".parse().unwrap()), unlimited: None, status: None };
        let request = update_request(args);
        assert!(request.set_groups && request.groups.is_empty());
    }
}
