//! `gwctl model`: the model catalogue and its prices. Token prices are US
//! dollars per 1M tokens on the command line and micro-USD per 1M tokens on
//! the wire; per-request, per-second and per-image prices are US dollars.

use anyhow::Result;
use gw_proto::pb;
use serde_json::Value;

use crate::client::{Admin, RpcResult};
use crate::money;
use crate::output::{self, Output, Render};

/// Model verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add a model to the catalogue.
    Create(CreateArgs),
    /// List the catalogue.
    #[command(alias = "ls")]
    List,
    /// Show one model.
    Get { id: String },
    /// Change a model; flags left out stay as they are.
    Update(UpdateArgs),
    /// Remove a model from the catalogue.
    #[command(alias = "rm")]
    Delete { id: String },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Model name as clients send it.
    #[arg(long)]
    id: String,
    /// chat, responses, completion, embedding, image, audio, speech, moderation or video: the endpoints the model serves.
    #[arg(long, default_value = "chat")]
    category: String,
    #[command(flatten)]
    prices: Prices,
    #[arg(long, default_value = "", hide_default_value = true)]
    owned_by: String,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    id: String,
    /// chat, responses, completion, embedding, image, audio, speech, moderation or video.
    #[arg(long)]
    category: Option<String>,
    #[command(flatten)]
    prices: Prices,
    #[arg(long)]
    owned_by: Option<String>,
}

/// Price flags, each optional: on create a missing price is 0.
#[derive(Debug, Default, clap::Args)]
pub struct Prices {
    /// US dollars per 1M input tokens.
    #[arg(long, value_parser = money::parse_usd_non_negative)]
    input_price: Option<i64>,
    /// US dollars per 1M output tokens.
    #[arg(long, value_parser = money::parse_usd_non_negative)]
    output_price: Option<i64>,
    /// US dollars per 1M cached input tokens.
    #[arg(long, value_parser = money::parse_usd_non_negative)]
    cached_price: Option<i64>,
    /// US dollars per request.
    #[arg(long, value_parser = money::parse_usd_non_negative)]
    request_price: Option<i64>,
    /// US dollars per second (audio, video).
    #[arg(long, value_parser = money::parse_usd_non_negative)]
    second_price: Option<i64>,
    /// US dollars per image.
    #[arg(long, value_parser = money::parse_usd_non_negative)]
    image_price: Option<i64>,
}

/// Runs one model verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let p = args.prices;
            let model = pb::Model {
                id: args.id,
                category: args.category,
                input_price_micros: p.input_price.unwrap_or(0),
                output_price_micros: p.output_price.unwrap_or(0),
                cached_price_micros: p.cached_price.unwrap_or(0),
                request_price_micros: p.request_price.unwrap_or(0),
                second_price_micros: p.second_price.unwrap_or(0),
                image_price_micros: p.image_price.unwrap_or(0),
                owned_by: args.owned_by,
            };
            output::render_one(out, &admin.create_model(model).await.rpc()?)
        }
        Command::List => {
            let list = admin.list_models(pb::ListRequest {}).await.rpc()?;
            output::render_list(out, &list.items)
        }
        Command::Get { id } => output::render_one(out, &admin.get_model(pb::GetRequest { id }).await.rpc()?),
        Command::Update(args) => {
            let p = args.prices;
            let request = pb::UpdateModelRequest {
                id: args.id,
                category: args.category,
                input_price_micros: p.input_price,
                output_price_micros: p.output_price,
                cached_price_micros: p.cached_price,
                request_price_micros: p.request_price,
                second_price_micros: p.second_price,
                image_price_micros: p.image_price,
                owned_by: args.owned_by,
            };
            output::render_one(out, &admin.update_model(request).await.rpc()?)
        }
        Command::Delete { id } => {
            admin.delete_model(pb::GetRequest { id: id.clone() }).await.rpc()?;
            output::render_deleted(out, "model", &id)
        }
    }
}

/// A price for the table: `-` when not charged.
fn price(micros: i64) -> String {
    match micros {
        0 => "-".to_string(),
        micros => output::usd(micros),
    }
}

// === impl Render for pb::Model ===

impl Render for pb::Model {
    const COLUMNS: &'static [&'static str] =
        &["ID", "CATEGORY", "INPUT/1M", "OUTPUT/1M", "CACHED/1M", "REQUEST", "SECOND", "IMAGE", "OWNED BY"];

    fn to_json(&self) -> Value {
        let mut object = output::to_object(self);
        output::add_usd(
            &mut object,
            &[
                ("input_price", self.input_price_micros),
                ("output_price", self.output_price_micros),
                ("cached_price", self.cached_price_micros),
                ("request_price", self.request_price_micros),
                ("second_price", self.second_price_micros),
                ("image_price", self.image_price_micros),
            ],
        );
        Value::Object(object)
    }

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.category.clone(),
            price(self.input_price_micros),
            price(self.output_price_micros),
            price(self.cached_price_micros),
            price(self.request_price_micros),
            price(self.second_price_micros),
            price(self.image_price_micros),
            self.owned_by.clone(),
        ]
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("category", self.category.clone()),
            ("input price / 1M tokens", price(self.input_price_micros)),
            ("output price / 1M tokens", price(self.output_price_micros)),
            ("cached price / 1M tokens", price(self.cached_price_micros)),
            ("request price", price(self.request_price_micros)),
            ("second price", price(self.second_price_micros)),
            ("image price", price(self.image_price_micros)),
            ("owned by", self.owned_by.clone()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn model_json_has_prices_in_usd_per_million() {
        let model = pb::Model {
            id: "gpt-4o".into(),
            category: "chat".into(),
            input_price_micros: 2_500_000,
            output_price_micros: 10_000_000,
            cached_price_micros: 1_250_000,
            request_price_micros: 100_000,
            ..Default::default()
        };
        let json = model.to_json();
        assert_eq!(json["input_price"], 2.5);
        assert_eq!(json["output_price"], 10.0);
        assert_eq!(json["cached_price"], 1.25);
        assert_eq!(json["request_price"], 0.1);
        assert_eq!(json["image_price"], 0.0);
        assert_eq!(json["input_price_micros"], 2_500_000);
        assert_eq!(model.row()[2], "$2.500000");
        assert_eq!(model.row()[6], "-");
    }
}
