//! `gwctl token`: API keys. A token belongs to an account and one group, may
//! be capped by its own quota and per day, week, month or rolling hours,
//! limited to models and source addresses, and expire. The key is shown once, when the token is created.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs};
use crate::flags::{self, CsvList, Page, Status};
use crate::money;
use crate::output::{self, Output, Render};
use crate::window::{self, WindowArgs};
use crate::{resolve, schema};

/// Token verbs. A token is named by its id, or by its name when no other
/// token has it.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a token and print its key, the only time it is shown.
    #[command(after_help = "Examples:\n  \
        gwctl token create --account acme\n  \
        gwctl token create --account acme --name ci --quota 5 --models gpt-4o-mini --expires 2027-01-01T00:00:00Z\n  \
        gwctl token create --account acme --period day --period-quota 2 --time-zone Europe/Berlin\n  \
        gwctl token create --account acme -o json | jq -r .key")]
    Create(CreateArgs),
    /// List tokens, by id.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl token list --account acme\n  \
        gwctl token list --status disabled -o name\n  \
        gwctl token list --group vip --model gpt-4o -o wide"
    )]
    List(ListArgs),
    /// Show one token.
    #[command(after_help = "Examples:\n  gwctl token get tok_8f2k1m\n  gwctl token get ci -o yaml")]
    Get {
        /// Id or name of the token.
        token: String,
    },
    /// Change a token; flags left out stay as they are.
    #[command(after_help = "Examples:\n  \
        gwctl token update ci --quota 20\n  \
        gwctl token update ci --period rolling --rolling-hours 5 --period-quota 1\n  \
        gwctl token update ci --models '' --rate-limit 60/1\n  \
        gwctl token update tok_8f2k1m --expires never")]
    Update(UpdateArgs),
    /// Refuse every request of the token until it is enabled again.
    #[command(
        after_help = "Examples:\n  gwctl token disable ci\n  gwctl token list --account acme -o name | xargs -n1 gwctl token disable"
    )]
    Disable {
        /// Id or name of the token.
        token: String,
    },
    /// Accept requests of the token again.
    #[command(after_help = "Examples:\n  gwctl token enable ci")]
    Enable {
        /// Id or name of the token.
        token: String,
    },
    /// Create tokens in bulk from JSON Lines or CSV; rows that fail are reported by line.
    #[command(after_help = "Examples:\n  \
        gwctl token import tokens.jsonl\n  \
        gwctl token import tokens.csv --mint --keys-out keys.jsonl\n  \
        cat tokens.jsonl | gwctl token import - --mint -o json\n\n\
        Columns (CSV header) or fields (JSON): account (id or name), group, name, key,\n\
        quota (USD), unlimited, models, allow_ips, expires (RFC 3339), rate_limit (MAX/MINUTES), status.")]
    Import(crate::import::Args),
    /// Delete a token; its key stops working.
    #[command(
        alias = "rm",
        after_help = "Examples:\n  gwctl token delete ci --dry-run\n  gwctl token delete tok_8f2k1m --yes"
    )]
    Delete(DeleteArgs),
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Account the token spends from: id or name [default: an account credential's own].
    #[arg(long)]
    account: Option<String>,
    /// Group the token's requests are priced and limited by.
    #[arg(long, default_value = "default")]
    group: String,
    /// A label for people; tokens may share one.
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
    /// Tokens (input + output) per minute [default: no limit].
    #[arg(long, value_parser = flags::parse_count_limit)]
    tokens_per_minute: Option<u32>,
    /// Requests in flight at once [default: no limit].
    #[arg(long, value_parser = flags::parse_count_limit)]
    max_in_flight: Option<u32>,
    #[command(flatten)]
    window: WindowArgs,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only tokens of this account (id or name).
    #[arg(long)]
    account: Option<String>,
    /// Only tokens in this status.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Only tokens in this group.
    #[arg(long)]
    group: Option<String>,
    /// Only tokens that may call this model.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    page: Page,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Id or name of the token.
    token: String,
    /// New label.
    #[arg(long)]
    name: Option<String>,
    /// New group (one the account may use).
    #[arg(long)]
    group: Option<String>,
    /// New spending cap in US dollars; makes the token limited.
    #[arg(long, value_parser = money::parse_usd_non_negative, conflicts_with = "unlimited")]
    quota: Option<i64>,
    /// No spending cap of its own, as on create; `--unlimited false` makes
    /// it limited again at the quota it has (`--quota` sets a new one).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
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
    /// Tokens (input + output) per minute, or off.
    #[arg(long, value_parser = flags::parse_count_limit)]
    tokens_per_minute: Option<u32>,
    /// Requests in flight at once, or off.
    #[arg(long, value_parser = flags::parse_count_limit)]
    max_in_flight: Option<u32>,
    /// Enable or disable the token.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Replaces the window budget (all of its flags at once).
    #[command(flatten)]
    window: WindowArgs,
}

