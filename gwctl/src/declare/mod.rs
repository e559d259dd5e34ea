//! Declarative configuration: `apply -f` makes groups, models, channels,
//! accounts and tokens what YAML or JSON documents say, `diff -f` shows
//! what that would change, `export` writes the current state as documents.
//! Each document is one Create or Update carrying all of its fields, so
//! concurrent applies leave each object as one document or the other, never
//! a mix; an object already as its document says is not written at all.
//! Upstream keys are read from where documents point and never written
//! back; whether a key changed is told by its fingerprint.

mod document;
mod plan;
#[cfg(test)]
mod tests;
mod values;
mod wire;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use gw_proto::pb;
use serde::Serialize;
use tonic::Code;

use crate::client::{Admin, RpcResult, status_error};
use crate::config::Global;
use crate::confirm::{self, UsageError};
use crate::output::{self, Output};
use document::{Document, KeyFrom, Kind, Spec};
use plan::{Action, Change, Secret, State, Step, Write};

/// The JSON Schema of the documents, for editors and CI.
pub const SCHEMA: &str = include_str!("../../config.schema.json");

/// Flags of `gwctl apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Files, directories (their *.yaml, *.yml and *.json) or - (standard input); repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    files: Vec<PathBuf>,
    /// Show what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Delete objects of the documents' kinds that no document names.
    #[arg(long)]
    prune: bool,
    /// Delete without asking (needed with --prune when standard input is not a terminal).
    #[arg(short, long)]
    yes: bool,
    /// Accept a channel key written in a document (apiKey) instead of keyFrom.
    #[arg(long)]
    allow_inline_secrets: bool,
}

/// Flags of `gwctl diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Files, directories (their *.yaml, *.yml and *.json) or - (standard input); repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    files: Vec<PathBuf>,
    /// Show the deletes `apply --prune` would make too.
    #[arg(long)]
    prune: bool,
    /// Accept a channel key written in a document (apiKey) instead of keyFrom.
    #[arg(long)]
    allow_inline_secrets: bool,
}

/// Flags of `gwctl export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Kinds to export [default: all]: group, model, channel, account, token.
    #[arg(value_enum)]
    kinds: Vec<Kind>,
    /// Print the documents' JSON Schema instead.
    #[arg(long)]
    schema: bool,
}

/// What `apply` and `diff` report with `-o json` or `-o yaml`.
#[derive(Debug, Serialize)]
struct Report<'a> {
    changes: Vec<&'a Change>,
    dry_run: bool,
    changed: bool,
}

/// Runs `gwctl apply`; returns the summary (the lines of each object are
/// printed as it is done).
pub async fn apply(args: ApplyArgs, global: &Global) -> Result<String> {
    let out = global.output;
    let documents = read(&args.files)?;
    let secrets = secrets(&documents, args.allow_inline_secrets, &|name| std::env::var(name).ok())?;
    let mut admin = crate::client::connect(global).await?;
    let state = fetch(&mut admin).await?;
    let steps = plan::plan(&documents, &state, &secrets, args.prune)?;
    let deletes = steps.iter().filter(|s| s.change.action == Action::Delete).count();
    if deletes > 0 && !args.dry_run && !confirm::ask(args.yes, &format!("delete {deletes} objects no document names"))?
    {
        return Err(UsageError("not applying: the deletes were not confirmed".into()).into());
    }
    let people = matches!(out, Output::Table | Output::Wide);
    let mut done: Vec<&Change> = Vec::new();
    let mut accounts: HashMap<String, String> = state.accounts.iter().map(|a| (a.name.clone(), a.id.clone())).collect();
    for step in &steps {
        if !args.dry_run && step.change.action != Action::Unchanged {
            let written = execute(&mut admin, step, &mut accounts).await;
            if let Err(error) = written {
                let origin = step.change.origin.as_deref().map(|o| format!("{o}: ")).unwrap_or_default();
                let kind = step.change.kind.as_str();
                return Err(error.context(format!(
                    "{origin}{kind}/{} not applied ({} of {} objects done)",
                    step.change.name,
                    done.len(),
                    steps.len()
                )));
            }
        }
        if people {
            output::emit(&line(&step.change, args.dry_run))?;
        }
        done.push(&step.change);
    }
    match out {
        Output::Json => output::json_text(&report(&steps, args.dry_run)),
        Output::Yaml => output::yaml_text(&report(&steps, args.dry_run)),
        _ => Ok(summary(&done, args.dry_run)),
    }
}

