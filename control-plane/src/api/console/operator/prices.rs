//! The model catalogue: every model with all its prices and the channels
//! serving it, adding a model, and editing one model's prices. Prices are
//! typed in dollars; a model is free only when the form says so, so an
//! empty form never makes one free by mistake.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gw_proto::pb;
use gw_proto::pb::admin_service_server::AdminService as Admin;
use maud::{Markup, html};
use serde::Deserialize;

use super::{dollars, dollars_value, done, whole, writes};
use crate::api::console::page::{self, csrf, money, notice, scroll};
use crate::api::console::{Console, ConsoleError};
use crate::domain::validate::CATEGORIES;

#[derive(Debug, Default, Deserialize)]
pub struct PricesQuery {
    #[serde(default)]
    done: String,
    /// The model whose edit form the page shows.
    #[serde(default)]
    edit: String,
}

/// One price of a model: its form field, its label and where it lives.
struct Price {
    field: &'static str,
    label: &'static str,
    get: fn(&pb::Model) -> i64,
    set: fn(&mut pb::Model, i64),
}

/// Every price a model has, in the order pages show them.
const PRICES: [Price; 16] = [
    Price { field: "input", label: "Input", get: |m| m.input_price_micros, set: |m, v| m.input_price_micros = v },
    Price { field: "output", label: "Output", get: |m| m.output_price_micros, set: |m, v| m.output_price_micros = v },
    Price {
        field: "cached",
        label: "Cached input",
        get: |m| m.cached_price_micros,
        set: |m, v| m.cached_price_micros = v,
    },
    Price {
        field: "reasoning",
        label: "Reasoning (empty: output price)",
        get: |m| m.reasoning_price_micros,
        set: |m, v| m.reasoning_price_micros = v,
    },
    Price {
        field: "audio_input",
        label: "Audio input (empty: input price)",
        get: |m| m.audio_input_price_micros,
        set: |m, v| m.audio_input_price_micros = v,
    },
    Price {
        field: "audio_cached",
        label: "Audio cached input (empty: cached price)",
        get: |m| m.audio_cached_price_micros,
        set: |m, v| m.audio_cached_price_micros = v,
    },
    Price {
        field: "audio_output",
        label: "Audio output (empty: output price)",
        get: |m| m.audio_output_price_micros,
        set: |m, v| m.audio_output_price_micros = v,
    },
    Price {
        field: "write_5m",
        label: "Cache write, 5 minutes (empty: input price)",
        get: |m| m.cache_write_5m_price_micros,
        set: |m, v| m.cache_write_5m_price_micros = v,
    },
    Price {
        field: "write_1h",
        label: "Cache write, 1 hour (empty: input price)",
        get: |m| m.cache_write_1h_price_micros,
        set: |m, v| m.cache_write_1h_price_micros = v,
    },
    Price {
        field: "request",
        label: "Per request",
        get: |m| m.request_price_micros,
        set: |m, v| m.request_price_micros = v,
    },
    Price { field: "image", label: "Per image", get: |m| m.image_price_micros, set: |m, v| m.image_price_micros = v },
    Price {
        field: "second",
        label: "Per second",
        get: |m| m.second_price_micros,
        set: |m, v| m.second_price_micros = v,
    },
    Price {
        field: "search_unit",
        label: "Per rerank search unit (a query over up to 100 documents)",
        get: |m| m.search_unit_price_micros,
        set: |m, v| m.search_unit_price_micros = v,
    },
    Price {
        field: "tier_input",
        label: "Long-context input",
        get: |m| m.tier_input_price_micros,
        set: |m, v| m.tier_input_price_micros = v,
    },
    Price {
        field: "tier_output",
        label: "Long-context output",
        get: |m| m.tier_output_price_micros,
        set: |m, v| m.tier_output_price_micros = v,
    },
    Price {
        field: "tier_cached",
        label: "Long-context cached input",
        get: |m| m.tier_cached_price_micros,
        set: |m, v| m.tier_cached_price_micros = v,
    },
];

