//! `gwctl token import`: tokens from JSON Lines or CSV (a header row names
//! the columns), sent in batches over one `ImportTokens` stream. A row
//! without a key is refused unless `--mint` is given; minted keys are
//! written once, to `--keys-out` (created new, mode 0600) or in the output,
//! and cannot be read back. A row that fails (locally or at the control
//! plane) is reported with its line number; the others are imported.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use gw_proto::pb;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::client::{Admin, RpcResult as _, status_error};
use crate::output::{self, Output};
use crate::{flags, money, resolve};

/// Rows per request unless `--batch-size` says otherwise.
const DEFAULT_BATCH: usize = 1_000;
/// The control plane's limit per request.
const MAX_BATCH: usize = 5_000;
/// How often progress goes to stderr, at most.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSON Lines or CSV file of tokens; - reads standard input.
    file: String,
    /// The file's format [default: by its extension, else by its first character].
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Mint a key for each row without one.
    #[arg(long)]
    mint: bool,
    /// Write minted keys here (JSON Lines: line, id, name, key), a new file
    /// of mode 0600, instead of into the output.
    #[arg(long, requires = "mint")]
    keys_out: Option<PathBuf>,
    /// Rows per request (1 to 5000).
    #[arg(long, default_value_t = DEFAULT_BATCH as u64, value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH as u64))]
    batch_size: u64,
    /// No progress lines on stderr.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// How the file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Jsonl,
    Csv,
}

/// What `token import` prints (`-o json`).
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// Data rows read (blank lines and the CSV header excluded).
    pub rows: u64,
    pub imported: u64,
    pub refused: u64,
    pub seconds: f64,
    pub tokens_per_second: f64,
    /// Refused rows, by line number.
    pub errors: Vec<RowError>,
    /// Minted keys, when no `--keys-out` file took them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<MintedKey>,
    /// Where the minted keys were written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_out: Option<String>,
}

/// A refused row.
#[derive(Debug, Serialize)]
pub struct RowError {
    pub line: u64,
    pub error: String,
}

/// A key minted for a row, shown this once.
#[derive(Debug, Serialize)]
pub struct MintedKey {
    pub line: u64,
    pub id: String,
    pub name: String,
    pub key: String,
}

/// A row as read, before account names are resolved.
#[derive(Debug, Default)]
struct Row {
    line: u64,
    account: String,
    token: pb::ImportToken,
}

/// The rows of one request: line number and name of each.
type Sent = Vec<(u64, String)>;

/// Imports the file named by `args`; returns what to print.
pub async fn run(args: Args, admin: &mut Admin, out: Output) -> Result<String> {
    let started = Instant::now();
    let format = args.format.unwrap_or_else(|| by_extension(&args.file));
    let reader: Box<dyn BufRead + Send> = if args.file == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(&args.file).with_context(|| format!("opening {}", args.file))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut keys_out = match &args.keys_out {
        Some(path) => Some(create_private(path)?),
        None => None,
    };
    let mut summary =
        Summary { keys_out: args.keys_out.as_ref().map(|p| p.display().to_string()), ..Summary::default() };

    // Rows are read on a blocking thread and come back one batch at a time.
    let batch_size = usize::try_from(args.batch_size).unwrap_or(DEFAULT_BATCH);
    let (rows_tx, mut rows_rx) = mpsc::channel::<Result<Vec<Result<Row, RowError>>>>(4);
    let reading = tokio::task::spawn_blocking(move || read_rows(reader, format, batch_size, &rows_tx));

    let (requests, requests_rx) = mpsc::channel::<pb::ImportTokensRequest>(4);
    let mut answers = admin.import_tokens(tokio_stream::wrappers::ReceiverStream::new(requests_rx)).await.rpc()?;
    let mut pending: VecDeque<Sent> = VecDeque::new();
    let mut accounts: HashMap<String, String> = HashMap::new();
    let mut last_progress = Instant::now();
    let mut reading_done = false;
    // Sends while reading, and reads the answers as they come, keeping at
    // most a few batches in flight.
    loop {
        tokio::select! {
            batch = rows_rx.recv(), if !reading_done && pending.len() < 4 => {
                let Some(batch) = batch else {
                    reading_done = true;
                    if pending.is_empty() { break; }
                    continue;
                };
                let mut sent = Sent::new();
                let mut request = pb::ImportTokensRequest::default();
                for row in batch? {
                    summary.rows += 1;
                    let row = match row {
                        Ok(row) => row,
                        Err(error) => { summary.errors.push(error); continue; }
                    };
                    if row.token.key.is_empty() && !args.mint {
                        summary.errors.push(RowError { line: row.line, error: "the row has no key; pass --mint to mint one".into() });
                        continue;
                    }
                    let mut token = row.token;
                    match account_id(admin, &mut accounts, &row.account).await {
                        Ok(id) => token.account_id = id,
                        Err(error) => { summary.errors.push(RowError { line: row.line, error }); continue; }
                    }
                    sent.push((row.line, token.name.clone()));
                    request.tokens.push(token);
                }
                if sent.is_empty() { continue; }
                pending.push_back(sent);
                if requests.send(request).await.is_err() {
                    break;
                }
            }
            answer = answers.message() => {
                let Some(answer) = answer.map_err(status_error)? else { break };
                let sent = pending.pop_front().context("the control plane answered a batch never sent")?;
                tally(&mut summary, &sent, answer, keys_out.as_mut())?;
                if !args.quiet && last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    eprintln!("imported {} of {} rows so far", summary.imported, summary.rows);
                }
                if reading_done && pending.is_empty() { break; }
            }
        }
    }
    drop(requests);
    reading.await.context("reading the file")??;
    if !pending.is_empty() {
        bail!("the control plane closed the import before answering every batch");
    }
    if let Some(file) = keys_out.as_mut() {
        file.flush().context("writing the keys file")?;
    }
    summary.errors.sort_by_key(|e| e.line);
    summary.refused = summary.errors.len() as u64;
    summary.seconds = started.elapsed().as_secs_f64();
    summary.tokens_per_second = if summary.seconds > 0.0 { summary.imported as f64 / summary.seconds } else { 0.0 };
    render(out, &summary)
}

