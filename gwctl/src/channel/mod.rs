//! `gwctl channel`: upstream providers. A channel serves a set of models to a
//! set of groups; the data plane picks by priority, then weight. Its API key
//! is write-only: the control plane never returns it, gwctl never prints it.
//! The key is read from a file or standard input (`--key-file F`, `--key -`)
//! so it need not appear in the process list; an empty key (an unset
//! variable) is refused unless `--no-key` says the upstream needs none.
//! Azure, Bedrock and Vertex channels take their provider's own flags
//! (`provider`), which make the settings and, for Bedrock and Vertex, the key.

mod key;
mod provider;

use std::collections::HashMap;

use anyhow::{Context as _, Result, bail};
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs};
use crate::flags::{self, CsvList, Page, Status};
use crate::output::{self, Output, Render};
use crate::{resolve, schema};
use provider::{ProviderArgs, Stdin};

/// Channel verbs. Wherever a channel is named, its id or its (unique) name
/// will do.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a channel.
    #[command(after_help = "Examples:\n  \
        gwctl channel create --name main --base-url https://api.openai.com/v1 --key-file ~/.config/openai.key --models gpt-4o,gpt-4o-mini\n  \
        gwctl channel create --name claude --type anthropic --base-url https://api.anthropic.com/v1 --key - --models claude-sonnet-4 < key.txt\n  \
        gwctl channel create --name local --base-url http://127.0.0.1:11434/v1 --no-key --models llama3 --priority -1\n  \
        gwctl channel create --name az --type azure --resource contoso --key-file azure.key --models gpt-4o\n  \
        gwctl channel create --name aws --type bedrock --region us-east-1 --aws-env --models anthropic.claude-sonnet-4-5-20250929-v1:0\n  \
        gwctl channel create --name gcp --type vertex --location global --service-account-file sa.json --models claude-sonnet-4-5@20250929\n  \
        gwctl channel create --name gemini --type gemini --key-file gemini.key --models gemini-2.5-flash\n\n\
        docs/providers.md says what each type reaches and which flags it takes.")]
    Create(CreateArgs),
    /// List channels, by id.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl channel list\n  \
        gwctl channel list --status auto_disabled\n  \
        gwctl channel list --model gpt-4o --group vip -o wide"
    )]
    List(ListArgs),
    /// Show one channel.
    #[command(after_help = "Examples:\n  gwctl channel get main\n  gwctl channel get ch_9d2k1x -o json")]
    Get {
        /// Id or name of the channel.
        channel: String,
    },
    /// Change a channel; flags left out stay as they are.
    #[command(after_help = "Examples:\n  \
        gwctl channel update main --weight 3 --priority 1\n  \
        gwctl channel update main --key-file ~/.config/openai-new.key\n  \
        gwctl channel update main --map gpt-4o=gpt-4o-2024-08-06\n  \
        gwctl channel update main --first-byte-timeout-ms 20000")]
    Update(UpdateArgs),
    /// Stop routing to the channel.
    #[command(after_help = "Examples:\n  gwctl channel disable main")]
    Disable {
        /// Id or name of the channel.
        channel: String,
    },
    /// Route to the channel again (also clears an automatic disable).
    #[command(
        after_help = "Examples:\n  gwctl channel enable main\n  gwctl channel list --status auto_disabled -o name | xargs -n1 gwctl channel enable"
    )]
    Enable {
        /// Id or name of the channel.
        channel: String,
    },
    /// Delete a channel.
    #[command(
        alias = "rm",
        after_help = "Examples:\n  gwctl channel delete main --dry-run\n  gwctl channel delete main --yes"
    )]
    Delete(DeleteArgs),
    /// The channel's pool of upstream keys.
    #[command(subcommand)]
    Key(key::Command),
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Name of the channel, unique among channels.
    #[arg(long)]
    name: String,
    /// Provider type: `openai` (chat completions and every compatible
    /// server), `anthropic` (messages), `azure`, `bedrock`, `vertex` or
    /// `gemini` [default: the type of the provider flags given, else openai].
    #[arg(long = "type", value_parser = KINDS)]
    kind: Option<String>,
    /// Base address including /v1, as given to the SDKs [default: the
    /// type's public endpoint, from --resource, --region or --project and
    /// --location where it depends on them].
    #[arg(long)]
    base_url: Option<String>,
    #[command(flatten)]
    key: KeyArgs,
    /// Create the channel without a key: its upstream needs none.
    #[arg(long, conflicts_with_all = ["key", "key_file"])]
    no_key: bool,
    #[command(flatten)]
    provider: Box<ProviderArgs>,
    /// Models served, comma-separated.
    #[arg(long)]
    models: CsvList,
    /// Groups that may use the channel, comma-separated.
    #[arg(long, default_value = "default")]
    groups: CsvList,
    /// Higher priority channels are tried first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Share of traffic among channels of the same priority.
    #[arg(long, default_value_t = 1)]
    weight: u32,
    /// Model renames, REQUESTED=UPSTREAM, comma-separated.
    #[arg(long, value_parser = flags::parse_model_map)]
    map: Option<HashMap<String, String>>,
    /// Upstream connect timeout in milliseconds [default: the data plane's].
    #[arg(long, value_name = "MS")]
    connect_timeout_ms: Option<u32>,
    /// Time to the response headers and, for a stream, to its first token, in
    /// milliseconds [default: the data plane's, for the headers only].
    #[arg(long, value_name = "MS")]
    first_byte_timeout_ms: Option<u32>,
    /// Longest silence inside a response in milliseconds [default: the data plane's].
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<u32>,
    /// Whole-request deadline in milliseconds [default: the data plane's].
    #[arg(long, value_name = "MS")]
    total_timeout_ms: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only channels in this status.
    #[arg(long, value_parser = ["enabled", "disabled", "auto_disabled"])]
    status: Option<String>,
    /// Only channels serving this group.
    #[arg(long)]
    group: Option<String>,
    /// Only channels serving this model.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    page: Page,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Id or name of the channel.
    channel: String,
    /// New name, unique among channels.
    #[arg(long)]
    name: Option<String>,
    /// Provider type (see `channel create`); the old type's settings are
    /// dropped.
    #[arg(long = "type", value_parser = KINDS)]
    kind: Option<String>,
    /// Base address including /v1; "" returns to the type's default.
    #[arg(long)]
    base_url: Option<String>,
    /// Replaces the upstream API key.
    #[command(flatten)]
    key: KeyArgs,
    /// Replaces the models served.
    #[arg(long)]
    models: Option<CsvList>,
    /// Replaces the groups.
    #[arg(long)]
    groups: Option<CsvList>,
    /// Higher priority channels are tried first.
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// Share of traffic among channels of the same priority.
    #[arg(long)]
    weight: Option<u32>,
    /// Replaces the model renames; "" removes them all.
    #[arg(long, value_parser = flags::parse_model_map)]
    map: Option<HashMap<String, String>>,
    /// Enable or disable the channel.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Provider settings to change ("" removes one); credentials given
    /// here replace the key pool like --key.
    #[command(flatten)]
    provider: Box<ProviderArgs>,
    /// Upstream connect timeout in milliseconds (0: the data plane's).
    #[arg(long, value_name = "MS")]
    connect_timeout_ms: Option<u32>,
    /// Time to the response headers and, for a stream, to its first token, in
    /// milliseconds (0: the data plane's, for the headers only).
    #[arg(long, value_name = "MS")]
    first_byte_timeout_ms: Option<u32>,
    /// Longest silence inside a response in milliseconds (0: the data plane's).
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<u32>,
    /// Whole-request deadline in milliseconds (0: the data plane's).
    #[arg(long, value_name = "MS")]
    total_timeout_ms: Option<u32>,
}

