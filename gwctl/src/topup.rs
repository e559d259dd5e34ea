//! `gwctl topup-code`: codes worth an amount of balance to the first
//! account that redeems one (in the console, or with `redeem`). Codes are
//! shown once, when minted: written to `--out` (a new file, mode 0600) or
//! printed. The control plane keeps only their hashes.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::money;
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// Top-up code verbs. A code's record is named by its id (`tpc_…`).
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Mint codes, each worth --amount to the account that redeems it.
    #[command(after_help = "Examples:\n  \
        gwctl topup-code create --amount 10 --count 100 --out codes.txt\n  \
        gwctl topup-code create --amount 25 --expires 30d --out promo.txt\n  \
        gwctl topup-code create --amount 5 --expires 2027-01-01")]
    Create {
        /// US dollars each code is worth, up to 6 decimals.
        #[arg(long, value_parser = parse_amount)]
        amount: i64,
        /// How many codes to mint (1 to 10000).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        count: u32,
        /// When the codes expire: a span from now (30d, 12h), a date
        /// (2027-01-01, midnight UTC), RFC 3339, or never [default: never].
        #[arg(long, value_parser = parse_expiry)]
        expires: Option<i64>,
        /// Write the codes here, one a line, instead of printing them: a new
        /// file (mode 0600); an existing file is never replaced.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// List codes, by id; never the codes themselves.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
            gwctl topup-code list\n  \
            gwctl topup-code list --status active -o json\n  \
            gwctl topup-code list --account acme"
    )]
    List {
        /// Only codes this account redeemed (id or name); an account
        /// credential always sees only its own.
        #[arg(long)]
        account: Option<String>,
        /// Only codes of this status.
        #[arg(long, value_enum)]
        status: Option<CodeStatus>,
        #[command(flatten)]
        page: crate::flags::Page,
    },
    /// Revoke an unredeemed code so it can no longer be redeemed.
    #[command(after_help = "Examples:\n  gwctl topup-code revoke tpc_8f2k1m4x9q0z")]
    Revoke {
        /// Id of the code.
        id: String,
    },
    /// Redeem a code for an account: its balance rises by the code's amount.
    #[command(after_help = "Examples:\n  \
        gwctl topup-code redeem gwtopup-… --account acme\n  \
        gwctl topup-code redeem gwtopup-…          # an account credential's own account")]
    Redeem {
        /// The code.
        code: String,
        /// The account to credit (id or name) [default: an account credential's own].
        #[arg(long)]
        account: Option<String>,
    },
}

/// A code's state, as the control plane spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CodeStatus {
    Active,
    Redeemed,
    Revoked,
    Expired,
}

/// A redeemed code, as printed.
struct Redeemed(pb::RedeemedTopupCode);

/// Runs one top-up code verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create { amount, count, expires, out: path } => {
            // The file first: codes minted with nowhere to go would be lost.
            let file = path.as_deref().map(new_file).transpose()?;
            let request =
                pb::CreateTopupCodesRequest { count, amount_micros: amount, expires_at: expires.unwrap_or(0) };
            let created = match admin.create_topup_codes(request).await.rpc() {
                Ok(created) => created,
                Err(error) => {
                    if let Some(path) = &path {
                        let _ = std::fs::remove_file(path);
                    }
                    return Err(error);
                }
            };
            if let (Some(mut file), Some(path)) = (file, &path) {
                let codes: String = created.items.iter().map(|c| format!("{}\n", c.code)).collect();
                file.write_all(codes.as_bytes())
                    .and_then(|()| file.sync_all())
                    .with_context(|| format!("writing {} (the codes were minted; revoke them)", path.display()))?;
            }
            render_created(out, &created.items, path.as_deref())
        }
        Command::List { account, status, page } => {
            let account_id = match &account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let status = status.map(|s| s.as_str().to_owned()).unwrap_or_default();
            let request = pb::ListRequest { account_id, status, ..page.request() };
            let list = admin.list_topup_codes(request).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Revoke { id } => {
            let code = admin.revoke_topup_code(pb::GetRequest { id }).await.rpc()?;
            output::render_one(out, &code)
        }
        Command::Redeem { code, account } => {
            let account_id = match &account {
                Some(account) => resolve::account(admin, account).await?,
                None => String::new(),
            };
            let redeemed = admin.redeem_topup_code(pb::RedeemTopupCodeRequest { code, account_id }).await.rpc()?;
            output::render_one(out, &Redeemed(redeemed))
        }
    }
}