/// The catalogue, the create form, and the edit form of `?edit=<model>`.
pub async fn list(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<PricesQuery>,
) -> Result<Response, ConsoleError> {
    let signed = console.signed(&headers).await?;
    let models =
        console
            .call(&signed, "ListModels", pb::ListRequest::default(), |api, r| async move {
                Admin::list_models(&*api, r).await
            })
            .await?;
    let channels = console
        .call(&signed, "ListChannels", pb::ListRequest::default(), |api, r| async move {
            Admin::list_channels(&*api, r).await
        })
        .await?;
    let serving = |model: &str| channels.items.iter().filter(|c| c.models.iter().any(|m| m == model)).count();
    let writes = writes(&signed);
    let editing = models.items.iter().find(|m| writes && !query.edit.is_empty() && m.id == query.edit);
    let price = |micros: i64| if micros == 0 { "—".to_owned() } else { money(micros) };
    let body = html! {
        h1 { "Prices" }
        (notice(Some(&query.done)))
        p {
            "Token prices are per million tokens, before each group's ratio. Long-context prices apply to a whole "
            "request whose prompt is longer than the threshold."
        }
        @if let Some(model) = editing {
            h2 { "Edit " code { (model.id) } }
            (model_form(&console, &signed, Some(model)))
        }
        (scroll(html! {
            table id="prices" {
                thead { tr {
                    th scope="col" { "Model" } th scope="col" { "Category" }
                    @for p in &PRICES { th scope="col" { (p.label.split(" (").next().unwrap_or(p.label)) } }
                    th scope="col" { "Long context above" } th scope="col" { "Batch share" }
                    th scope="col" { "Channels" }
                    @if writes { th scope="col" { "Edit" } }
                } }
                tbody {
                    @for model in &models.items {
                        tr {
                            td { code { (model.id) } }
                            td { (model.category) }
                            @for p in &PRICES { td { (price((p.get)(model))) } }
                            td { @if model.tier_threshold_tokens > 0 { (model.tier_threshold_tokens) " tokens" } @else { "—" } }
                            td { (batch_share(model.batch_price_ppm)) }
                            td { (serving(&model.id)) }
                            @if writes {
                                td {
                                    a href=(console.link(&format!("/prices?edit={}#edit-model", page::encode(&model.id))))
                                        aria-label={ "Edit the prices of " (model.id) } { "Edit" }
                                }
                            }
                        }
                    }
                }
            }
        }))
        @if models.items.is_empty() { p { "No models yet." } }
        @if writes {
            h2 { "Add a model" }
            (model_form(&console, &signed, None))
        }
    };
    Ok(page::page(&console, &signed, "Prices", body))
}

/// The create form (`model` is `None`) or the edit form of `model`.
fn model_form(console: &Console, signed: &crate::services::console::Signed, model: Option<&pb::Model>) -> Markup {
    let (id, prefix) = if model.is_some() { ("edit-model", "edit-") } else { ("create-model", "new-") };
    let free = model.is_some_and(|m| PRICES.iter().all(|p| (p.get)(m) == 0));
    let category = model.map_or("chat", |m| m.category.as_str());
    html! {
        form.narrow method="post" action=(console.link("/prices")) id=(id) {
            (csrf(signed))
            @if let Some(model) = model {
                input type="hidden" name="action" value="update";
                input type="hidden" name="id" value=(model.id);
            } @else {
                input type="hidden" name="action" value="create";
                label for="new-id" { "Model id (as clients ask for it)" }
                input id="new-id" name="id" required autocomplete="off";
            }
            label for={ (prefix) "category" } { "Category" }
            select id={ (prefix) "category" } name="category" {
                @for c in CATEGORIES { option value=(c) selected[c == category] { (c) } }
            }
            label.check {
                input type="checkbox" name="free" value="on" id={ (prefix) "free" } checked[free];
                " Free (no price at all)"
            }
            fieldset {
                legend { "Prices in dollars: per 1M tokens, per request, image, second or search unit" }
                @for p in &PRICES {
                    label for={ (prefix) (p.field) } { (p.label) }
                    input id={ (prefix) (p.field) } name=(p.field) inputmode="decimal"
                        value=(model.map(|m| (p.get)(m)).filter(|v| *v != 0).map(dollars_value).unwrap_or_default());
                }
                label for={ (prefix) "tier_threshold" } { "Long-context threshold in prompt tokens (empty: none)" }
                input id={ (prefix) "tier_threshold" } name="tier_threshold" inputmode="numeric"
                    value=(model.map(|m| m.tier_threshold_tokens).filter(|v| *v != 0).map(|v| v.to_string()).unwrap_or_default());
                label for={ (prefix) "batch_ratio" } { "Batch share of these prices, 0 to 1 (empty: 0.5, half)" }
                input id={ (prefix) "batch_ratio" } name="batch_ratio" inputmode="decimal"
                    value=(model.map(|m| m.batch_price_ppm).filter(|v| *v != 0).map(gw_pricing::format_ratio).unwrap_or_default());
            }
            button type="submit" { @if model.is_some() { "Save prices" } @else { "Add model" } }
        }
    }
}

/// Adds a model or updates one's prices.
pub async fn change(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(fields): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
    let signed = console.signed_write(&headers, Some(field("csrf"))).await?;
    let model = read_model(&fields)?;
    let id = model.id.clone();
    match field("action") {
        "create" => {
            console
                .call(&signed, "CreateModel", model, |api, r| async move { Admin::create_model(&*api, r).await })
                .await?;
            Ok(done(&console, "/prices", &format!("Model {id} added")))
        }
        "update" => {
            let request = update_of(model);
            console
                .call(&signed, "UpdateModel", request, |api, r| async move { Admin::update_model(&*api, r).await })
                .await?;
            Ok(done(&console, "/prices", &format!("Prices of {id} saved")))
        }
        other => Err(ConsoleError::Invalid(format!("unknown action {other:?}"))),
    }
}