/// The channel types the control plane accepts.
const KINDS: [&str; 6] = ["openai", "anthropic", "azure", "bedrock", "vertex", "gemini"];

/// Where an upstream key comes from.
#[derive(Debug, Default, clap::Args)]
pub struct KeyArgs {
    /// Upstream API key; `-` reads it from standard input. Prefer
    /// `--key-file` or `-`: a key on the command line is visible to every
    /// local user.
    #[arg(long, conflicts_with = "key_file")]
    key: Option<String>,
    /// File holding the upstream API key (surrounding white space
    /// ignored); `-` reads standard input.
    #[arg(long, value_name = "PATH")]
    key_file: Option<std::path::PathBuf>,
}

// === impl KeyArgs ===

impl KeyArgs {
    /// The key given, if any, read from its file or standard input; an
    /// empty one is an error.
    fn read(self, stdin: impl FnOnce() -> std::io::Result<String>) -> Result<Option<String>> {
        let key = match (self.key, self.key_file) {
            (Some(key), _) if key == "-" => stdin().context("reading the upstream key from standard input")?,
            (None, Some(path)) if path.as_os_str() == "-" => {
                stdin().context("reading the upstream key from standard input")?
            }
            (Some(key), _) => key,
            (None, Some(path)) => {
                std::fs::read_to_string(&path).with_context(|| format!("reading the key file {}", path.display()))?
            }
            (None, None) => return Ok(None),
        };
        let key = key.trim().to_owned();
        if key.is_empty() {
            bail!("the upstream key is empty (an unset variable?); pass --no-key if the upstream needs none");
        }
        Ok(Some(key))
    }