/// Runs `gwctl diff`: what apply would change, object by object and field
/// by field. Prints and fails (exit 1) when something would change.
pub async fn diff(args: DiffArgs, global: &Global) -> Result<String> {
    let documents = read(&args.files)?;
    let secrets = secrets(&documents, args.allow_inline_secrets, &|name| std::env::var(name).ok())?;
    let mut admin = crate::client::connect(global).await?;
    let state = fetch(&mut admin).await?;
    let steps = plan::plan(&documents, &state, &secrets, args.prune)?;
    let changes = steps.iter().filter(|s| s.change.action != Action::Unchanged).count();
    let text = match global.output {
        Output::Json => output::json_text(&report(&steps, true))?,
        Output::Yaml => output::yaml_text(&report(&steps, true))?,
        _ => diff_text(&steps),
    };
    if changes == 0 {
        return Ok(text);
    }
    output::emit(&text)?;
    Err(anyhow!("{changes} of {} objects would change", steps.len()))
}

/// Runs `gwctl export`: the current state as documents, no secret in them.
pub async fn export(args: ExportArgs, global: &Global) -> Result<String> {
    if args.schema {
        return Ok(SCHEMA.to_owned());
    }
    let mut admin = crate::client::connect(global).await?;
    let state = fetch(&mut admin).await?;
    let kinds = if args.kinds.is_empty() { Kind::ALL.to_vec() } else { args.kinds };
    let specs = export_specs(&state, &kinds);
    match global.output {
        Output::Json => output::json_text(&specs),
        _ => yaml_stream(&specs),
    }
}

/// Every document of `files`, checked: no object declared twice, channels
/// as the control plane will hold them. Fails naming the file and line.
fn read(files: &[PathBuf]) -> Result<Vec<Document>> {
    let mut documents = document::load(files)?;
    let mut seen: HashMap<String, String> = HashMap::new();
    for document in &mut documents {
        let id = document.spec.id();
        let origin = document.origin.to_string();
        if let Some(first) = seen.insert(id.clone(), origin.clone()) {
            bail!("{origin}: {id} is declared twice (first at {first})");
        }
        if let Spec::Channel(channel) = &mut document.spec {
            if channel.models.is_empty() {
                bail!("{origin}: {id}: a channel needs at least one model");
            }
            wire::normalize_channel(channel).map_err(|error| anyhow!("{origin}: {id}: {error:#}"))?;
        }
    }
    Ok(documents)
}

