//! `gwctl token`: API keys. A token belongs to an account and one group, may
//! be capped by its own quota, limited to models and source addresses, and
//! expire. The key is shown once, when the token is created.

use anyhow::Result;
use gw_proto::pb;
use serde_json::Value;

use crate::client::{Admin, RpcResult};
use crate::flags::{self, CsvList, Status};
use crate::money;
use crate::output::{self, Output, Render};

/// Token verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a token and print its key, the only time it is shown.
    Create(CreateArgs),
    /// List tokens.
    #[command(alias = "ls")]
    List,
    /// Show one token.
    Get { id: String },
    /// Change a token; flags left out stay as they are.
    Update(UpdateArgs),
    /// Refuse every request of the token until it is enabled again.
    Disable { id: String },
    /// Accept requests of the token again.
    Enable { id: String },
    /// Delete a token; its key stops working.
    #[command(alias = "rm")]
    Delete { id: String },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Account the token spends from.
    #[arg(long)]
    account: String,
    #[arg(long, default_value = "default")]
    group: String,
    #[arg(long, default_value = "", hide_default_value = true)]
    name: String,
    /// The token's own spending cap in US dollars [default: unlimited, bounded by the account].
    #[arg(long, value_parser = money::parse_usd_non_negative, conflicts_with = "unlimited")]
    quota: Option<i64>,
    /// No spending cap of its own (the default without --quota).
    #[arg(long)]
    unlimited: bool,
    /// Models the token may call, comma-separated [default: all of its group].
    #[arg(long)]
    models: Option<CsvList>,
    /// Source addresses allowed, IPs or CIDRs, comma-separated [default: any].
    #[arg(long, value_parser = flags::parse_ip_list)]
    allow_ip: Option<CsvList>,
    /// Expiry time, RFC 3339 (2027-01-01T00:00:00Z) [default: never].
    #[arg(long, value_parser = flags::parse_expiry)]
    expires: Option<i64>,
    /// Requests per window: MAX/MINUTES, e.g. 60/1.
    #[arg(long, value_parser = flags::parse_rate_limit)]
    rate_limit: Option<pb::RateLimit>,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    id: String,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    group: Option<String>,
    /// New spending cap in US dollars; makes the token limited.
    #[arg(long, value_parser = money::parse_usd_non_negative, conflicts_with = "unlimited")]
    quota: Option<i64>,
    #[arg(long)]
    unlimited: Option<bool>,
    /// Replaces the model allowlist; "" allows every model of the group.
    #[arg(long)]
    models: Option<CsvList>,
    /// Replaces the address allowlist; "" allows any address.
    #[arg(long, value_parser = flags::parse_ip_list)]
    allow_ip: Option<CsvList>,
    /// New expiry time (RFC 3339), or never.
    #[arg(long, value_parser = flags::parse_expiry)]
    expires: Option<i64>,
    /// Requests per window: MAX/MINUTES, e.g. 60/1, or off.
    #[arg(long, value_parser = flags::parse_rate_limit)]
    rate_limit: Option<pb::RateLimit>,
    #[arg(long, value_enum)]
    status: Option<Status>,
}

/// Runs one token verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let created = admin.create_token(create_request(args)).await.rpc()?;
            render_created(out, &created)
        }
        Command::List => {
            let list = admin.list_tokens(pb::ListRequest {}).await.rpc()?;
            output::render_list(out, &list.items)
        }
        Command::Get { id } => output::render_one(out, &admin.get_token(pb::GetRequest { id }).await.rpc()?),
        Command::Update(args) => output::render_one(out, &admin.update_token(update_request(args)).await.rpc()?),
        Command::Disable { id } => set_status(admin, out, id, Status::Disabled).await,
        Command::Enable { id } => set_status(admin, out, id, Status::Enabled).await,
        Command::Delete { id } => {
            admin.delete_token(pb::GetRequest { id: id.clone() }).await.rpc()?;
            output::render_deleted(out, "token", &id)
        }
    }
}

async fn set_status(admin: &mut Admin, out: Output, id: String, status: Status) -> Result<String> {
    let request = pb::UpdateTokenRequest { id, status: Some(status.as_str().to_string()), ..Default::default() };
    output::render_one(out, &admin.update_token(request).await.rpc()?)
}

fn create_request(args: CreateArgs) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest {
        account_id: args.account,
        group: args.group,
        name: args.name,
        // Without a quota the token is bounded only by its account.
        unlimited: args.unlimited || args.quota.is_none(),
        quota_micros: args.quota.unwrap_or(0),
        models: args.models.map(Vec::from).unwrap_or_default(),
        allow_ips: args.allow_ip.map(Vec::from).unwrap_or_default(),
        expires_at: args.expires.unwrap_or(0),
        rate_limit: args.rate_limit,
    }
}