/// Runs one token verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(mut args) => {
            if let Some(account) = &args.account {
                args.account = Some(resolve::account(admin, account).await?);
            }
            let created = admin.create_token(create_request(args)).await.rpc()?;
            render_created(out, &created)
        }
        Command::List(args) => {
            let account = match &args.account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let request = pb::ListRequest {
                account_id: account,
                status: args.status.map(|s| s.as_str().to_owned()).unwrap_or_default(),
                group: args.group.unwrap_or_default(),
                model: args.model.unwrap_or_default(),
                ..args.page.request()
            };
            let list = admin.list_tokens(request).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Get { token } => {
            let id = resolve::token(admin, &token).await?;
            output::render_one(out, &admin.get_token(pb::GetRequest { id }).await.rpc()?)
        }
        Command::Update(mut args) => {
            args.token = resolve::token(admin, &args.token).await?;
            output::render_changed(out, "token", &admin.update_token(update_request(args)).await.rpc()?, "updated")
        }
        Command::Import(args) => crate::import::run(args, admin, out).await,
        Command::Disable { token } => set_status(admin, out, token, Status::Disabled).await,
        Command::Enable { token } => set_status(admin, out, token, Status::Enabled).await,
        Command::Delete(args) => {
            let id = resolve::token(admin, &args.target).await?;
            if !args.dry_run {
                confirm::delete(&args, &format!("token {id}"))?;
                admin.delete_token(pb::GetRequest { id: id.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "token", &id, args.dry_run)
        }
    }
}

async fn set_status(admin: &mut Admin, out: Output, token: String, status: Status) -> Result<String> {
    let id = resolve::token(admin, &token).await?;
    let request = pb::UpdateTokenRequest { id, status: Some(status.as_str().to_string()), ..Default::default() };
    output::render_changed(out, "token", &admin.update_token(request).await.rpc()?, status.as_str())
}

fn create_request(args: CreateArgs) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest {
        account_id: args.account.unwrap_or_default(),
        group: args.group,
        name: args.name,
        // Without a quota the token is bounded only by its account.
        unlimited: args.unlimited || args.quota.is_none(),
        quota_micros: args.quota.unwrap_or(0),
        models: args.models.map(Vec::from).unwrap_or_default(),
        allow_ips: args.allow_ip.map(Vec::from).unwrap_or_default(),
        expires_at: args.expires.unwrap_or(0),
        rate_limit: args.rate_limit,
        tokens_per_minute: args.tokens_per_minute.unwrap_or(0),
        max_in_flight: args.max_in_flight.unwrap_or(0),
        window: args.window.request(),
    }
}

fn update_request(args: UpdateArgs) -> pb::UpdateTokenRequest {
    pb::UpdateTokenRequest {
        id: args.token,
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
        tokens_per_minute: args.tokens_per_minute,
        max_in_flight: args.max_in_flight,
        window: args.window.request(),
    }
}

/// The created token with its key: JSON and YAML are the token object
/// plus `"key"`; the table form shows the key last, then a warning that it
/// is not shown again; `-o name` prints the id and warns that the key was
/// not printed.
fn render_created(out: Output, created: &pb::CreatedToken) -> Result<String> {
    let token = created.token.clone().unwrap_or_default();
    match out {
        Output::Json => output::json_text(&created_json(created)),
        Output::Yaml => output::yaml_text(&created_json(created)),
        Output::Name => {
            eprintln!("warning: -o name prints the token id only; its key is not shown again");
            Ok(format!("{}\n", token.id))
        }
        Output::Csv => {
            let mut fields = token.fields();
            fields.push(("key", created.key.clone()));
            eprintln!("warning: copy the key now; it is not shown again");
            let (labels, values): (Vec<&str>, Vec<String>) = fields.into_iter().unzip();
            Ok(output::csv_text(&labels, &[values]))
        }
        Output::Table | Output::Wide => {
            let mut fields = token.fields();
            fields.push(("key", created.key.clone()));
            Ok(format!("{}\nwarning: copy the key now; it is not shown again\n", output::fields_text(&fields)))
        }
    }
}

fn created_json(created: &pb::CreatedToken) -> schema::CreatedToken {
    let token = created.token.clone().unwrap_or_default();
    schema::CreatedToken { token: (&token).into(), key: created.key.clone() }
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
    const WIDE: &'static [&'static str] = &["ALLOWED IPS", "RATE LIMIT", "WINDOW", "CREATED"];
    type Json = schema::Token;

    fn json(&self) -> schema::Token {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
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

    fn wide_row(&self) -> Vec<String> {
        vec![
            output::list(&self.allow_ips, "any"),
            output::rate_limit(self.rate_limit.as_ref()),
            window::summary(self.window.as_ref()),
            output::time(self.created_at),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
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
            ("tokens per minute", output::count_limit(self.tokens_per_minute)),
            ("max in flight", output::count_limit(self.max_in_flight)),
            ("expires", expires(self)),
            ("created", output::time(self.created_at)),
        ];
        fields.extend(window::fields(self.window.as_ref()));
        fields
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn create_args() -> CreateArgs {
        CreateArgs {
            account: Some("acc_1".into()),
            group: "default".into(),
            name: String::new(),
            quota: None,
            unlimited: false,
            models: None,
            allow_ip: None,
            expires: None,
            rate_limit: None,
            tokens_per_minute: None,
            max_in_flight: None,
            window: WindowArgs::default(),
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
            token: "tok_1".into(),
            name: None,
            group: None,
            quota: Some(1_000_000),
            unlimited: None,
            models: Some("".parse().unwrap()),
            allow_ip: None,
            expires: Some(0),
            rate_limit: None,
            tokens_per_minute: Some(0),
            max_in_flight: None,
            status: None,
            window: WindowArgs::default(),
        };
        let request = update_request(args);
        assert_eq!(request.unlimited, Some(false));
        assert_eq!(request.quota_micros, Some(1_000_000));
        assert!(request.set_models && request.models.is_empty());
        assert!(!request.set_allow_ips);
        assert_eq!(request.expires_at, Some(0));
        assert_eq!((request.tokens_per_minute, request.max_in_flight), (Some(0), None), "off clears, unset keeps");
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
        let json = serde_json::to_value(created_json(&created)).unwrap();
        assert_eq!(json["id"], "tok_1");
        assert_eq!(json["key"], "sk-secret");
        assert_eq!(json["quota_usd"], "5.000000");
        assert_eq!(json["used_usd"], "0.000001");
        assert_eq!(json["quota_micros"], 5_000_000);
    }
}