/// Adds one answer to the summary; minted keys go to `keys_out` or into it.
fn tally(
    summary: &mut Summary,
    sent: &[(u64, String)],
    answer: pb::ImportTokensResponse,
    mut keys_out: Option<&mut std::io::BufWriter<std::fs::File>>,
) -> Result<()> {
    if answer.results.len() != sent.len() {
        bail!("the control plane answered {} rows of a batch of {}", answer.results.len(), sent.len());
    }
    for (result, (line, name)) in answer.results.into_iter().zip(sent) {
        if !result.error.is_empty() {
            summary.errors.push(RowError { line: *line, error: result.error });
            continue;
        }
        summary.imported += 1;
        if result.key.is_empty() {
            continue;
        }
        let minted = MintedKey { line: *line, id: result.id, name: name.clone(), key: result.key };
        match keys_out.as_deref_mut() {
            Some(file) => {
                serde_json::to_writer(&mut *file, &minted).context("writing the keys file")?;
                file.write_all(b"\n").context("writing the keys file")?;
            }
            None => summary.keys.push(minted),
        }
    }
    Ok(())
}

fn render(out: Output, summary: &Summary) -> Result<String> {
    match out {
        Output::Json => output::json_text(summary),
        Output::Yaml => output::yaml_text(summary),
        Output::Name => Ok(summary.keys.iter().map(|k| format!("{}\n", k.id)).collect()),
        Output::Csv => {
            let rows: Vec<Vec<String>> =
                summary.errors.iter().map(|e| vec![e.line.to_string(), e.error.clone()]).collect();
            Ok(output::csv_text(&["LINE", "ERROR"], &rows))
        }
        Output::Table | Output::Wide => {
            let mut text = format!(
                "imported {} of {} rows, refused {} ({:.1} s, {:.0} tokens/s)\n",
                summary.imported, summary.rows, summary.refused, summary.seconds, summary.tokens_per_second
            );
            for error in &summary.errors {
                text.push_str(&format!("line {}: {}\n", error.line, error.error));
            }
            if !summary.keys.is_empty() {
                let rows: Vec<Vec<String>> = summary
                    .keys
                    .iter()
                    .map(|k| vec![k.line.to_string(), k.id.clone(), k.name.clone(), k.key.clone()])
                    .collect();
                text.push_str(&output::table_text(&["LINE", "ID", "NAME", "KEY"], &rows));
                text.push_str("warning: copy the keys now; they are not shown again\n");
            }
            if let Some(path) = &summary.keys_out {
                text.push_str(&format!("minted keys written to {path}\n"));
            }
            Ok(text)
        }
    }
}