/// A model form as a model: a free one has no price typed, any other at
/// least one.
fn read_model(fields: &HashMap<String, String>) -> Result<pb::Model, ConsoleError> {
    let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
    let mut model = pb::Model {
        id: field("id").trim().to_owned(),
        category: field("category").trim().to_owned(),
        tier_threshold_tokens: whole("the long-context threshold", field("tier_threshold"))?,
        batch_price_ppm: batch_ratio(field("batch_ratio"))?,
        ..Default::default()
    };
    for price in &PRICES {
        (price.set)(&mut model, dollars(&format!("the {} price", price.label.to_lowercase()), field(price.field))?);
    }
    let priced = PRICES.iter().any(|p| (p.get)(&model) != 0);
    match (fields.contains_key("free"), priced) {
        (true, true) => Err(ConsoleError::Invalid("a free model has no prices; clear them or untick free".into())),
        (false, false) => Err(ConsoleError::Invalid("give the model a price, or tick free".into())),
        _ => Ok(model),
    }
}

/// The batch share typed in the form, in millionths: empty is 0 (half).
fn batch_ratio(text: &str) -> Result<i64, ConsoleError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    match gw_pricing::parse_ratio_ppm(text) {
        Ok(ppm) if ppm <= gw_pricing::RATIO_ONE_PPM => Ok(ppm),
        _ => Err(ConsoleError::Invalid(format!("the batch share {text:?} is not a number from 0 to 1"))),
    }
}

/// A model's batch share for the table.
fn batch_share(ppm: i64) -> String {
    if ppm == 0 { "0.5 (default)".to_owned() } else { gw_pricing::format_ratio(ppm) }
}

/// An update that sets every price and the category of `model`.
fn update_of(model: pb::Model) -> pb::UpdateModelRequest {
    pb::UpdateModelRequest {
        id: model.id,
        category: Some(model.category),
        input_price_micros: Some(model.input_price_micros),
        output_price_micros: Some(model.output_price_micros),
        cached_price_micros: Some(model.cached_price_micros),
        request_price_micros: Some(model.request_price_micros),
        second_price_micros: Some(model.second_price_micros),
        image_price_micros: Some(model.image_price_micros),
        owned_by: None,
        tier_threshold_tokens: Some(model.tier_threshold_tokens),
        tier_input_price_micros: Some(model.tier_input_price_micros),
        tier_output_price_micros: Some(model.tier_output_price_micros),
        tier_cached_price_micros: Some(model.tier_cached_price_micros),
        cache_write_5m_price_micros: Some(model.cache_write_5m_price_micros),
        cache_write_1h_price_micros: Some(model.cache_write_1h_price_micros),
        reasoning_price_micros: Some(model.reasoning_price_micros),
        audio_input_price_micros: Some(model.audio_input_price_micros),
        audio_output_price_micros: Some(model.audio_output_price_micros),
        audio_cached_price_micros: Some(model.audio_cached_price_micros),
        search_unit_price_micros: Some(model.search_unit_price_micros),
        batch_price_ppm: Some(model.batch_price_ppm),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn prices_are_read_in_dollars_per_million() {
        let model = read_model(&form(&[
            ("id", " gpt-x "),
            ("category", "chat"),
            ("input", "2.5"),
            ("output", "$10"),
            ("cached", ""),
            ("tier_threshold", "200000"),
            ("search_unit", "0.002"),
            ("batch_ratio", "0.25"),
        ]))
        .expect("valid");
        assert_eq!(model.id, "gpt-x");
        assert_eq!((model.input_price_micros, model.output_price_micros), (2_500_000, 10_000_000));
        assert_eq!(model.cached_price_micros, 0);
        assert_eq!(model.tier_threshold_tokens, 200_000);
        assert_eq!(model.search_unit_price_micros, 2_000, "a search unit's price is per unit");
        assert_eq!(model.batch_price_ppm, 250_000, "the batch share is a ratio");
        let update = update_of(model);
        assert_eq!(update.batch_price_ppm, Some(250_000));
        assert_eq!(update.search_unit_price_micros, Some(2_000));
        assert_eq!(update.input_price_micros, Some(2_500_000));
        assert_eq!(update.cached_price_micros, Some(0));
        assert_eq!(update.owned_by, None);
    }

    #[test]
    fn a_model_is_free_only_when_the_form_says_so() {
        assert!(read_model(&form(&[("id", "m"), ("free", "on")])).is_ok());
        assert!(read_model(&form(&[("id", "m")])).is_err());
        assert!(read_model(&form(&[("id", "m"), ("free", "on"), ("image", "0.04")])).is_err());
        assert!(read_model(&form(&[("id", "m"), ("input", "-1")])).is_err());
        assert!(read_model(&form(&[("id", "m"), ("input", "1"), ("batch_ratio", "1.5")])).is_err(), "above 1");
    }

    #[test]
    fn every_price_field_reads_and_writes_its_own_price() {
        let mut model = pb::Model::default();
        for (n, price) in PRICES.iter().enumerate() {
            (price.set)(&mut model, n as i64 + 1);
        }
        let values: Vec<i64> = PRICES.iter().map(|p| (p.get)(&model)).collect();
        assert_eq!(values, (1..=PRICES.len() as i64).collect::<Vec<i64>>());
    }
}
