//! Catalogue entries most end-to-end tests start from, written once.

use anyhow::Context as _;
use gw_proto::pb;

use crate::harness::Admin;

/// The upstream key the seeded channel carries.
pub const UPSTREAM_KEY: &str = "sk-upstream-secret-0123456789";

/// Creates model `gpt-4o` (chat, $2.5 / $10 per 1M tokens) and channel
/// `main`, an OpenAI-type channel at `base_url` serving it to `groups`;
/// returns the channel's id.
pub async fn chat_model(admin: &mut Admin, base_url: &str, groups: &[&str]) -> anyhow::Result<String> {
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.context("creating the model")?;
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: base_url.into(),
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models: vec!["gpt-4o".into()],
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        weight: 1,
        ..Default::default()
    };
    Ok(admin.create_channel(channel).await.context("creating the channel")?.into_inner().id)
}
