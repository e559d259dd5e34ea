//! `gwctl model`: the model catalogue and its prices. Token prices are US
//! dollars per 1M tokens on the command line and micro-USD per 1M tokens on
//! the wire; per-request, per-second, per-image and per-search-unit (rerank)
//! prices are US dollars.
//! A long-context tier bills the whole request at its prices once the
//! prompt is more than its threshold; an unset tier, cache-write or
//! reasoning price falls back to the input (or output) price.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::confirm::{self, DeleteArgs, UsageError};
use crate::flags::Page;
use crate::output::{self, Output, Render};
use crate::{money, schema};

/// Model verbs. A model is named by its id, the name clients send.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add a model to the catalogue.
    #[command(after_help = "Examples:\n  \
        gwctl model create --id gpt-4o-mini --input-price 0.15 --output-price 0.6 --cached-price 0.075\n  \
        gwctl model create --id dall-e-3 --category image --image-price 0.04\n  \
        gwctl model create --id sora-2 --category video --second-price 0.1\n  \
        gwctl model create --id rerank-v3.5 --category rerank --search-unit-price 0.002\n  \
        gwctl model create --id claude-sonnet-4 --input-price 3 --output-price 15 --cached-price 0.3 \
        --cache-write-5m-price 3.75 --tier-threshold 200000 --tier-input-price 6 --tier-output-price 22.5")]
    Create(CreateArgs),
    /// List the catalogue, by id.
    #[command(
        alias = "ls",
        after_help = "Examples:\n  gwctl model list\n  gwctl model list --category embedding -o name"
    )]
    List(ListArgs),
    /// Show one model.
    #[command(after_help = "Examples:\n  gwctl model get gpt-4o-mini -o yaml")]
    Get {
        /// Id of the model.
        id: String,
    },
    /// Change a model; flags left out stay as they are.
    #[command(
        after_help = "Examples:\n  gwctl model update gpt-4o-mini --output-price 0.5\n  gwctl model update gpt-4o --owned-by openai"
    )]
    Update(UpdateArgs),
    /// Remove a model from the catalogue.
    #[command(
        alias = "rm",
        after_help = "Examples:\n  gwctl model delete gpt-4-0613 --dry-run\n  gwctl model delete gpt-4-0613 --yes"
    )]
    Delete(DeleteArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only models of this category.
    #[arg(long)]
    category: Option<String>,
    #[command(flatten)]
    page: Page,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Model name as clients send it.
    #[arg(long)]
    id: String,
    /// The endpoints the model serves: chat, responses, completion, embedding, image, audio, speech, moderation, video or rerank.
    #[arg(long, default_value = "chat")]
    category: String,
    #[command(flatten)]
    prices: Prices,
    /// Create the model with no price at all: requests for it cost nothing.
    /// Without it, create needs a token, request, second, image or search-unit price.
    #[arg(long)]
    free: bool,
    /// Who makes the model, as /v1/models shows it.
    #[arg(long, default_value = "", hide_default_value = true)]
    owned_by: String,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Id of the model.
    id: String,
    /// New category: chat, responses, completion, embedding, image, audio, speech, moderation, video or rerank.
    #[arg(long)]
    category: Option<String>,
    #[command(flatten)]
    prices: Prices,
    /// Who makes the model, as /v1/models shows it.
    #[arg(long)]
    owned_by: Option<String>,
}

