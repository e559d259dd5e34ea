//! `gwctl store`: the control plane's store as the fleet sees it (its
//! lineage, revision and persistence), and the confirmation that makes a
//! store that lost data or went back in time the truth again.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, UsageError};
use crate::output::{self, Output, Render};
use crate::schema;

/// Store verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// The store's lineage, revision and persistence, and whether the
    /// control plane asked holds it suspect.
    #[command(after_help = "Examples:\n  \
        gwctl store status\n  \
        gwctl store status -o json | jq -r .suspect")]
    Status,
    /// Make the store as it is now the truth for every data plane, after it
    /// lost data or was restored from an older copy. Data planes then
    /// replace what they hold with it: check it first (`gwctl account list`,
    /// `gwctl token list`).
    #[command(after_help = "Examples:\n  \
        gwctl store status\n  \
        gwctl store confirm --yes")]
    Confirm {
        /// Confirm without asking (needed when standard input is not a
        /// terminal).
        #[arg(short, long)]
        yes: bool,
    },
}

struct Status(pb::StoreStatus);

/// Runs one store verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    let status = match command {
        Command::Status => admin.get_store_status(pb::Empty {}).await.rpc()?,
        Command::Confirm { yes } => {
            let before = admin.get_store_status(pb::Empty {}).await.rpc()?;
            let question = format!(
                "make store {} at revision {} the truth for every data plane",
                before.store_id, before.revision
            );
            if !confirm::ask(yes, &question)? {
                return Err(UsageError("not confirming the store".to_owned()).into());
            }
            admin.confirm_store(pb::Empty {}).await.rpc()?
        }
    };
    output::render_one(out, &Status(status))
}

impl Render for Status {
    const COLUMNS: &'static [&'static str] = &["STORE", "CONFIRMED", "REVISION", "PERSISTENCE", "SUSPECT"];
    type Json = schema::StoreStatus;

    fn json(&self) -> schema::StoreStatus {
        schema::StoreStatus::from(&self.0)
    }

    fn name(&self) -> String {
        self.0.store_id.clone()
    }

    fn row(&self) -> Vec<String> {
        self.fields().into_iter().map(|(_, value)| value).collect()
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let s = &self.0;
        vec![
            ("store", s.store_id.clone()),
            ("confirmed", s.confirmed.to_string()),
            ("revision", s.revision.to_string()),
            ("persistence", s.persistence.clone()),
            ("suspect", if s.suspect.is_empty() { "no".to_owned() } else { s.suspect.clone() }),
        ]
    }
}
