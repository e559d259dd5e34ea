//! `gwctl secrets rotate`: seals every stored upstream key under the control
//! plane's current master key, or under a new one read from a file or
//! standard input (never the command line), which becomes that replica's
//! current key. The other replicas must then be restarted with the new key
//! as `master_key_file` (and the old one in `previous_master_key_files`).

use anyhow::{Context as _, Result};
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::output::Output;

/// Secret-management verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Re-seal every stored upstream key under the current (or a new) master key.
    #[command(after_help = "Examples:\n  \
        gwctl secrets rotate\n  \
        openssl rand -hex 32 > new-master.key && gwctl secrets rotate --new-master-key-file new-master.key\n  \
        gwctl secrets rotate --new-master-key-file - < new-master.key")]
    Rotate(RotateArgs),
}

#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    /// File holding the new master key (64 hex characters); `-` reads
    /// standard input. Without it, keys are sealed under the replica's
    /// configured current key (after rolling the replicas to a new one).
    #[arg(long)]
    new_master_key_file: Option<std::path::PathBuf>,
}

/// Runs one secrets verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Rotate(args) => {
            let new_master_key = match args.new_master_key_file {
                None => String::new(),
                Some(path) => {
                    let text = if path.as_os_str() == "-" {
                        std::io::read_to_string(std::io::stdin())
                            .context("reading the new master key from standard input")?
                    } else {
                        std::fs::read_to_string(&path)
                            .with_context(|| format!("reading the new master key file {}", path.display()))?
                    };
                    // An empty file must not fall back to the current key.
                    anyhow::ensure!(!text.trim().is_empty(), "the new master key is empty");
                    text.trim().to_owned()
                }
            };
            let answer = admin.rotate_secrets(pb::RotateSecretsRequest { new_master_key }).await.rpc()?;
            Ok(match out {
                Output::Json | Output::Yaml => {
                    let value = serde_json::json!({ "resealed": answer.resealed, "key_id": answer.key_id });
                    match out {
                        Output::Yaml => serde_norway::to_string(&value)?,
                        _ => format!("{}\n", serde_json::to_string_pretty(&value)?),
                    }
                }
                _ => format!(
                    "sealed {} upstream key(s) anew; every stored key is sealed under master key {}\n",
                    answer.resealed, answer.key_id
                ),
            })
        }
    }
}