/// Price flags, each optional: on create a missing price is 0 (and a model
/// without any base price needs `--free`).
#[derive(Debug, Default, clap::Args)]
pub struct Prices {
    /// US dollars per 1M input tokens.
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    input_price: Option<i64>,
    /// US dollars per 1M output tokens.
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    output_price: Option<i64>,
    /// US dollars per 1M cached input tokens.
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    cached_price: Option<i64>,
    /// US dollars per request.
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    request_price: Option<i64>,
    /// US dollars per second (audio, video).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    second_price: Option<i64>,
    /// US dollars per image.
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    image_price: Option<i64>,
    /// Prompt tokens above which the whole request bills at the tier prices (0: no tier).
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
    tier_threshold: Option<i64>,
    /// US dollars per 1M input tokens past the tier threshold (0: the input price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    tier_input_price: Option<i64>,
    /// US dollars per 1M output tokens past the tier threshold (0: the output price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    tier_output_price: Option<i64>,
    /// US dollars per 1M cached input tokens past the tier threshold (0: the cached price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    tier_cached_price: Option<i64>,
    /// US dollars per 1M tokens written to the prompt cache for 5 minutes (0: the input price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    cache_write_5m_price: Option<i64>,
    /// US dollars per 1M tokens written to the prompt cache for 1 hour (0: the input price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    cache_write_1h_price: Option<i64>,
    /// US dollars per 1M reasoning tokens (0: the output price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    reasoning_price: Option<i64>,
    /// US dollars per 1M audio input tokens, realtime (0: the input price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    audio_input_price: Option<i64>,
    /// US dollars per 1M audio output tokens, realtime (0: the output price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    audio_output_price: Option<i64>,
    /// US dollars per 1M cached audio input tokens, realtime (0: the cached price).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    audio_cached_price: Option<i64>,
    /// US dollars per rerank search unit (one query over up to 100 documents).
    #[arg(long, allow_negative_numbers = true, value_parser = money::parse_usd_non_negative)]
    search_unit_price: Option<i64>,
    /// Share of the regular prices batch lines pay (/v1/batches,
    /// /v1/messages/batches), from 0 to 1; 0 is half, as providers bill batches.
    #[arg(long, value_parser = parse_batch_ratio)]
    batch_price_ratio: Option<i64>,
}

/// A batch price ratio, in millionths: 0 to 1.
fn parse_batch_ratio(text: &str) -> Result<i64, String> {
    match gw_pricing::parse_ratio_ppm(text) {
        Ok(ppm) if ppm <= gw_pricing::RATIO_ONE_PPM => Ok(ppm),
        Ok(_) => Err("a batch pays at most the regular price (1)".into()),
        Err(error) => Err(error.to_string()),
    }
}

