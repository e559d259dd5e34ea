//! `gwctl channel key`: the pool of upstream keys of one channel. Requests
//! spread over its enabled keys; a key the upstream refuses is disabled
//! alone (`auto_disabled`). Keys are write-only like a channel's key: they
//! are read from a file or standard input, and only their id and first few
//! characters are ever shown.

use anyhow::Result;
use gw_proto::pb;

use super::{KeyArgs, provider::ProviderArgs};
use crate::client::{Admin, RpcResult};
use crate::confirm;
use crate::output::{self, Output, Render};
use crate::{resolve, schema};

/// Key pool verbs. The channel may be named by its id or name.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add an upstream key to the channel's pool, enabled. Bedrock and
    /// Vertex channels also take their provider's credential flags, which
    /// make the key as `channel create` does.
    #[command(after_help = "Examples:\n  \
        gwctl channel key add main --key-file ~/.config/openai-2.key\n  \
        gwctl channel key add main --key-file - < key.txt\n  \
        gwctl channel key add bedrock-east --access-key-id AKIA… --secret-access-key-file ~/.aws/second.secret\n  \
        gwctl channel key add vertex-main --service-account-file second-sa.json")]
    Add {
        /// Id or name of the channel.
        channel: String,
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        credentials: Box<ProviderArgs>,
    },
    /// List the channel's keys: id, prefix, status.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  gwctl channel key list main\n  gwctl channel key list main -o json"
    )]
    List {
        /// Id or name of the channel.
        channel: String,
    },
    /// Stop using one key.
    #[command(after_help = "Examples:\n  gwctl channel key disable main k_3fa9c1")]
    Disable(KeyRef),
    /// Use one key again (also clears an automatic disable).
    #[command(after_help = "Examples:\n  gwctl channel key enable main k_3fa9c1")]
    Enable(KeyRef),
    /// Remove one key from the pool.
    #[command(alias = "rm", after_help = "Examples:\n  gwctl channel key remove main k_3fa9c1 --yes")]
    Remove {
        #[command(flatten)]
        key: KeyRef,
        /// Remove without asking (needed when standard input is not a terminal).
        #[arg(short, long)]
        yes: bool,
    },
}

/// One key of one channel.
#[derive(Debug, clap::Args)]
pub struct KeyRef {
    /// Id or name of the channel.
    channel: String,
    /// Id of the key (see `gwctl channel key list`).
    key: String,
}

/// Runs one key verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Add { channel, key, credentials } => {
            let channel_id = resolve::channel(admin, &channel).await?;
            let key = if credentials.any() {
                let kind = admin.get_channel(pb::GetRequest { id: channel_id.clone() }).await.rpc()?.r#type;
                super::pool_key(key, *credentials, &kind, &super::env_var, super::read_stdin)?
            } else {
                key.read_required()?
            };
            let request = pb::AddChannelKeyRequest { channel_id, key };
            output::render_one(out, &admin.add_channel_key(request).await.rpc()?)
        }
        Command::List { channel } => {
            let id = resolve::channel(admin, &channel).await?;
            let list = admin.list_channel_keys(pb::GetRequest { id }).await.rpc()?;
            output::render_list(out, &list.items, "")
        }
        Command::Disable(key) => set_status(admin, out, key, "disabled").await,
        Command::Enable(key) => set_status(admin, out, key, "enabled").await,
        Command::Remove { key, yes } => {
            let channel_id = resolve::channel(admin, &key.channel).await?;
            let what = format!("key {} of channel {channel_id}", key.key);
            if !confirm::ask(yes, &format!("remove {what}"))? {
                return Err(confirm::UsageError(format!("not removing {what}")).into());
            }
            let request = pb::ChannelKeyRef { channel_id: channel_id.clone(), key_id: key.key.clone() };
            admin.remove_channel_key(request).await.rpc()?;
            output::render_deleted(out, "key", &format!("{channel_id}/{}", key.key), false)
        }
    }
}

async fn set_status(admin: &mut Admin, out: Output, key: KeyRef, status: &str) -> Result<String> {
    let channel_id = resolve::channel(admin, &key.channel).await?;
    let request = pb::UpdateChannelKeyRequest { channel_id, key_id: key.key, status: status.to_owned() };
    output::render_changed(out, "key", &admin.update_channel_key(request).await.rpc()?, status)
}

// === impl Render for pb::ChannelKey ===

impl Render for pb::ChannelKey {
    const COLUMNS: &'static [&'static str] = &["ID", "PREFIX", "STATUS", "DISABLED", "REASON", "CREATED"];
    type Json = schema::ChannelKey;

    fn json(&self) -> schema::ChannelKey {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            super::shown_prefix(&self.prefix),
            self.status.clone(),
            output::time(self.disabled_at),
            if self.disabled_reason.is_empty() { "-".to_owned() } else { self.disabled_reason.clone() },
            output::time(self.created_at),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("prefix", super::shown_prefix(&self.prefix)),
            ("status", self.status.clone()),
            ("disabled at", output::time(self.disabled_at)),
            ("disabled reason", self.disabled_reason.clone()),
            ("created at", output::time(self.created_at)),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_key_is_shown_by_prefix_only() {
        let key = pb::ChannelKey {
            id: "k_1".into(),
            key: "sk-upstream-secret".into(),
            prefix: "sk-up".into(),
            status: "enabled".into(),
            ..Default::default()
        };
        let json = serde_json::to_string(&key.json()).unwrap();
        assert!(!json.contains("secret") && json.contains("sk-up"), "{json}");
        assert!(!key.row().iter().chain(key.fields().iter().map(|(_, v)| v)).any(|v| v.contains("secret")));
    }
}
