//! `gwctl group`: groups set the price ratio and rate limit that apply to
//! every token in them. A group is named by its name.

use anyhow::Result;
use gw_pricing::wire;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs};
use crate::flags::{self, Page};
use crate::output::{self, Output, Render};
use crate::schema;

/// Group verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a group.
    #[command(after_help = "Examples:\n  \
        gwctl group create --name vip --ratio 0.8 --rate-limit 600/1\n  \
        gwctl group create --name trial --ratio 1.5 --description 'free trial'")]
    Create(CreateArgs),
    /// List groups, by name.
    #[command(alias = "ls", after_help = "Examples:\n  gwctl group list\n  gwctl group list -o name")]
    List(ListArgs),
    /// Show one group.
    #[command(after_help = "Examples:\n  gwctl group get vip")]
    Get {
        /// Name of the group.
        name: String,
    },
    /// Change a group; flags left out stay as they are.
    #[command(
        after_help = "Examples:\n  gwctl group update vip --ratio 0.75\n  gwctl group update trial --deprecated true --rate-limit off"
    )]
    Update(UpdateArgs),
    /// Delete a group (no token may be in it).
    #[command(
        alias = "rm",
        after_help = "Examples:\n  gwctl group delete trial --dry-run\n  gwctl group delete trial --yes"
    )]
    Delete(DeleteArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    page: Page,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Name of the group, what accounts, tokens and channels refer to.
    #[arg(long)]
    name: String,
    /// Price multiplier for every request in the group (at most 6 decimals).
    #[arg(long, default_value = "1", value_parser = gw_pricing::parse_ratio_ppm)]
    ratio: i64,
    /// Refuse requests of tokens in this group.
    #[arg(long)]
    deprecated: bool,
    /// A note for people.
    #[arg(long, default_value = "", hide_default_value = true)]
    description: String,
    /// Requests per window: MAX/MINUTES, e.g. 60/1.
    #[arg(long, value_parser = flags::parse_rate_limit)]
    rate_limit: Option<pb::RateLimit>,
    /// Tokens (input + output) per minute, per account using the group [default: no limit].
    #[arg(long, value_parser = flags::parse_count_limit)]
    tokens_per_minute: Option<u32>,
    /// Requests in flight at once, per account using the group [default: no limit].
    #[arg(long, value_parser = flags::parse_count_limit)]
    max_in_flight: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Name of the group.
    name: String,
    /// New price multiplier (at most 6 decimals).
    #[arg(long, value_parser = gw_pricing::parse_ratio_ppm)]
    ratio: Option<i64>,
    /// Whether to refuse requests of tokens in this group.
    #[arg(long)]
    deprecated: Option<bool>,
    /// New note for people.
    #[arg(long)]
    description: Option<String>,
    /// Requests per window: MAX/MINUTES, e.g. 60/1, or off.
    #[arg(long, value_parser = flags::parse_rate_limit)]
    rate_limit: Option<pb::RateLimit>,
    /// Tokens (input + output) per minute, per account using the group, or off.
    #[arg(long, value_parser = flags::parse_count_limit)]
    tokens_per_minute: Option<u32>,
    /// Requests in flight at once, per account using the group, or off.
    #[arg(long, value_parser = flags::parse_count_limit)]
    max_in_flight: Option<u32>,
}