/// A new file at `path` that only its owner may read; refuses to replace
/// an existing one.
fn new_file(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).with_context(|| {
        format!("creating {} (an existing file is never replaced; no code was minted)", path.display())
    })
}

/// The minted codes: with `out`, a summary (the codes are in the file);
/// otherwise each code beside its record, with a warning for people.
fn render_created(out: Output, items: &[pb::CreatedTopupCode], file: Option<&Path>) -> Result<String> {
    let record = |c: &pb::CreatedTopupCode| c.topup_code.clone().unwrap_or_default();
    let json = || schema::CreatedTopupCodes {
        items: items
            .iter()
            .map(|c| schema::CreatedTopupCode {
                topup_code: (&record(c)).into(),
                code: file.is_none().then(|| c.code.clone()),
            })
            .collect(),
        out: file.map(|p| p.display().to_string()),
    };
    match out {
        Output::Json => output::json_text(&json()),
        Output::Yaml => output::yaml_text(&json()),
        Output::Name => {
            if file.is_none() {
                eprintln!("warning: -o name prints the ids only; the codes are not shown again");
            }
            Ok(items.iter().map(|c| format!("{}\n", record(c).id)).collect())
        }
        Output::Table | Output::Wide | Output::Csv => {
            let first = items.first().map(record).unwrap_or_default();
            if let Some(path) = file {
                return Ok(format!(
                    "wrote {} code(s) worth {} each, expiring {}, to {}\n",
                    items.len(),
                    output::usd(first.amount_micros),
                    expires(first.expires_at),
                    path.display()
                ));
            }
            let columns = ["CODE", "ID", "AMOUNT", "EXPIRES"];
            let rows: Vec<Vec<String>> = items
                .iter()
                .map(|c| {
                    let r = record(c);
                    vec![c.code.clone(), r.id, output::usd(r.amount_micros), expires(r.expires_at)]
                })
                .collect();
            if out == Output::Csv {
                return Ok(output::csv_text(&columns, &rows));
            }
            let mut text = output::table_text(&columns, &rows);
            text.push_str("warning: copy the codes now; they are not shown again\n");
            Ok(text)
        }
    }
}

/// US dollars, more than zero.
fn parse_amount(text: &str) -> Result<i64, String> {
    let micros = money::parse_usd(text).map_err(|err| err.to_string())?;
    if micros <= 0 {
        return Err(format!("invalid amount {text:?}: must be more than zero"));
    }
    Ok(micros)
}

/// A time ahead: `never` (0), a span from now (`30d`, `12h`, `90m`), a
/// date (`2027-01-01`, midnight UTC) or RFC 3339. Unix seconds.
fn parse_expiry(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if matches!(text, "never" | "0") {
        return Ok(0);
    }
    let invalid = || {
        format!("invalid time {text:?}: expected a span from now (30d, 12h), a date (2027-01-01), RFC 3339 or never")
    };
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.timestamp());
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return date.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp()).ok_or_else(invalid);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(invalid()),
    };
    if number <= 0 {
        return Err(invalid());
    }
    Ok(chrono::Utc::now().timestamp().saturating_add(number.saturating_mul(seconds)))
}

fn expires(at: i64) -> String {
    match at {
        0 => "never".into(),
        at => output::time(at),
    }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() { "-".into() } else { text.into() }
}

// === impl CodeStatus ===

impl CodeStatus {
    fn as_str(self) -> &'static str {
        match self {
            CodeStatus::Active => "active",
            CodeStatus::Redeemed => "redeemed",
            CodeStatus::Revoked => "revoked",
            CodeStatus::Expired => "expired",
        }
    }
}

// === impl Render for pb::TopupCode ===