/// The key of each channel document that names one, read from its file,
/// variable or Secret mount (inline only when allowed). Fails naming the
/// document, never quoting a key.
fn secrets(
    documents: &[Document],
    allow_inline: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HashMap<String, Secret>> {
    let mut secrets = HashMap::new();
    for document in documents {
        let Spec::Channel(channel) = &document.spec else { continue };
        let at = || format!("{}: {}", document.origin, document.spec.id());
        let key = match (&channel.key_from, &channel.api_key) {
            (Some(_), Some(_)) => bail!("{}: give keyFrom or apiKey, not both", at()),
            (None, Some(_)) if !allow_inline => bail!(
                "{}: apiKey writes the upstream key into the document; use keyFrom (file, env or secret), \
                 or pass --allow-inline-secrets",
                at()
            ),
            (None, Some(key)) => key.clone(),
            (Some(KeyFrom::File(path)), None) => read_key_file(path, "key file").with_context(at)?,
            (Some(KeyFrom::Secret(path)), None) => read_key_file(path, "Secret mount").with_context(at)?,
            (Some(KeyFrom::Env(name)), None) => {
                env(name).ok_or_else(|| anyhow!("{}: the variable {name} is not set", at()))?
            }
            (None, None) => continue,
        };
        if key.trim().is_empty() {
            bail!("{}: the upstream key is empty", at());
        }
        let (key, fingerprint) = wire::stored_key(&key);
        secrets.insert(channel.name.clone(), Secret { key, fingerprint });
    }
    Ok(secrets)
}

fn read_key_file(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the {what} {}", path.display()))
}

/// Everything of the five kinds the control plane holds.
async fn fetch(admin: &mut Admin) -> Result<State> {
    let all = pb::ListRequest::default;
    Ok(State {
        groups: admin.list_groups(all()).await.rpc().context("listing groups")?.items,
        models: admin.list_models(all()).await.rpc().context("listing models")?.items,
        channels: admin.list_channels(all()).await.rpc().context("listing channels")?.items,
        accounts: admin.list_accounts(all()).await.rpc().context("listing accounts")?.items,
        tokens: admin.list_tokens(all()).await.rpc().context("listing tokens")?.items,
    })
}

/// Carries out one step: one write, or for a create another document
/// won, the update of what it made. `accounts` maps account names to ids
/// and learns the accounts created.
async fn execute(admin: &mut Admin, step: &Step, accounts: &mut HashMap<String, String>) -> Result<()> {
    match &step.write {
        Write::Group(group) => {
            if step.change.action == Action::Create {
                match admin.create_group(wire::create_group(group)).await {
                    Err(status) if status.code() == Code::AlreadyExists => {}
                    other => return other.rpc().map(drop),
                }
            }
            admin.update_group(wire::update_group(group)).await.rpc().map(drop)
        }
        Write::Model(model) => {
            if step.change.action == Action::Create {
                match admin.create_model(wire::create_model(model)).await {
                    Err(status) if status.code() == Code::AlreadyExists => {}
                    other => return other.rpc().map(drop),
                }
            }
            admin.update_model(wire::update_model(model)).await.rpc().map(drop)
        }
        Write::Channel { doc, id, key, status } => {
            let id = match id {
                Some(id) => id.clone(),
                None => match admin.create_channel(wire::create_channel(doc, key.as_deref())).await {
                    Err(status) if status.code() == Code::AlreadyExists => {
                        crate::resolve::channel(admin, &doc.name).await?
                    }
                    other => return other.rpc().map(drop),
                },
            };
            let request = wire::update_channel(&id, doc, key.as_deref(), status);
            admin.update_channel(request).await.rpc().map(drop)
        }
        Write::Account { doc, id } => {
            let id = match id {
                Some(id) => id.clone(),
                None => match admin.create_account(wire::create_account(doc)).await {
                    Ok(created) => {
                        let created = created.into_inner();
                        accounts.insert(doc.name.clone(), created.id.clone());
                        // The create request has no status: a disabled account
                        // takes one more write.
                        if doc.status.is_enabled() {
                            return Ok(());
                        }
                        created.id
                    }
                    Err(status) if status.code() == Code::AlreadyExists => {
                        crate::resolve::account(admin, &doc.name).await?
                    }
                    Err(status) => return Err(status_error(status)),
                },
            };
            admin.update_account(wire::update_account(&id, doc)).await.rpc().map(drop)
        }
        Write::Token { doc, id: Some(id) } => admin.update_token(wire::update_token(id, doc)).await.rpc().map(drop),
        Write::Token { doc, id: None } => {
            let account_id = match accounts.get(&doc.account) {
                Some(id) => id.clone(),
                None => crate::resolve::account(admin, &doc.account).await?,
            };
            create_token(admin, &account_id, doc).await
        }
        Write::Delete { kind, id } => {
            let request = pb::GetRequest { id: id.clone() };
            let deleted = match kind {
                Kind::Group => admin.delete_group(request).await,
                Kind::Model => admin.delete_model(request).await,
                Kind::Channel => admin.delete_channel(request).await,
                Kind::Account => admin.delete_account(request).await,
                Kind::Token => admin.delete_token(request).await,
            };
            match deleted {
                // Another apply deleted it first.
                Err(status) if status.code() == Code::NotFound => Ok(()),
                other => other.rpc().map(drop),
            }
        }
    }
}

/// Creates the token as one import row (so its status is part of the one
/// write) and writes the minted key to the document's keyFile, made first
/// (mode 0600, never over a file) so a key is never minted with nowhere to
/// go; the file is removed again when the control plane refuses.
async fn create_token(admin: &mut Admin, account_id: &str, doc: &document::Token) -> Result<()> {
    let path = doc.key_file.as_deref().context("the token does not exist yet: give keyFile")?;
    let mut file = private_file(path)?;
    let created = import_one(admin, wire::import_token(account_id, doc)).await;
    let written = created.and_then(|key| {
        file.write_all(format!("{key}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing the key to {}", path.display()))
    });
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// The key of the one token `row` makes.
async fn import_one(admin: &mut Admin, row: pb::ImportToken) -> Result<String> {
    let request = pb::ImportTokensRequest { tokens: vec![row] };
    let mut answers = admin.import_tokens(tokio_stream::iter([request])).await.rpc()?;
    let answer = answers.message().await.map_err(status_error)?.context("the control plane did not answer")?;
    match answer.results.into_iter().next() {
        Some(result) if result.error.is_empty() => Ok(result.key),
        Some(result) => Err(anyhow!("{}", result.error)),
        None => bail!("the control plane answered no result"),
    }
}

fn private_file(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options.open(path).with_context(|| format!("creating the key file {} (it must not exist yet)", path.display()))
}

fn report(steps: &[Step], dry_run: bool) -> Report<'_> {
    let changes: Vec<&Change> = steps.iter().map(|s| &s.change).collect();
    let changed = changes.iter().any(|c| c.action != Action::Unchanged);
    Report { changes, dry_run, changed }
}

/// One object's line: `model/gpt-4o configured (inputPrice 2.5 → 3)`.
fn line(change: &Change, dry_run: bool) -> String {
    let verb = match change.action {
        Action::Create => "created",
        Action::Configure => "configured",
        Action::Unchanged => "unchanged",
        Action::Delete => "deleted",
    };
    let fields: Vec<String> = change.fields.iter().map(|f| format!("{} {} → {}", f.field, f.from, f.to)).collect();
    let fields = if fields.is_empty() { String::new() } else { format!(" ({})", fields.join(", ")) };
    let dry = if dry_run && change.action != Action::Unchanged { " (dry run)" } else { "" };
    format!("{}/{} {verb}{fields}{dry}\n", change.kind.as_str(), change.name)
}

/// The last line: what was done, or that nothing was.
fn summary(changes: &[&Change], dry_run: bool) -> String {
    let counts = plan::tally(changes);
    let unchanged = counts.get("unchanged").copied().unwrap_or(0);
    if unchanged == changes.len() {
        return format!("nothing to change: {unchanged} objects as their documents say\n");
    }
    let parts: Vec<String> = ["created", "configured", "deleted", "unchanged"]
        .iter()
        .filter_map(|name| counts.get(name).map(|n| format!("{n} {name}")))
        .collect();
    let dry = if dry_run { " (dry run: nothing was changed)" } else { "" };
    format!("{}{dry}\n", parts.join(", "))
}

/// `diff`'s text: `+` creates, `~` updates with a line per field, `-`
/// deletes, then a count.
fn diff_text(steps: &[Step]) -> String {
    let mut text = String::new();
    for change in steps.iter().map(|s| &s.change) {
        let sign = match change.action {
            Action::Create => "+",
            Action::Configure => "~",
            Action::Delete => "-",
            Action::Unchanged => continue,
        };
        let origin = change.origin.as_deref().map(|o| format!("  ({o})")).unwrap_or_default();
        text.push_str(&format!("{sign} {}/{}{origin}\n", change.kind.as_str(), change.name));
        for field in &change.fields {
            text.push_str(&format!("    {}: {} → {}\n", field.field, field.from, field.to));
        }
    }
    let changes: Vec<&Change> = steps.iter().map(|s| &s.change).collect();
    let unchanged = changes.iter().filter(|c| c.action == Action::Unchanged).count();
    if unchanged == changes.len() {
        text.push_str(&format!("no changes: {unchanged} objects as their documents say\n"));
    }
    text
}

/// The documents of `kinds` in `state`, in apply's order, nothing secret:
/// no channel key, no token key, no balance.
fn export_specs(state: &State, kinds: &[Kind]) -> Vec<Spec> {
    let mut specs = Vec::new();
    let wanted = |kind: Kind| kinds.contains(&kind);
    if wanted(Kind::Group) {
        specs.extend(state.groups.iter().map(|g| Spec::Group(wire::group_doc(g))));
    }
    if wanted(Kind::Model) {
        specs.extend(state.models.iter().map(|m| Spec::Model(wire::model_doc(m))));
    }
    if wanted(Kind::Channel) {
        for channel in &state.channels {
            let mut doc = wire::channel_doc(channel);
            if wire::is_default_base_url(&doc) {
                doc.base_url = None;
            }
            specs.push(Spec::Channel(doc));
        }
    }
    if wanted(Kind::Account) {
        specs.extend(state.accounts.iter().map(|a| Spec::Account(wire::account_doc(a))));
    }
    if wanted(Kind::Token) {
        let names: HashMap<&str, &str> = state.accounts.iter().map(|a| (a.id.as_str(), a.name.as_str())).collect();
        for token in &state.tokens {
            let account = names.get(token.account_id.as_str()).copied().unwrap_or_default();
            let repeated = state.tokens.iter().filter(|t| t.account_id == token.account_id && t.name == token.name);
            if token.name.is_empty() || repeated.count() > 1 {
                // A document names a token by its name within its account.
                eprintln!("not exported: token {} of account {account:?} has no name of its own", token.id);
                continue;
            }
            specs.push(Spec::Token(wire::token_doc(token, account)));
        }
    }
    specs
}

/// Documents as one YAML stream, `---` between them.
fn yaml_stream(specs: &[Spec]) -> Result<String> {
    let mut text = String::new();
    for spec in specs {
        text.push_str("---\n");
        text.push_str(&serde_norway::to_string(spec).context("encoding YAML")?);
    }
    Ok(text)
}