fn update_request(args: UpdateArgs) -> pb::UpdateTokenRequest {
    pb::UpdateTokenRequest {
        id: args.id,
        name: args.name,
        group: args.group,
        status: args.status.map(|s| s.as_str().to_string()),
        // A new quota means the token is capped again.
        unlimited: args.quota.map(|_| false).or(args.unlimited),
        quota_micros: args.quota,
        set_models: args.models.is_some(),
        models: args.models.map(Vec::from).unwrap_or_default(),
        set_allow_ips: args.allow_ip.is_some(),
        allow_ips: args.allow_ip.map(Vec::from).unwrap_or_default(),
        expires_at: args.expires,
        rate_limit: args.rate_limit,
    }
}

/// The created token with its key: JSON is the token object plus `"key"`;
/// the table form shows the key last, then a warning that it is not shown
/// again.
fn render_created(out: Output, created: &pb::CreatedToken) -> Result<String> {
    match out {
        Output::Json => output::json_text(&created_json(created)),
        Output::Table => {
            let mut fields = created.token.clone().unwrap_or_default().fields();
            fields.push(("key", created.key.clone()));
            Ok(format!("{}\nwarning: copy the key now; it is not shown again\n", output::fields_text(&fields)))
        }
    }
}

fn created_json(created: &pb::CreatedToken) -> Value {
    let mut json = created.token.clone().unwrap_or_default().to_json();
    if let Value::Object(object) = &mut json {
        object.insert("key".into(), Value::from(created.key.clone()));
    }
    json
}

fn quota(token: &pb::Token) -> String {
    if token.unlimited { "unlimited".to_string() } else { output::usd(token.quota_micros) }
}

fn expires(token: &pb::Token) -> String {
    match token.expires_at {
        0 => "never".to_string(),
        at => output::time(at),
    }
}

// === impl Render for pb::Token ===

impl Render for pb::Token {
    const COLUMNS: &'static [&'static str] =
        &["ID", "NAME", "KEY", "ACCOUNT", "GROUP", "STATUS", "QUOTA", "USED", "MODELS", "EXPIRES"];

    fn to_json(&self) -> Value {
        let mut object = output::to_object(self);
        output::add_usd(&mut object, &[("quota", self.quota_micros), ("used", self.used_micros)]);
        Value::Object(object)
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.key_prefix.clone(),
            self.account_id.clone(),
            self.group.clone(),
            self.status.clone(),
            quota(self),
            output::usd(self.used_micros),
            output::list(&self.models, "all"),
            expires(self),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("name", self.name.clone()),
            ("key prefix", self.key_prefix.clone()),
            ("account", self.account_id.clone()),
            ("group", self.group.clone()),
            ("status", self.status.clone()),
            ("quota", quota(self)),
            ("used", output::usd(self.used_micros)),
            ("models", output::list(&self.models, "all")),
            ("allowed IPs", output::list(&self.allow_ips, "any")),
            ("rate limit", output::rate_limit(self.rate_limit.as_ref())),
            ("expires", expires(self)),
            ("created", output::time(self.created_at)),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn create_args() -> CreateArgs {
        CreateArgs {
            account: "acc_1".into(),
            group: "default".into(),
            name: String::new(),
            quota: None,
            unlimited: false,
            models: None,
            allow_ip: None,
            expires: None,
            rate_limit: None,
        }
    }

    #[test]
    fn token_without_quota_is_unlimited() {
        assert!(create_request(create_args()).unlimited);
        let capped = create_request(CreateArgs { quota: Some(5_000_000), ..create_args() });
        assert!(!capped.unlimited);
        assert_eq!(capped.quota_micros, 5_000_000);
    }

    #[test]
    fn update_with_quota_caps_the_token() {
        let args = UpdateArgs {
            id: "tok_1".into(),
            name: None,
            group: None,
            quota: Some(1_000_000),
            unlimited: None,
            models: Some("".parse().unwrap()),
            allow_ip: None,
            expires: Some(0),
            rate_limit: None,
            status: None,
        };
        let request = update_request(args);
        assert_eq!(request.unlimited, Some(false));
        assert_eq!(request.quota_micros, Some(1_000_000));
        assert!(request.set_models && request.models.is_empty());
        assert!(!request.set_allow_ips);
        assert_eq!(request.expires_at, Some(0));
    }

    #[test]
    fn created_json_is_the_token_plus_its_key() {
        let created = pb::CreatedToken {
            token: Some(pb::Token {
                id: "tok_1".into(),
                quota_micros: 5_000_000,
                used_micros: 1,
                ..Default::default()
            }),
            key: "sk-secret".into(),
        };
        let json = created_json(&created);
        assert_eq!(json["id"], "tok_1");
        assert_eq!(json["key"], "sk-secret");
        assert_eq!(json["quota"], 5.0);
        assert_eq!(json["used"], 0.000001);
        assert_eq!(json["quota_micros"], 5_000_000);
    }
}