/// Runs one model verb; returns what to print.
pub async fn run(command: Command, admin: &mut Admin, out: Output) -> Result<String> {
    match command {
        Command::Create(args) => {
            let model = new_model(args)?;
            output::render_one(out, &admin.create_model(model).await.rpc()?)
        }
        Command::List(args) => {
            let request = pb::ListRequest { category: args.category.unwrap_or_default(), ..args.page.request() };
            let list = admin.list_models(request).await.rpc()?;
            output::render_list(out, &list.items, &list.next_page_token)
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
                tier_threshold_tokens: p.tier_threshold,
                tier_input_price_micros: p.tier_input_price,
                tier_output_price_micros: p.tier_output_price,
                tier_cached_price_micros: p.tier_cached_price,
                cache_write_5m_price_micros: p.cache_write_5m_price,
                cache_write_1h_price_micros: p.cache_write_1h_price,
                reasoning_price_micros: p.reasoning_price,
                audio_input_price_micros: p.audio_input_price,
                audio_output_price_micros: p.audio_output_price,
                audio_cached_price_micros: p.audio_cached_price,
                search_unit_price_micros: p.search_unit_price,
                batch_price_ppm: p.batch_price_ratio,
            };
            output::render_changed(out, "model", &admin.update_model(request).await.rpc()?, "updated")
        }
        Command::Delete(args) => {
            let id = admin.get_model(pb::GetRequest { id: args.target.clone() }).await.rpc()?.id;
            if !args.dry_run {
                confirm::delete(&args, &format!("model {id:?}"))?;
                admin.delete_model(pb::GetRequest { id: id.clone() }).await.rpc()?;
            }
            output::render_deleted(out, "model", &id, args.dry_run)
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

/// A model's batch price ratio for people: 0 is the default half.
fn batch_ratio(ppm: i64) -> String {
    match ppm {
        0 => "0.5 (default)".to_string(),
        ppm => gw_pricing::format_ratio(ppm),
    }
}

/// A token count for the table: `-` when 0 (no tier).
fn tokens(count: i64) -> String {
    match count {
        0 => "-".to_string(),
        count => count.to_string(),
    }
}

// === impl Render for pb::Model ===

impl Render for pb::Model {
    const COLUMNS: &'static [&'static str] =
        &["ID", "CATEGORY", "INPUT/1M", "OUTPUT/1M", "CACHED/1M", "REQUEST", "SECOND", "IMAGE", "OWNED BY"];
    const WIDE: &'static [&'static str] = &[
        "TIER ABOVE",
        "TIER IN/1M",
        "TIER OUT/1M",
        "TIER CACHED/1M",
        "WRITE 5M/1M",
        "WRITE 1H/1M",
        "REASONING/1M",
        "AUDIO IN/1M",
        "AUDIO OUT/1M",
        "AUDIO CACHED/1M",
        "SEARCH UNIT",
        "BATCH RATIO",
    ];

    type Json = schema::Model;

    fn json(&self) -> schema::Model {
        self.into()
    }

    fn name(&self) -> String {
        self.id.clone()
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

    fn wide_row(&self) -> Vec<String> {
        vec![
            tokens(self.tier_threshold_tokens),
            price(self.tier_input_price_micros),
            price(self.tier_output_price_micros),
            price(self.tier_cached_price_micros),
            price(self.cache_write_5m_price_micros),
            price(self.cache_write_1h_price_micros),
            price(self.reasoning_price_micros),
            price(self.audio_input_price_micros),
            price(self.audio_output_price_micros),
            price(self.audio_cached_price_micros),
            price(self.search_unit_price_micros),
            batch_ratio(self.batch_price_ppm),
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
            ("tier above prompt tokens", tokens(self.tier_threshold_tokens)),
            ("tier input price / 1M tokens", price(self.tier_input_price_micros)),
            ("tier output price / 1M tokens", price(self.tier_output_price_micros)),
            ("tier cached price / 1M tokens", price(self.tier_cached_price_micros)),
            ("5-minute cache write price / 1M tokens", price(self.cache_write_5m_price_micros)),
            ("1-hour cache write price / 1M tokens", price(self.cache_write_1h_price_micros)),
            ("reasoning price / 1M tokens", price(self.reasoning_price_micros)),
            ("audio input price / 1M tokens", price(self.audio_input_price_micros)),
            ("audio output price / 1M tokens", price(self.audio_output_price_micros)),
            ("audio cached price / 1M tokens", price(self.audio_cached_price_micros)),
            ("search unit price", price(self.search_unit_price_micros)),
            ("batch price ratio", batch_ratio(self.batch_price_ppm)),
            ("owned by", self.owned_by.clone()),
        ]
    }
}

/// The model `args` describe; a usage error when no base price (tokens,
/// request, second, image) is given without `--free`, or one is given with
/// it.
fn new_model(args: CreateArgs) -> Result<pb::Model> {
    let p = args.prices;
    let priced = [p.input_price, p.output_price, p.request_price, p.second_price, p.image_price, p.search_unit_price]
        .iter()
        .any(|price| price.is_some_and(|micros| micros > 0));
    match (priced, args.free) {
        (false, false) => {
            return Err(UsageError(format!(
                "model {:?} has no price: give --input-price and --output-price (US dollars per 1M tokens), \
                 --request-price, --second-price, --image-price or --search-unit-price, or --free for a model \
                 that costs nothing",
                args.id
            ))
            .into());
        }
        (true, true) => {
            return Err(UsageError(format!("model {:?}: --free contradicts the prices given", args.id)).into());
        }
        _ => {}
    }
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
        tier_threshold_tokens: p.tier_threshold.unwrap_or(0),
        tier_input_price_micros: p.tier_input_price.unwrap_or(0),
        tier_output_price_micros: p.tier_output_price.unwrap_or(0),
        tier_cached_price_micros: p.tier_cached_price.unwrap_or(0),
        cache_write_5m_price_micros: p.cache_write_5m_price.unwrap_or(0),
        cache_write_1h_price_micros: p.cache_write_1h_price.unwrap_or(0),
        reasoning_price_micros: p.reasoning_price.unwrap_or(0),
        audio_input_price_micros: p.audio_input_price.unwrap_or(0),
        audio_output_price_micros: p.audio_output_price.unwrap_or(0),
        audio_cached_price_micros: p.audio_cached_price.unwrap_or(0),
        search_unit_price_micros: p.search_unit_price.unwrap_or(0),
        batch_price_ppm: p.batch_price_ratio.unwrap_or(0),
    };
    Ok(model)
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
        let json = serde_json::to_value(model.json()).unwrap();
        assert_eq!(json["input_price_usd"], "2.500000");
        assert_eq!(json["output_price_usd"], "10.000000");
        assert_eq!(json["cached_price_usd"], "1.250000");
        assert_eq!(json["request_price_usd"], "0.100000");
        assert_eq!(json["image_price_usd"], "0.000000");
        assert_eq!(json["input_price_micros"], 2_500_000);
        assert_eq!(model.row()[2], "$2.500000");
        assert_eq!(model.row()[6], "-");
    }

    /// `gwctl model create ARGS…` as parsed, or clap's refusal.
    fn create(args: &[&str]) -> Result<CreateArgs, clap::Error> {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from([&["gwctl", "model", "create"], args].concat())?;
        match cli.command {
            crate::cli::Command::Model(Command::Create(args)) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_model_needs_a_price_or_free_and_never_a_negative_one() {
        let priced =
            new_model(create(&["--id", "m", "--input-price", "0.15", "--output-price", "0.6"]).unwrap()).unwrap();
        assert_eq!((priced.input_price_micros, priced.output_price_micros), (150_000, 600_000));
        assert!(new_model(create(&["--id", "img", "--category", "image", "--image-price", "0.04"]).unwrap()).is_ok());
        let rerank = ["--id", "rerank-v3.5", "--category", "rerank", "--search-unit-price", "0.002"];
        assert_eq!(new_model(create(&rerank).unwrap()).unwrap().search_unit_price_micros, 2_000);
        let batch = ["--id", "m", "--input-price", "1", "--batch-price-ratio", "0.25"];
        assert_eq!(new_model(create(&batch).unwrap()).unwrap().batch_price_ppm, 250_000);
        assert!(create(&["--id", "m", "--input-price", "1", "--batch-price-ratio", "1.5"]).is_err(), "above 1");
        let free = new_model(create(&["--id", "m", "--free"]).unwrap()).unwrap();
        assert_eq!((free.input_price_micros, free.request_price_micros), (0, 0));

        let unpriced = new_model(create(&["--id", "m1"]).unwrap()).unwrap_err();
        assert!(unpriced.downcast_ref::<UsageError>().is_some(), "a usage error (exit 2): {unpriced:#}");
        assert!(
            unpriced.to_string().contains("has no price") && unpriced.to_string().contains("--free"),
            "{unpriced:#}"
        );
        let zero = new_model(create(&["--id", "m1", "--input-price", "0"]).unwrap()).unwrap_err();
        assert!(zero.to_string().contains("has no price"), "{zero:#}");
        let both = new_model(create(&["--id", "m", "--free", "--request-price", "0.01"]).unwrap()).unwrap_err();
        assert!(both.to_string().contains("--free contradicts"), "{both:#}");

        let negative = create(&["--id", "m", "--input-price", "-1"]).unwrap_err().to_string();
        assert!(negative.contains("must not be negative"), "{negative}");
    }
}