/// The account id for `text` (an id or a name), looked up once per value.
async fn account_id(admin: &mut Admin, known: &mut HashMap<String, String>, text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("account is required".into());
    }
    if let Some(id) = known.get(text) {
        return Ok(id.clone());
    }
    let id = resolve::account(admin, text).await.map_err(|e| format!("{e:#}"))?;
    known.insert(text.to_owned(), id.clone());
    Ok(id)
}

/// `Csv` for a `.csv` file, else JSON Lines; standard input is sniffed.
fn by_extension(file: &str) -> Format {
    if file.to_ascii_lowercase().ends_with(".csv") { Format::Csv } else { Format::Jsonl }
}

/// Creates `path` for the keys: new (an existing file is never
/// overwritten), readable by its owner alone.
fn create_private(path: &std::path::Path) -> Result<std::io::BufWriter<std::fs::File>> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let file = options.open(path).with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    Ok(std::io::BufWriter::new(file))
}

/// Reads every row of `reader`, sending batches of `size` to `batches`.
fn read_rows(
    reader: Box<dyn BufRead + Send>,
    format: Format,
    size: usize,
    batches: &mpsc::Sender<Result<Vec<Result<Row, RowError>>>>,
) -> Result<()> {
    let mut header: Option<Vec<String>> = None;
    let mut batch = Vec::with_capacity(size);
    for (index, line) in reader.lines().enumerate() {
        let line_no = index as u64 + 1;
        let line = line.with_context(|| format!("reading line {line_no}"))?;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let row = match format {
            Format::Jsonl => parse_json(line_no, line),
            Format::Csv => match &header {
                None => {
                    let names = csv_fields(line).map_err(|e| anyhow::anyhow!("line {line_no}: {e}"))?;
                    header = Some(check_header(names).map_err(|e| anyhow::anyhow!("line {line_no}: {e}"))?);
                    continue;
                }
                Some(names) => parse_csv(line_no, names, line),
            },
        };
        batch.push(row.map_err(|error| RowError { line: line_no, error }));
        if batch.len() == size && batches.blocking_send(Ok(std::mem::take(&mut batch))).is_err() {
            return Ok(());
        }
    }
    if !batch.is_empty() {
        let _ = batches.blocking_send(Ok(batch));
    }
    Ok(())
}

/// The columns a row may have.
const COLUMNS: &[&str] = &[
    "account",
    "group",
    "name",
    "key",
    "quota",
    "unlimited",
    "models",
    "allow_ips",
    "expires",
    "rate_limit",
    "status",
    "tokens_per_minute",
    "max_in_flight",
    "period",
    "period_quota",
    "rolling_hours",
    "time_zone",
];

fn check_header(names: Vec<String>) -> Result<Vec<String>, String> {
    let names: Vec<String> = names.into_iter().map(|n| n.trim().to_ascii_lowercase()).collect();
    if let Some(unknown) = names.iter().find(|n| !COLUMNS.contains(&n.as_str())) {
        return Err(format!("unknown column {unknown:?}; columns are {}", COLUMNS.join(", ")));
    }
    if !names.iter().any(|n| n == "account") {
        return Err("the header has no account column".into());
    }
    Ok(names)
}

fn parse_json(line: u64, text: &str) -> Result<Row, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(fields) = value else { return Err("a row must be a JSON object".into()) };
    let mut row = Row { line, ..Row::default() };
    for (name, value) in fields {
        let text = match value {
            Value::Null => continue,
            Value::String(text) => text,
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(text) => Ok(text),
                    _ => Err(format!("{name} must be a list of strings")),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            Value::Object(_) => return Err(format!("{name} must not be an object")),
        };
        set_field(&mut row, &name, &text)?;
    }
    finish(row)
}

fn parse_csv(line: u64, names: &[String], text: &str) -> Result<Row, String> {
    let values = csv_fields(text)?;
    if values.len() != names.len() {
        return Err(format!("{} fields, the header has {}", values.len(), names.len()));
    }
    let mut row = Row { line, ..Row::default() };
    for (name, value) in names.iter().zip(values) {
        if !value.is_empty() {
            set_field(&mut row, name, &value)?;
        }
    }
    finish(row)
}

