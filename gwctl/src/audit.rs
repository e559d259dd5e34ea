//! `gwctl audit`: the log of admin writes, newest first: who (credential id
//! and role), what (RPC, resource kind and id), when, and the outcome,
//! including writes refused for the caller's role.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::flags;
use crate::output::{self, Output, Render};
use crate::schema;

/// Audit verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List audit entries, newest first.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl audit list --since 24h\n  \
        gwctl audit list --actor cred_8f2k1m --kind token -o json\n  \
        gwctl audit list --limit 50 --continue 1234"
    )]
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only entries of this credential id (`root` for the bootstrap admin key).
    #[arg(long)]
    actor: Option<String>,
    /// Only entries about this kind of resource (account, token, credential, …).
    #[arg(long)]
    kind: Option<String>,
    #[command(flatten)]
    range: flags::Since,
    /// At most this many entries (the control plane answers at most 1000 a
    /// page); when more match, the continue token is printed (on stderr for tables).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Token printed by the previous list, to list the entries after it.
    #[arg(long = "continue", value_name = "TOKEN")]
    continue_token: Option<String>,
}

/// Runs one audit verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let (from, to) = args.range.range()?;
            let request = pb::ListAuditRequest {
                limit: args.limit,
                page_token: args.continue_token.unwrap_or_default(),
                from,
                to,
                actor_id: args.actor.unwrap_or_default(),
                kind: args.kind.unwrap_or_default(),
            };
            let page = admin.list_audit(request).await.rpc()?;
            output::render_list(out, &page.items, &page.next_page_token)
        }
    }
}

// === impl Render for pb::AuditEntry ===

impl Render for pb::AuditEntry {
    const COLUMNS: &'static [&'static str] = &["TIME", "ACTOR", "ROLE", "METHOD", "KIND", "TARGET", "OUTCOME"];
    const WIDE: &'static [&'static str] = &["SEQ"];
    type Json = schema::AuditEntry;

    fn json(&self) -> schema::AuditEntry {
        self.into()
    }

    fn name(&self) -> String {
        self.seq.to_string()
    }

    fn row(&self) -> Vec<String> {
        vec![
            output::time(self.at),
            self.actor_id.clone(),
            self.actor_role.clone(),
            self.method.clone(),
            self.kind.clone(),
            if self.target.is_empty() { "-".into() } else { self.target.clone() },
            self.outcome.clone(),
        ]
    }

    fn wide_row(&self) -> Vec<String> {
        vec![self.seq.to_string()]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("seq", self.seq.to_string()),
            ("time", output::time(self.at)),
            ("actor", self.actor_id.clone()),
            ("role", self.actor_role.clone()),
            ("method", self.method.clone()),
            ("kind", self.kind.clone()),
            ("target", self.target.clone()),
            ("outcome", self.outcome.clone()),
        ]
    }
}