impl Render for pb::TopupCode {
    const COLUMNS: &'static [&'static str] = &["ID", "CODE", "AMOUNT", "STATUS", "EXPIRES", "REDEEMED BY", "REDEEMED"];
    const WIDE: &'static [&'static str] = &["CREATED", "CREATED BY", "REVOKED"];
    type Json = schema::TopupCode;

    fn json(&self) -> schema::TopupCode {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.prefix.clone(),
            output::usd(self.amount_micros),
            self.status.clone(),
            expires(self.expires_at),
            or_dash(&self.redeemed_by),
            output::time(self.redeemed_at),
        ]
    }

    fn wide_row(&self) -> Vec<String> {
        vec![output::time(self.created_at), self.created_by.clone(), output::time(self.revoked_at)]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("code", self.prefix.clone()),
            ("amount", output::usd(self.amount_micros)),
            ("status", self.status.clone()),
            ("expires", expires(self.expires_at)),
            ("created", output::time(self.created_at)),
            ("created by", self.created_by.clone()),
            ("redeemed by", or_dash(&self.redeemed_by)),
            ("redeemed", output::time(self.redeemed_at)),
            ("revoked", output::time(self.revoked_at)),
        ]
    }
}

// === impl Render for Redeemed ===

impl Render for Redeemed {
    const COLUMNS: &'static [&'static str] = &["ID", "AMOUNT", "ACCOUNT", "BALANCE"];
    type Json = schema::RedeemedTopupCode;

    fn json(&self) -> schema::RedeemedTopupCode {
        (&self.0).into()
    }

    fn name(&self) -> String {
        self.0.topup_code.as_ref().map(|c| c.id.clone()).unwrap_or_default()
    }

    fn row(&self) -> Vec<String> {
        let code = self.0.topup_code.clone().unwrap_or_default();
        vec![code.id, output::usd(code.amount_micros), code.redeemed_by, output::usd(self.0.balance_micros)]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = self.0.topup_code.clone().unwrap_or_default().fields();
        fields.push(("balance", output::usd(self.0.balance_micros)));
        fields
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn minted() -> Vec<pb::CreatedTopupCode> {
        (1..=2)
            .map(|i| pb::CreatedTopupCode {
                topup_code: Some(pb::TopupCode {
                    id: format!("tpc_{i}"),
                    amount_micros: 10_000_000,
                    status: "active".into(),
                    ..Default::default()
                }),
                code: format!("gwtopup-secret{i}"),
            })
            .collect()
    }

    #[test]
    fn codes_written_to_a_file_are_not_printed_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("codes.txt");
        let mut file = new_file(&path).unwrap();
        file.write_all(b"gwtopup-secret1\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let text = render_created(Output::Json, &minted(), Some(&path)).unwrap();
        assert!(!text.contains("secret"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["items"][1]["id"], "tpc_2");
        assert_eq!(json["items"][0]["code"], serde_json::Value::Null);
        let table = render_created(Output::Table, &minted(), Some(&path)).unwrap();
        assert!(table.starts_with("wrote 2 code(s) worth $10.000000 each, expiring never"), "{table}");
        let again = new_file(&path).unwrap_err();
        assert!(format!("{again:#}").contains("never replaced"), "{again:#}");
    }

    #[test]
    fn codes_without_a_file_are_printed_once() {
        let json: serde_json::Value =
            serde_json::from_str(&render_created(Output::Json, &minted(), None).unwrap()).unwrap();
        assert_eq!(json["items"][0]["code"], "gwtopup-secret1");
        assert_eq!(json["out"], serde_json::Value::Null);
        let table = render_created(Output::Table, &minted(), None).unwrap();
        assert!(table.contains("gwtopup-secret2") && table.contains("not shown again"), "{table}");
    }

    #[test]
    fn expiries_are_ahead_and_amounts_positive() {
        let now = chrono::Utc::now().timestamp();
        let in_30_days = parse_expiry("30d").unwrap();
        assert!((in_30_days - now - 30 * 86_400).abs() < 5, "{in_30_days}");
        assert_eq!(parse_expiry("never"), Ok(0));
        assert_eq!(parse_expiry("2027-01-01"), Ok(1_798_761_600));
        assert_eq!(parse_expiry("2027-01-01T00:00:00Z"), Ok(1_798_761_600));
        assert!(parse_expiry("soon").is_err() && parse_expiry("0d").is_err() && parse_expiry("3y").is_err());
        assert_eq!(parse_amount("10"), Ok(10_000_000));
        assert!(parse_amount("0").is_err() && parse_amount("-1").is_err() && parse_amount("0.0000001").is_err());
    }
}