/// Sets the field `name` of `row` from its text.
fn set_field(row: &mut Row, name: &str, text: &str) -> Result<(), String> {
    let list = |text: &str| text.split([',', ';']).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
    let token = &mut row.token;
    match name {
        "account" => text.trim().clone_into(&mut row.account),
        "group" => text.trim().clone_into(&mut token.group),
        "name" => text.clone_into(&mut token.name),
        "key" => text.trim().clone_into(&mut token.key),
        "quota" => token.quota_micros = money::parse_usd_non_negative(text.trim()).map_err(|e| e.to_string())?,
        "unlimited" => {
            token.unlimited = match text.trim() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" | "" => false,
                other => return Err(format!("unlimited must be true or false, not {other:?}")),
            }
        }
        "models" => token.models = list(text),
        "allow_ips" => token.allow_ips = list(text),
        "expires" => token.expires_at = flags::parse_expiry(text).map_err(|e| format!("expires: {e}"))?,
        "rate_limit" => token.rate_limit = Some(flags::parse_rate_limit(text).map_err(|e| format!("rate_limit: {e}"))?),
        "status" => text.trim().clone_into(&mut token.status),
        "tokens_per_minute" => {
            token.tokens_per_minute = flags::parse_count_limit(text).map_err(|e| format!("tokens_per_minute: {e}"))?
        }
        "max_in_flight" => {
            token.max_in_flight = flags::parse_count_limit(text).map_err(|e| format!("max_in_flight: {e}"))?
        }
        "period" => text.trim().to_ascii_lowercase().clone_into(&mut window(token).period),
        "period_quota" => {
            window(token).quota_micros =
                money::parse_usd_non_negative(text.trim()).map_err(|e| format!("period_quota: {e}"))?
        }
        "rolling_hours" => {
            window(token).rolling_hours =
                text.trim().parse().map_err(|_| format!("rolling_hours must be a whole number, not {text:?}"))?
        }
        "time_zone" => text.trim().clone_into(&mut window(token).time_zone),
        other => return Err(format!("unknown field {other:?}; fields are {}", COLUMNS.join(", "))),
    }
    Ok(())
}

/// The row's window budget, made empty on first use.
fn window(token: &mut pb::ImportToken) -> &mut pb::WindowBudget {
    token.window.get_or_insert_with(pb::WindowBudget::default)
}

/// A row without a quota is bounded by its account only, as `token create`.
fn finish(mut row: Row) -> Result<Row, String> {
    if row.account.is_empty() {
        return Err("account is required".into());
    }
    if row.token.window.as_ref().is_some_and(|w| w.period.is_empty()) {
        return Err("period_quota, rolling_hours and time_zone need a period".into());
    }
    if row.token.quota_micros == 0 {
        row.token.unlimited = true;
    }
    Ok(row)
}

/// The fields of one CSV line (RFC 4180 quoting; a field may not span lines).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut started = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if !started => {
                quoted = true;
                started = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                started = false;
            }
            (false, c) => {
                field.push(c);
                started = true;
            }
        }
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    fields.push(field);
    Ok(fields)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn csv_fields_follow_rfc_4180_quoting() {
        assert_eq!(csv_fields(r#"a,"b,c","say ""hi""",,"#).unwrap(), ["a", "b,c", r#"say "hi""#, "", ""]);
        assert!(csv_fields(r#"a,"open"#).is_err());
    }

    #[test]
    fn rows_read_from_json_and_csv_agree() {
        let json = parse_json(
            1,
            r#"{"account":"acme","name":"ci","key":"sk-0123456789abcdef","quota":"2.5","models":["a","b"],"rate_limit":"60/1"}"#,
        )
        .unwrap();
        let header = check_header(csv_fields("account,name,key,quota,models,rate_limit").unwrap()).unwrap();
        let csv = parse_csv(2, &header, r#"acme,ci,sk-0123456789abcdef,2.5,"a,b",60/1"#).unwrap();
        for row in [&json, &csv] {
            assert_eq!(row.account, "acme");
            assert_eq!(row.token.quota_micros, 2_500_000);
            assert!(!row.token.unlimited);
            assert_eq!(row.token.models, ["a", "b"]);
            assert_eq!(row.token.rate_limit.unwrap().max_requests, 60);
        }
        assert!(parse_json(3, r#"{"account":"a","quota":"-1"}"#).unwrap_err().contains("negative"));
        assert!(parse_json(3, r#"{"name":"x"}"#).unwrap_err().contains("account"));
        assert!(check_header(vec!["acount".into()]).unwrap_err().contains("unknown column"));
    }
}