/// Runs one group verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let group = pb::Group {
                name: args.name,
                ratio: wire::ratio(args.ratio),
                deprecated: args.deprecated,
                description: args.description,
                rate_limit: args.rate_limit,
                tokens_per_minute: args.tokens_per_minute.unwrap_or(0),
                max_in_flight: args.max_in_flight.unwrap_or(0),
            };
            output::render_one(out, &admin.create_group(group).await.rpc()?)
        }
        Command::List(args) => {
            let list = admin.list_groups(args.page.request()).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
        }
        Command::Get { name } => output::render_one(out, &admin.get_group(pb::GetRequest { id: name }).await.rpc()?),
        Command::Update(args) => {
            let request = pb::UpdateGroupRequest {
                name: args.name,
                ratio: args.ratio.map(wire::ratio),
                deprecated: args.deprecated,
                description: args.description,
                rate_limit: args.rate_limit,
                tokens_per_minute: args.tokens_per_minute,
                max_in_flight: args.max_in_flight,
            };
            output::render_changed(out, "group", &admin.update_group(request).await.rpc()?, "updated")
        }
        Command::Delete(args) => {
            let name = admin.get_group(pb::GetRequest { id: args.target.clone() }).await.rpc()?.name;
            if !args.dry_run {
                confirm::delete(&args, &format!("group {name:?}"))?;
                admin.delete_group(pb::GetRequest { id: name.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "group", &name, args.dry_run)
        }
    }
}

/// A group's ratio for people, as the planes price with it: `1.5`.
fn ratio(group: &pb::Group) -> String {
    match wire::ratio_ppm(group.ratio) {
        Some(ppm) => gw_pricing::format_ratio(ppm),
        // The control plane refuses such ratios; show what arrived.
        None => group.ratio.to_string(),
    }
}

// === impl Render for pb::Group ===

impl Render for pb::Group {
    const COLUMNS: &'static [&'static str] = &["NAME", "RATIO", "DEPRECATED", "RATE LIMIT", "DESCRIPTION"];
    type Json = schema::Group;

    fn json(&self) -> schema::Group {
        self.into()
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            ratio(self),
            self.deprecated.to_string(),
            output::rate_limit(self.rate_limit.as_ref()),
            self.description.clone(),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("name", self.name.clone()),
            ("ratio", ratio(self)),
            ("deprecated", self.deprecated.to_string()),
            ("rate limit", output::rate_limit(self.rate_limit.as_ref())),
            ("tokens per minute", output::count_limit(self.tokens_per_minute)),
            ("max in flight", output::count_limit(self.max_in_flight)),
            ("description", self.description.clone()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<CreateArgs, clap::Error> {
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: CreateArgs,
        }
        let argv = ["group", "--name", "vip"].iter().chain(args);
        <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.args)
    }

    #[test]
    fn ratio_must_be_a_non_negative_number() {
        assert_eq!(parse(&["--ratio", "2"]).unwrap().ratio, 2_000_000);
        assert_eq!(parse(&["--ratio", "0.5"]).unwrap().ratio, 500_000);
        assert_eq!(parse(&[]).unwrap().ratio, 1_000_000, "1 by default");
        for text in ["-1", "NaN", "inf", "x", "0.0000001"] {
            assert!(parse(&["--ratio", text]).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn ratios_reach_the_wire_and_come_back_as_typed() {
        let group = pb::Group { ratio: wire::ratio(parse(&["--ratio", "0.1"]).unwrap().ratio), ..Default::default() };
        assert_eq!(group.ratio, 0.1);
        assert_eq!(group.row()[1], "0.1");
        let tiny = pb::Group { ratio: wire::ratio(1), ..Default::default() };
        assert_eq!(tiny.fields()[1], ("ratio", "0.000001".to_string()), "{}", tiny.ratio);
    }

    #[test]
    fn group_json_keeps_the_rate_limit_object() {
        let group = pb::Group {
            name: "vip".into(),
            ratio: 2.0,
            rate_limit: Some(pb::RateLimit { window_minutes: 1, max_requests: 60 }),
            ..Default::default()
        };
        let json = serde_json::to_value(group.json()).unwrap();
        assert_eq!((json["ratio"].as_str(), json["ratio_ppm"].as_i64()), (Some("2"), Some(2_000_000)));
        assert_eq!(group.row()[1], "2");
        assert_eq!(json["rate_limit"], serde_json::json!({"window_minutes": 1, "max_requests": 60}));
        assert_eq!(group.row()[3], "60/1min");
    }
}
