//! Configuration documents: what `apply` reads and `export` writes. One
//! document declares one object, named by `kind` and `name` (a token by its
//! account and name). Fields are camelCase; an unknown field, a bad value
//! or an unknown kind is an error naming the file and line of the document.
//! A YAML file holds documents separated by `---`; a JSON file holds one
//! document or an array of them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use super::values::{self, Expires, RateLimit, Ratio, Status, Usd, is_false, is_zero};

/// The kinds of object a document can declare, in the order apply writes
/// them (deletes go the other way): each may refer to the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, clap::ValueEnum)]
pub enum Kind {
    #[value(alias = "groups")]
    Group,
    #[value(alias = "models")]
    Model,
    #[value(alias = "channels")]
    Channel,
    #[value(alias = "accounts")]
    Account,
    #[value(alias = "tokens")]
    Token,
}

/// Where a document starts: `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: usize,
}

/// A document and where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub spec: Spec,
    pub origin: Origin,
}

/// What one document declares.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind")]
pub enum Spec {
    Group(Group),
    Model(Model),
    Channel(Channel),
    Account(Account),
    Token(Token),
}

/// A group: price ratio and limits of the tokens in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Group {
    #[serde(default, rename = "kind", skip_serializing)]
    pub tag: String,
    pub name: String,
    #[serde(default = "Ratio::one", skip_serializing_if = "Ratio::is_one")]
    pub ratio: Ratio,
    #[serde(default, skip_serializing_if = "is_false")]
    pub deprecated: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, deserialize_with = "values::rate_limit", skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_per_minute: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_in_flight: u32,
}

/// A model of the catalogue and its prices: token prices in US dollars per
/// 1M tokens, the others in US dollars per unit; an absent price is 0 (see
/// `gwctl model create` for what 0 falls back to).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    #[serde(default, rename = "kind", skip_serializing)]
    pub tag: String,
    pub name: String,
    #[serde(default = "chat")]
    pub category: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owned_by: String,
    /// Says a model without any price is meant to cost nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub free: bool,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub input_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub output_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub cached_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub request_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub second_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub image_price: Usd,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tier_threshold: i64,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub tier_input_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub tier_output_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub tier_cached_price: Usd,
    #[serde(default, rename = "cacheWrite5mPrice", skip_serializing_if = "Usd::is_zero")]
    pub cache_write_5m_price: Usd,
    #[serde(default, rename = "cacheWrite1hPrice", skip_serializing_if = "Usd::is_zero")]
    pub cache_write_1h_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub reasoning_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub search_unit_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub audio_input_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub audio_output_price: Usd,
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub audio_cached_price: Usd,
    /// The share of the regular prices a batch line pays (0: half).
    #[serde(default, skip_serializing_if = "Ratio::is_zero")]
    pub batch_price_ratio: Ratio,
}

/// An upstream provider. Its key is named by reference (`keyFrom`), never
/// written back; without `keyFrom` the key is left as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Channel {
    #[serde(default, rename = "kind", skip_serializing)]
    pub tag: String,
    pub name: String,
    #[serde(default = "openai", rename = "type")]
    pub kind: String,
    /// Absent: the type's default address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub model_map: BTreeMap<String, String>,
    #[serde(default = "default_groups")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default, skip_serializing_if = "Status::is_enabled")]
    pub status: Status,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connect_timeout_ms: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub first_byte_timeout_ms: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_timeout_ms: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_timeout_ms: u32,
    #[serde(default, skip_serializing)]
    pub key_from: Option<KeyFrom>,
    /// The key itself: refused unless apply is given --allow-inline-secrets.
    #[serde(default, skip_serializing)]
    pub api_key: Option<String>,
}

/// Where a channel's upstream key is read: one of `file`, `env`, `secret`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "KeyRef")]
pub enum KeyFrom {
    /// A file (relative paths from the document's directory).
    File(PathBuf),
    /// An environment variable of gwctl.
    Env(String),
    /// A file of a mounted Kubernetes Secret.
    Secret(PathBuf),
}

/// `keyFrom` as written: a map with one of the three.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyRef {
    file: Option<PathBuf>,
    env: Option<String>,
    secret: Option<PathBuf>,
}

