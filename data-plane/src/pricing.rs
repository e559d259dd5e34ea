//! What a request costs, in integer micro-USD: the workspace's one formula
//! (`gw-pricing`, which the control plane and gwctl share), taking the data
//! plane's `Model` as its prices.

use crate::policy::domain::Model;

pub use gw_pricing::{Prices, Units, Usage, video_cost_micros};

/// Cost of `usage` on `model` in a group with ratio `ratio_ppm`; see
/// [`gw_pricing::cost_micros`]: tokens scaled by the ratio and rounded up to
/// 1 µ$, plus the per-request price, saturating at `i64::MAX`.
pub fn cost_micros(usage: &Usage, model: &Model, ratio_ppm: i64) -> i64 {
    gw_pricing::cost_micros(usage, &Prices::from(model), ratio_ppm)
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
        };
        let usage = Usage { prompt_tokens: 1_000_000, completion_tokens: 1_000_000, cached_tokens: 100_000 };
        // 0.9 + 0.05 + 2 dollars at ratio 1.5, + 7 µ$.
        assert_eq!(cost_micros(&usage, &model, 1_500_000), 4_425_007);
        let units = Units { images: 2, audio_millis: 3_250 };
        assert_eq!(units_cost_micros(&units, &model, 1_000_000), 80_325);
    }
}