    /// The key given, which must be: from `--key`, `--key-file` or
    /// standard input, never empty.
    pub fn read_required(self) -> Result<String> {
        match self.read(read_stdin) {
            Ok(Some(key)) => Ok(key),
            Ok(None) => bail!("give the upstream key with --key-file PATH, --key-file - (standard input) or --key KEY"),
            Err(error) => Err(error),
        }
    }
}

fn read_stdin() -> std::io::Result<String> {
    std::io::read_to_string(std::io::stdin())
}

/// Runs one channel verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let request = create_request(args, &env_var, read_stdin)?;
            output::render_one(out, &admin.create_channel(request).await.rpc()?)
        }
        Command::List(args) => {
            let request = pb::ListRequest {
                status: args.status.unwrap_or_default(),
                group: args.group.unwrap_or_default(),
                model: args.model.unwrap_or_default(),
                ..args.page.request()
            };
            let list = admin.list_channels(request).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Get { channel } => {
            let id = resolve::channel(admin, &channel).await?;
            output::render_one(out, &admin.get_channel(pb::GetRequest { id }).await.rpc()?)
        }
        Command::Update(mut args) => {
            args.channel = resolve::channel(admin, &args.channel).await?;
            // Provider flags are checked against the type the channel will have.
            let kind = match (&args.kind, args.provider.any()) {
                (Some(kind), _) => kind.clone(),
                (None, true) => admin.get_channel(pb::GetRequest { id: args.channel.clone() }).await.rpc()?.r#type,
                (None, false) => String::new(),
            };
            let request = update_request(args, &kind, &env_var, read_stdin)?;
            output::render_changed(out, "channel", &admin.update_channel(request).await.rpc()?, "updated")
        }
        Command::Disable { channel } => set_status(admin, out, channel, Status::Disabled).await,
        Command::Enable { channel } => set_status(admin, out, channel, Status::Enabled).await,
        Command::Key(command) => key::run(command, admin, out).await,
        Command::Delete(args) => {
            let id = resolve::channel(admin, &args.target).await?;
            if !args.dry_run {
                confirm::delete(&args, &format!("channel {id} ({:?})", args.target))?;
                admin.delete_channel(pb::GetRequest { id: id.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "channel", &id, args.dry_run)
        }
    }
}

async fn set_status(admin: &mut Admin, out: Output, channel: String, status: Status) -> Result<String> {
    let id = resolve::channel(admin, &channel).await?;
    let request = pb::UpdateChannelRequest { id, status: Some(status.as_str().to_string()), ..Default::default() };
    output::render_changed(out, "channel", &admin.update_channel(request).await.rpc()?, status.as_str())
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The key from `--key`/`--key-file`, or the one the provider flags made;
/// never both.
fn channel_key(
    key: KeyArgs,
    provided: Option<String>,
    stdin: &mut Stdin<impl FnOnce() -> std::io::Result<String>>,
) -> Result<Option<String>> {
    match provided {
        Some(_) if key.key.is_some() || key.key_file.is_some() => {
            bail!("the provider's credential flags make the key; leave out --key and --key-file")
        }
        Some(provided) => Ok(Some(provided)),
        None => key.read(|| stdin.take("upstream key").map_err(|error| std::io::Error::other(format!("{error:#}")))),
    }
}

/// One more key for a `kind` channel's pool: from `--key`/`--key-file`, or
/// made by the provider's credential flags.
fn pool_key(
    key: KeyArgs,
    credentials: ProviderArgs,
    kind: &str,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<String> {
    let mut stdin = Stdin::new(stdin);
    let provided = credentials.pool_key(kind, env, &mut stdin)?;
    channel_key(key, provided, &mut stdin)?.with_context(|| missing_key(kind))
}

fn create_request(
    args: CreateArgs,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<pb::Channel> {
    let kind = args.kind.or_else(|| args.provider.kind().map(str::to_owned)).unwrap_or_else(|| "openai".into());
    let mut stdin = Stdin::new(stdin);
    let provided = args.provider.resolve(&kind, env, &mut stdin)?;
    let key = channel_key(args.key, provided.key, &mut stdin)?;
    if key.is_none() && !args.no_key {
        bail!("{}", missing_key(&kind));
    }
    Ok(pb::Channel {
        name: args.name,
        r#type: kind,
        base_url: args.base_url.unwrap_or_default(),
        settings: provided.settings,
        has_key: key.is_some(),
        api_key: key.unwrap_or_default(),
        models: args.models.into(),
        model_map: args.map.unwrap_or_default(),
        groups: args.groups.into(),
        priority: args.priority,
        weight: args.weight,
        connect_timeout_ms: args.connect_timeout_ms.unwrap_or(0),
        first_byte_timeout_ms: args.first_byte_timeout_ms.unwrap_or(0),
        idle_timeout_ms: args.idle_timeout_ms.unwrap_or(0),
        total_timeout_ms: args.total_timeout_ms.unwrap_or(0),
        ..Default::default()
    })
}

/// What to say when a `kind` channel is created without a key.
fn missing_key(kind: &str) -> &'static str {
    match kind {
        "bedrock" => {
            "give the credentials with --access-key-id and --secret-access-key-file PATH, --aws-env, or --bedrock-api-key-file PATH"
        }
        "vertex" => "give the service account's JSON key with --service-account-file PATH",
        _ => "give the upstream key with --key-file PATH, --key - (standard input) or --key KEY, or --no-key",
    }
}

/// The update `args` ask for; provider flags are checked against `kind`,
/// the channel's type after the update.
fn update_request(
    args: UpdateArgs,
    kind: &str,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<pb::UpdateChannelRequest> {
    let mut stdin = Stdin::new(stdin);
    let provided = if args.provider.any() { args.provider.resolve(kind, env, &mut stdin)? } else { Default::default() };
    Ok(pb::UpdateChannelRequest {
        id: args.channel,
        name: args.name,
        base_url: args.base_url,
        api_key: channel_key(args.key, provided.key, &mut stdin)?,
        settings: provided.settings,
        set_models: args.models.is_some(),
        models: args.models.map(Vec::from).unwrap_or_default(),
        set_groups: args.groups.is_some(),
        groups: args.groups.map(Vec::from).unwrap_or_default(),
        set_model_map: args.map.is_some(),
        model_map: args.map.unwrap_or_default(),
        priority: args.priority,
        weight: args.weight,
        status: args.status.map(|s| s.as_str().to_string()),
        r#type: args.kind,
        connect_timeout_ms: args.connect_timeout_ms,
        first_byte_timeout_ms: args.first_byte_timeout_ms,
        idle_timeout_ms: args.idle_timeout_ms,
        total_timeout_ms: args.total_timeout_ms,
    })
}

/// The kind's settings for people: `auth=sigv4, region=us-east-1`.
fn settings(channel: &pb::Channel) -> String {
    let mut pairs: Vec<String> = channel.settings.iter().map(|(name, value)| format!("{name}={value}")).collect();
    pairs.sort();
    output::list(&pairs, "-")
}

fn model_map(channel: &pb::Channel) -> String {
    let mut pairs: Vec<String> = channel.model_map.iter().map(|(from, to)| format!("{from}={to}")).collect();
    pairs.sort();
    output::list(&pairs, "-")
}

/// The pool for people: `k_1 (sk-abc…, enabled), …`.
fn keys(channel: &pb::Channel) -> String {
    let keys: Vec<String> =
        channel.keys.iter().map(|k| format!("{} ({}, {})", k.id, shown_prefix(&k.prefix), k.status)).collect();
    output::list(&keys, "-")
}

/// A key's prefix for people: the first characters and `…`; a service
/// account's email or an AWS access key id (a whole public part) as is.
pub(crate) fn shown_prefix(prefix: &str) -> String {
    if prefix.contains('@') || prefix.len() >= 16 { prefix.to_owned() } else { format!("{prefix}…") }
}

fn timeout(ms: u32) -> String {
    match ms {
        0 => "default".to_string(),
        ms => format!("{ms}ms"),
    }
}

// === impl Render for pb::Channel ===

impl Render for pb::Channel {
    const COLUMNS: &'static [&'static str] =
        &["ID", "NAME", "TYPE", "STATUS", "PRIORITY", "WEIGHT", "MODELS", "GROUPS", "BASE URL", "KEY"];
    const WIDE: &'static [&'static str] = &["SETTINGS", "MODEL MAP", "TIMEOUTS (CONNECT/FIRST BYTE/IDLE/TOTAL)"];
    type Json = schema::Channel;

    fn json(&self) -> schema::Channel {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.r#type.clone(),
            self.status.clone(),
            self.priority.to_string(),
            self.weight.to_string(),
            output::list(&self.models, "-"),
            output::list(&self.groups, "-"),
            self.base_url.clone(),
            if self.has_key { "set" } else { "none" }.to_string(),
        ]
    }

    fn wide_row(&self) -> Vec<String> {
        let timeouts =
            [self.connect_timeout_ms, self.first_byte_timeout_ms, self.idle_timeout_ms, self.total_timeout_ms];
        vec![settings(self), model_map(self), timeouts.map(timeout).join("/")]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("name", self.name.clone()),
            ("type", self.r#type.clone()),
            ("status", self.status.clone()),
            ("base url", self.base_url.clone()),
            ("settings", settings(self)),
            ("has key", self.has_key.to_string()),
            ("models", output::list(&self.models, "-")),
            ("model map", model_map(self)),
            ("groups", output::list(&self.groups, "-")),
            ("priority", self.priority.to_string()),
            ("weight", self.weight.to_string()),
            ("connect timeout", timeout(self.connect_timeout_ms)),
            ("first byte timeout", timeout(self.first_byte_timeout_ms)),
            ("idle timeout", timeout(self.idle_timeout_ms)),
            ("total timeout", timeout(self.total_timeout_ms)),
            ("keys", keys(self)),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn channel_json_never_carries_the_api_key() {
        let channel = pb::Channel {
            id: "ch_1".into(),
            r#type: "openai".into(),
            api_key: "sk-upstream-secret".into(),
            has_key: true,
            model_map: [("gpt-4o".to_string(), "gpt-4o-2024-08-06".to_string())].into(),
            ..Default::default()
        };
        let json = serde_json::to_value(channel.json()).unwrap();
        assert!(json.get("api_key").is_none());
        assert!(!json.to_string().contains("sk-upstream-secret"));
        assert_eq!(json["has_key"], true);
        assert_eq!(json["type"], "openai");
        assert_eq!(json["model_map"]["gpt-4o"], "gpt-4o-2024-08-06");
        assert!(!channel.fields().iter().any(|(_, v)| v.contains("secret")));
        assert!(!channel.row().iter().any(|v| v.contains("secret")));
    }

    #[test]
    fn update_replaces_only_the_lists_given() {
        let args = UpdateArgs {
            channel: "ch_1".into(),
            name: None,
            kind: None,
            base_url: None,
            key: KeyArgs::default(),
            models: Some("a,b".parse().unwrap()),
            groups: None,
            priority: Some(-1),
            weight: None,
            map: Some(HashMap::new()),
            status: None,
            provider: Box::default(),
            connect_timeout_ms: None,
            first_byte_timeout_ms: None,
            idle_timeout_ms: Some(30_000),
            total_timeout_ms: None,
        };
        let request = update_request(args, "", &|_| None, || unreachable!("no key was given")).unwrap();
        assert!(request.set_models && !request.set_groups && request.set_model_map);
        assert_eq!(request.models, ["a", "b"]);
        assert!(request.model_map.is_empty());
        assert_eq!(request.priority, Some(-1));
        assert_eq!(request.api_key, None);
        assert_eq!((request.connect_timeout_ms, request.idle_timeout_ms), (None, Some(30_000)));
    }

    fn create(key: KeyArgs, no_key: bool) -> CreateArgs {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: CreateArgs,
        }
        let mut args = Cli::parse_from(["gwctl", "--name", "n", "--base-url", "http://u/v1", "--models", "m"]).args;
        args.key = key;
        args.no_key = no_key;
        args
    }

    fn create_request_of(args: CreateArgs, stdin: impl FnOnce() -> std::io::Result<String>) -> Result<pb::Channel> {
        create_request(args, &|_| None, stdin)
    }

    fn parsed(args: &[&str]) -> CreateArgs {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: CreateArgs,
        }
        let base = ["gwctl", "--name", "n", "--models", "m"];
        Cli::parse_from(base.iter().chain(args)).args
    }

    #[test]
    fn provider_flags_name_the_type_and_make_the_key() {
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIAENV".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("envsecret".to_owned()),
            _ => None,
        };
        let request = create_request(parsed(&["--region", "us-east-1", "--aws-env"]), &env, || unreachable!()).unwrap();
        assert_eq!((request.r#type.as_str(), request.api_key.as_str()), ("bedrock", "AKIAENV:envsecret"));
        assert_eq!(request.base_url, "", "the control plane fills in the default");
        assert_eq!(request.settings["region"], "us-east-1");

        let both = parsed(&["--region", "us-east-1", "--aws-env", "--key", "k"]);
        let error = create_request(both, &env, || unreachable!()).unwrap_err().to_string();
        assert!(error.contains("leave out --key"), "{error}");
        let keyless = create_request_of(parsed(&["--type", "vertex", "--location", "global"]), || unreachable!());
        assert!(keyless.unwrap_err().to_string().contains("--service-account-file"));
        let gemini = create_request_of(parsed(&["--type", "gemini", "--key", "-"]), || Ok("AIza\n".into())).unwrap();
        assert_eq!((gemini.api_key.as_str(), gemini.settings.len()), ("AIza", 0));
    }

    #[test]
    fn the_upstream_key_comes_from_a_file_or_standard_input_and_is_never_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-from-file\n").unwrap();
        let from_file = KeyArgs { key: None, key_file: Some(file) };
        assert_eq!(create_request_of(create(from_file, false), || unreachable!()).unwrap().api_key, "sk-from-file");
        let from_stdin = KeyArgs { key: Some("-".into()), key_file: None };
        let request = create_request_of(create(from_stdin, false), || Ok(" sk-from-stdin\n".into())).unwrap();
        assert_eq!((request.api_key.as_str(), request.has_key), ("sk-from-stdin", true));

        let empty = KeyArgs { key: Some(String::new()), key_file: None };
        let error = create_request_of(create(empty, false), || unreachable!()).unwrap_err().to_string();
        assert!(error.contains("empty") && error.contains("--no-key"), "{error}");
        let missing = create_request_of(create(KeyArgs::default(), false), || unreachable!()).unwrap_err();
        assert!(missing.to_string().contains("--key-file"), "{missing}");
        let keyless = create_request_of(create(KeyArgs::default(), true), || unreachable!()).unwrap();
        assert!(!keyless.has_key && keyless.api_key.is_empty());
    }

    #[test]
    fn a_pool_key_is_made_by_the_credential_flags_and_settings_stay_with_the_channel() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let secret = secret.to_str().unwrap();
        let pool = |key: KeyArgs, args: &[&str], kind: &str| {
            pool_key(key, provider::tests::parse(args), kind, &|_| None, || Ok("from-stdin\n".to_owned()))
        };

        let pair =
            pool(KeyArgs::default(), &["--access-key-id", "AKIA2", "--secret-access-key-file", secret], "bedrock");
        assert_eq!(pair.unwrap(), "AKIA2:s3cret");
        let piped = pool(KeyArgs::default(), &["--access-key-id", "AKIA3", "--secret-access-key", "-"], "bedrock");
        assert_eq!(piped.unwrap(), "AKIA3:from-stdin");
        let api_key = pool(KeyArgs::default(), &["--bedrock-api-key-file", secret], "bedrock");
        assert_eq!(api_key.unwrap(), "s3cret");

        let error = pool(KeyArgs::default(), &["--region", "us-west-2", "--bedrock-api-key-file", secret], "bedrock");
        let error = error.unwrap_err().to_string();
        assert!(error.contains("--region") && error.contains("gwctl channel update"), "{error}");
        let error = pool(KeyArgs::default(), &["--access-key-id", "A", "--secret-access-key-file", secret], "openai");
        assert!(error.unwrap_err().to_string().contains("--type bedrock"));
        let both =
            pool(KeyArgs { key: Some("k".into()), key_file: None }, &["--bedrock-api-key-file", secret], "bedrock");
        assert!(both.unwrap_err().to_string().contains("leave out --key"));

        let account = dir.path().join("sa.json");
        let json = r#"{"type":"service_account","project_id":"p2","client_email":"a@p2.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\nX\n-----END PRIVATE KEY-----\n"}"#;
        std::fs::write(&account, json).unwrap();
        let vertex = pool(KeyArgs::default(), &["--service-account-file", account.to_str().unwrap()], "vertex");
        let made: serde_json::Value = serde_json::from_str(&vertex.unwrap()).unwrap();
        assert_eq!(made, serde_json::from_str::<serde_json::Value>(json).unwrap());
    }
}