/// An account: which groups its tokens may use, and its limits. Never its
/// balance: money moves by top-ups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Account {
    #[serde(default, rename = "kind", skip_serializing)]
    pub tag: String,
    pub name: String,
    /// Empty: every group.
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub unlimited: bool,
    #[serde(default, skip_serializing_if = "Status::is_enabled")]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
}

/// A token's policy, named within its account. The key is made by the
/// control plane on creation and written to `keyFile`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Token {
    #[serde(default, rename = "kind", skip_serializing)]
    pub tag: String,
    /// The account's name.
    pub account: String,
    pub name: String,
    #[serde(default = "default_group")]
    pub group: String,
    /// Empty: every model of the group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_ips: Vec<String>,
    #[serde(default, deserialize_with = "values::rate_limit", skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Absent: unlimited, bounded by the account only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Usd>,
    #[serde(default, deserialize_with = "values::expires", skip_serializing_if = "Option::is_none")]
    pub expires: Option<Expires>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_per_minute: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_in_flight: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    #[serde(default, skip_serializing_if = "Status::is_enabled")]
    pub status: Status,
    /// Where a new token's key is written (mode 0600, never overwritten).
    #[serde(default, skip_serializing)]
    pub key_file: Option<PathBuf>,
}

/// A spending cap per calendar day, week or month, or rolling hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Window {
    pub period: Period,
    pub quota: Usd,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rolling_hours: u32,
    /// Absent: the control plane's zone when the budget is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// How often a window budget starts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Week,
    Month,
    Rolling,
}

fn chat() -> String {
    "chat".into()
}

fn openai() -> String {
    "openai".into()
}

fn default_group() -> String {
    "default".into()
}

fn default_groups() -> Vec<String> {
    vec![default_group()]
}

fn one() -> u32 {
    1
}

// === impl KeyFrom ===

impl TryFrom<KeyRef> for KeyFrom {
    type Error = String;

    fn try_from(r: KeyRef) -> Result<KeyFrom, String> {
        match (r.file, r.env, r.secret) {
            (Some(file), None, None) => Ok(KeyFrom::File(file)),
            (None, Some(env), None) => Ok(KeyFrom::Env(env)),
            (None, None, Some(secret)) => Ok(KeyFrom::Secret(secret)),
            _ => Err("keyFrom takes one of file, env or secret".into()),
        }
    }
}

// === impl Kind ===

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Group, Kind::Model, Kind::Channel, Kind::Account, Kind::Token];

    /// As in output lines: `group`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Group => "group",
            Kind::Model => "model",
            Kind::Channel => "channel",
            Kind::Account => "account",
            Kind::Token => "token",
        }
    }

    fn from_tag(tag: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| format!("{kind:?}") == tag)
    }
}

// === impl Origin ===

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

// === impl Spec ===

impl Spec {
    pub fn kind(&self) -> Kind {
        match self {
            Spec::Group(_) => Kind::Group,
            Spec::Model(_) => Kind::Model,
            Spec::Channel(_) => Kind::Channel,
            Spec::Account(_) => Kind::Account,
            Spec::Token(_) => Kind::Token,
        }
    }

    /// What names the object within its kind: `acme/ci` for a token.
    pub fn name(&self) -> String {
        match self {
            Spec::Group(g) => g.name.clone(),
            Spec::Model(m) => m.name.clone(),
            Spec::Channel(c) => c.name.clone(),
            Spec::Account(a) => a.name.clone(),
            Spec::Token(t) => format!("{}/{}", t.account, t.name),
        }
    }

    /// `kind/name`, as output lines name objects.
    pub fn id(&self) -> String {
        format!("{}/{}", self.kind().as_str(), self.name())
    }

    /// The spec without the `kind` its struct read (the variant says it).
    fn untagged(mut self) -> Spec {
        match &mut self {
            Spec::Group(g) => g.tag.clear(),
            Spec::Model(m) => m.tag.clear(),
            Spec::Channel(c) => c.tag.clear(),
            Spec::Account(a) => a.tag.clear(),
            Spec::Token(t) => t.tag.clear(),
        }
        self
    }

