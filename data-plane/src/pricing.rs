//! What a request costs, in integer micro-USD: the workspace's one formula
//! (`gw-pricing`, which the control plane and gwctl share), taking the data
//! plane's `Model` as its prices.

use crate::policy::domain::Model;

pub use gw_pricing::{Prices, Units, Usage, search_units, video_cost_micros};

/// Cost of `usage` on `model` in a group with ratio `ratio_ppm`; see
/// [`gw_pricing::cost_micros`]: tokens scaled by the ratio and rounded up to
/// 1 µ$, plus the per-request price, saturating at `i64::MAX`.
pub fn cost_micros(usage: &Usage, model: &Model, ratio_ppm: i64) -> i64 {
    gw_pricing::cost_micros(usage, &Prices::from(model), ratio_ppm)
}

/// The most a request of at most `prompt_tokens` and `completion_tokens`
/// can cost on `model` at `ratio_ppm`; see [`gw_pricing::bound_micros`]:
/// every token at the highest rate of its side, in either tier.
pub fn bound_micros(prompt_tokens: i64, completion_tokens: i64, model: &Model, ratio_ppm: i64) -> i64 {
    gw_pricing::bound_micros(prompt_tokens, completion_tokens, &Prices::from(model), ratio_ppm)
}

/// The price tier a request with `prompt_tokens` bills at on `model`; see
/// [`gw_pricing::tier`].
pub fn tier(prompt_tokens: i64, model: &Model) -> u32 {
    gw_pricing::tier(prompt_tokens, &Prices::from(model))
}

/// Cost of `units` (images, audio) on `model` at `ratio_ppm`; see
/// [`gw_pricing::units_cost_micros`]. Adds to [`cost_micros`].
pub fn units_cost_micros(units: &Units, model: &Model, ratio_ppm: i64) -> i64 {
    gw_pricing::units_cost_micros(units, &Prices::from(model), ratio_ppm)
}

// === impl Prices ===

impl From<&Model> for Prices {
    fn from(model: &Model) -> Self {
        Prices {
            input_price_micros: model.input_price_micros,
            output_price_micros: model.output_price_micros,
            cached_price_micros: model.cached_price_micros,
            request_price_micros: model.request_price_micros,
            second_price_micros: model.second_price_micros,
            image_price_micros: model.image_price_micros,
            tier_threshold_tokens: model.tier_threshold_tokens,
            tier_input_price_micros: model.tier_input_price_micros,
            tier_output_price_micros: model.tier_output_price_micros,
            tier_cached_price_micros: model.tier_cached_price_micros,
            cache_write_5m_price_micros: model.cache_write_5m_price_micros,
            cache_write_1h_price_micros: model.cache_write_1h_price_micros,
            reasoning_price_micros: model.reasoning_price_micros,
            search_unit_price_micros: model.search_unit_price_micros,
            audio_input_price_micros: model.audio_input_price_micros,
            audio_output_price_micros: model.audio_output_price_micros,
            audio_cached_price_micros: model.audio_cached_price_micros,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_price_reaches_the_formula() {
        let model = Model {
            id: "m".into(),
            category: "chat".into(),
            input_price_micros: 1_000_000,
            output_price_micros: 2_000_000,
            cached_price_micros: 500_000,
            request_price_micros: 7,
            second_price_micros: 100,
            image_price_micros: 40_000,
            owned_by: String::new(),
            tier_threshold_tokens: 2_000_000,
            tier_input_price_micros: 3_000_000,
            tier_output_price_micros: 0,
            tier_cached_price_micros: 0,
            cache_write_5m_price_micros: 1_250_000,
            cache_write_1h_price_micros: 2_000_000,
            reasoning_price_micros: 4_000_000,
            audio_input_price_micros: 0,
            audio_output_price_micros: 0,
            audio_cached_price_micros: 0,
            search_unit_price_micros: 2_000,
        };
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 1_000_000,
            cached_tokens: 100_000,
            ..Usage::default()
        };
        // 0.9 + 0.05 + 2 dollars at ratio 1.5, + 7 µ$.
        assert_eq!(cost_micros(&usage, &model, 1_500_000), 4_425_007);
        // 0.2 fresh + 0.05 read + 0.25 written 5 min + 0.4 written 1 h, 1
        // output + 2 reasoning dollars at ratio 1, + 7 µ$.
        let cached = Usage {
            cache_write_5m_tokens: 200_000,
            cache_write_1h_tokens: 200_000,
            reasoning_tokens: 500_000,
            prompt_tokens: 700_000,
            ..usage
        };
        assert_eq!(cost_micros(&cached, &model, 1_000_000), 3_900_007);
        assert_eq!(tier(2_000_001, &model), 1);
        // The tier's $3/M in and reasoning's $4/M out bound the request.
        assert_eq!(bound_micros(1_000_000, 1_000_000, &model, 1_000_000), 7_000_007);
        // Two images, 3.25 s and three search units at 2000 µ$.
        let units = Units { images: 2, audio_millis: 3_250, search_units: 3 };
        assert_eq!(units_cost_micros(&units, &model, 1_000_000), 86_325);
    }
}
