//! `gwctl dataplanes`: the fleet's data planes (the same list from every
//! control-plane replica), which policy revision each has applied, and how
//! each is doing; removing those that are gone.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs};
use crate::flags::Page;
use crate::output::{self, Output, Render};
use crate::schema;

/// Data-plane verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List data planes, by node id, with the revision each has applied.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  \
        gwctl dataplanes list\n  \
        gwctl dataplanes list -o json | jq '.items[] | select(.state != \"in sync\")'"
    )]
    List(ListArgs),
    /// Forget a data plane, typically one listed as gone (a live one
    /// reappears with its next heartbeat).
    #[command(
        alias = "rm",
        after_help = "Examples:\n  \
        gwctl dataplanes remove dp-7 --yes\n  \
        gwctl dataplanes list -o json | jq -r '.items[] | select(.state == \"gone\") | .node_id'"
    )]
    Remove(DeleteArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    page: Page,
}

/// A data plane as the control plane sees it, next to the control plane's
/// own revision so "behind" can be read off one row.
struct Row<'a> {
    plane: &'a pb::DataPlane,
    revision: u64,
}

/// Runs one data-plane verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::List(args) => {
            let list = admin.list_data_planes(args.page.request()).await.rpc()?;
            let rows: Vec<Row<'_>> = list.items.iter().map(|plane| Row { plane, revision: list.revision }).collect();
            let table = output::render_list(out, &rows, &list.next_page_token)?;
            Ok(match out {
                Output::Table | Output::Wide => format!("control plane revision {}\n{table}", list.revision),
                Output::Json | Output::Yaml | Output::Csv | Output::Name => table,
            })
        }
        Command::Remove(args) => {
            if !args.dry_run {
                confirm::delete(&args, &format!("data plane {}", args.target))?;
                admin.remove_data_plane(pb::GetRequest { id: args.target.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "dataplane", &args.target, args.dry_run)
        }
    }
}

// === impl Row ===

impl Row<'_> {
    fn behind(&self) -> u64 {
        self.revision.saturating_sub(self.plane.acked_revision)
    }

    fn state(&self) -> &'static str {
        match (self.plane.liveness.as_str(), self.plane.connected, self.behind()) {
            ("gone", _, _) => "gone",
            (_, false, _) => "disconnected",
            (_, true, 0) => "in sync",
            (_, true, _) => "behind",
        }
    }
}

impl Render for Row<'_> {
    const COLUMNS: &'static [&'static str] =
        &["NODE", "ADDRESS", "REPLICA", "STATE", "ACKED", "BEHIND", "BACKLOG", "REQ/S", "LAST SEEN", "LAST ERROR"];

    const WIDE: &'static [&'static str] = &["VERSION", "SENT", "CONNECTED AT"];
    type Json = schema::DataPlane;

    fn json(&self) -> schema::DataPlane {
        let p = self.plane;
        schema::DataPlane {
            node_id: p.node_id.clone(),
            address: p.address.clone(),
            version: p.version.clone(),
            state: self.state().to_owned(),
            connected: p.connected,
            acked_revision: p.acked_revision,
            sent_revision: p.sent_revision,
            control_plane_revision: self.revision,
            behind: self.behind(),
            connected_at: p.connected_at,
            last_seen: p.last_seen,
            last_error: p.last_error.clone(),
            replica: p.replica.clone(),
            spool_backlog: p.spool_backlog,
            requests_per_second: p.requests_per_second,
        }
    }

    fn name(&self) -> String {
        self.plane.node_id.clone()
    }

    fn wide_row(&self) -> Vec<String> {
        let p = self.plane;
        vec![p.version.clone(), p.sent_revision.to_string(), output::time(p.connected_at)]
    }

    fn row(&self) -> Vec<String> {
        let p = self.plane;
        vec![
            p.node_id.clone(),
            p.address.clone(),
            p.replica.clone(),
            self.state().to_string(),
            p.acked_revision.to_string(),
            self.behind().to_string(),
            p.spool_backlog.to_string(),
            format!("{:.1}", p.requests_per_second),
            output::time(p.last_seen),
            if p.last_error.is_empty() { "-".to_string() } else { p.last_error.clone() },
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let p = self.plane;
        vec![
            ("node", p.node_id.clone()),
            ("address", p.address.clone()),
            ("version", p.version.clone()),
            ("replica", p.replica.clone()),
            ("state", self.state().to_string()),
            ("spool backlog", p.spool_backlog.to_string()),
            ("requests per second", format!("{:.1}", p.requests_per_second)),
            ("acked revision", p.acked_revision.to_string()),
            ("sent revision", p.sent_revision.to_string()),
            ("connected at", output::time(p.connected_at)),
            ("last seen", output::time(p.last_seen)),
            ("last error", p.last_error.clone()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn data_plane_json_says_how_far_behind_it_is() {
        let plane = pb::DataPlane {
            node_id: "dp-1".into(),
            acked_revision: 40,
            sent_revision: 42,
            connected: true,
            ..Default::default()
        };
        let row = Row { plane: &plane, revision: 42 };
        let json = serde_json::to_value(row.json()).unwrap();
        assert_eq!(json["node_id"], "dp-1");
        assert_eq!(json["behind"], 2);
        assert_eq!(json["control_plane_revision"], 42);
        assert_eq!(row.state(), "behind");
    }
}