    fn parse_yaml(kind: Kind, text: &str) -> Result<Spec, serde_norway::Error> {
        Ok(match kind {
            Kind::Group => Spec::Group(serde_norway::from_str(text)?),
            Kind::Model => Spec::Model(serde_norway::from_str(text)?),
            Kind::Channel => Spec::Channel(serde_norway::from_str(text)?),
            Kind::Account => Spec::Account(serde_norway::from_str(text)?),
            Kind::Token => Spec::Token(serde_norway::from_str(text)?),
        })
    }

    fn parse_json(kind: Kind, text: &str) -> Result<Spec, serde_json::Error> {
        Ok(match kind {
            Kind::Group => Spec::Group(serde_json::from_str(text)?),
            Kind::Model => Spec::Model(serde_json::from_str(text)?),
            Kind::Channel => Spec::Channel(serde_json::from_str(text)?),
            Kind::Account => Spec::Account(serde_json::from_str(text)?),
            Kind::Token => Spec::Token(serde_json::from_str(text)?),
        })
    }
}

/// Only the kind of a document, read before the rest.
#[derive(Deserialize)]
struct Tag {
    kind: Option<serde_norway::Value>,
}

/// The kind a document's `kind` field names, or why it names none.
fn kind_of(tag: Option<serde_norway::Value>) -> Result<Kind, String> {
    let known = "one of Group, Model, Channel, Account, Token";
    match tag {
        None => Err(format!("the document has no kind (expected {known})")),
        Some(serde_norway::Value::String(tag)) => {
            Kind::from_tag(&tag).ok_or_else(|| format!("unknown kind {tag:?} (expected {known})"))
        }
        Some(other) => Err(format!("kind must be a string, {known} (got {other:?})")),
    }
}

/// Reads every document of `paths`: files, directories (their `*.yaml`,
/// `*.yml` and `*.json` files, sorted by name) and `-` (standard input,
/// YAML). Fails at the first bad document, naming its file and line.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Document>> {
    let mut documents = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let text = std::io::read_to_string(std::io::stdin()).context("reading standard input")?;
            documents.extend(parse(&text, "<stdin>", false)?);
        } else if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading the directory {}", path.display()))?
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|file| file.is_file() && format_of(file).is_some())
                .collect();
            files.sort();
            for file in files {
                documents.extend(load_file(&file)?);
            }
        } else {
            documents.extend(load_file(path)?);
        }
    }
    Ok(documents)
}

/// `Some(true)` for JSON, `Some(false)` for YAML, by extension.
fn format_of(path: &Path) -> Option<bool> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Some(true),
        Some("yaml" | "yml") => Some(false),
        _ => None,
    }
}

/// A file's documents, the paths they name taken from the file's directory.
fn load_file(path: &Path) -> Result<Vec<Document>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut documents = parse(&text, &path.display().to_string(), format_of(path) == Some(true))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    for document in &mut documents {
        match &mut document.spec {
            Spec::Channel(Channel { key_from: Some(KeyFrom::File(file) | KeyFrom::Secret(file)), .. }) => {
                *file = dir.join(&*file);
            }
            Spec::Token(Token { key_file: Some(file), .. }) => *file = dir.join(&*file),
            _ => {}
        }
    }
    Ok(documents)
}

/// The documents of one file's text, named `file` in errors.
pub fn parse(text: &str, file: &str, json: bool) -> Result<Vec<Document>> {
    if json { parse_json(text, file) } else { parse_yaml(text, file) }
}

fn parse_yaml(text: &str, file: &str) -> Result<Vec<Document>> {
    let mut documents = Vec::new();
    for (first_line, chunk) in yaml_documents(text) {
        let origin = line_of_kind(Origin { file: file.to_owned(), line: first_line }, chunk);
        // The line of a parse error within the chunk, as a line of the file.
        // A value's own error is placed at the start of its document: the
        // line that holds the value it quotes says more.
        let at = |error: &serde_norway::Error| match error.location() {
            Some(location) if (location.line(), location.column()) != (1, 1) => {
                Origin { file: file.to_owned(), line: first_line + location.line() - 1 }
            }
            _ => value_line(&error.to_string(), chunk)
                .map_or_else(|| origin.clone(), |line| Origin { file: file.to_owned(), line: first_line + line }),
        };
        let value: serde_norway::Value = match serde_norway::from_str(chunk) {
            Ok(value) => value,
            Err(error) => bail!("{}: {}", at(&error), without_location(&error.to_string())),
        };
        if value.is_null() {
            continue; // An empty document: `---` at the start or the end.
        }
        let tag: Tag = serde_norway::from_str(chunk).map_err(|error| anyhow::anyhow!("{}: {error}", at(&error)))?;
        let kind = kind_of(tag.kind).map_err(|problem| anyhow::anyhow!("{origin}: {problem}"))?;
        let spec = Spec::parse_yaml(kind, chunk)
            .map_err(|error| anyhow::anyhow!("{}: {}", at(&error), without_location(&error.to_string())))?;
        documents.push(Document { spec: spec.untagged(), origin });
    }
    Ok(documents)
}

/// A JSON file: one document, or an array of documents.
fn parse_json(text: &str, file: &str) -> Result<Vec<Document>> {
    let at = |error: &serde_json::Error| Origin { file: file.to_owned(), line: error.line() };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| anyhow::anyhow!("{}: {}", at(&error), json_message(&error)))?;
    let items = match value {
        serde_json::Value::Array(items) => items,
        single => {
            let origin = Origin { file: file.to_owned(), line: 1 };
            let kind = json_kind(&single).map_err(|problem| anyhow::anyhow!("{origin}: {problem}"))?;
            let spec = Spec::parse_json(kind, text)
                .map_err(|error| anyhow::anyhow!("{}: {}", at(&error), json_message(&error)))?;
            return Ok(vec![Document { spec: spec.untagged(), origin }]);
        }
    };
    // Elements of an array are told apart by their place in it.
    let mut documents = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let origin = Origin { file: format!("{file}[{index}]"), line: 1 };
        let kind = json_kind(&item).map_err(|problem| anyhow::anyhow!("{origin}: {problem}"))?;
        let item = item.to_string();
        let spec =
            Spec::parse_json(kind, &item).map_err(|error| anyhow::anyhow!("{origin}: {}", json_message(&error)))?;
        documents.push(Document { spec: spec.untagged(), origin });
    }
    Ok(documents)
}

/// The line (from 0) of `chunk` holding the value a located-less error
/// quotes (the value parsers of `values` quote what they refuse, and the
/// YAML parser gives their errors no position).
fn value_line(message: &str, chunk: &str) -> Option<usize> {
    let quoted = message.split('"').nth(1).filter(|v| !v.is_empty())?;
    chunk.lines().position(|line| {
        line.split_once(':').is_some_and(|(_, value)| {
            let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
            value == quoted
        })
    })
}

fn json_kind(value: &serde_json::Value) -> Result<Kind, String> {
    let tag = value.get("kind").map(|kind| match kind {
        serde_json::Value::String(s) => serde_norway::Value::String(s.clone()),
        other => serde_norway::Value::String(format!("{other}")),
    });
    match (value.is_object(), tag) {
        (false, _) => Err("a document must be an object".into()),
        (true, tag) => kind_of(tag),
    }
}

/// serde_json's message without its ` at line L column C` (the origin says it).
fn json_message(error: &serde_json::Error) -> String {
    without_location(&error.to_string())
}

/// A parser's message without the position it appends (the origin says it).
fn without_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// The origin moved to the document's `kind:` line, past leading comments.
fn line_of_kind(origin: Origin, chunk: &str) -> Origin {
    let skipped = chunk.lines().take_while(|line| line.trim().is_empty() || line.trim_start().starts_with('#')).count();
    Origin { line: origin.line + skipped, ..origin }
}

/// The documents of a YAML stream with the line each starts on: split at
/// lines that are `---` (optionally followed by a comment) or `...`.
fn yaml_documents(text: &str) -> Vec<(usize, &str)> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut start_line = 1;
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- #") || bare == "..." {
            documents.push((start_line, &text[start..offset]));
            start = offset + line.len();
            start_line = index + 2;
        }
        offset += line.len();
    }
    documents.push((start_line, &text[start..]));
    documents
}
