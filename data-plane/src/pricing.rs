//! What a request costs, in integer micro-USD. Token prices are micro-USD per
//! 1M tokens and the group ratio is in parts per million, so the product is
//! divided by 10^12 and rounded up: no request that used tokens is free.

use crate::policy::domain::Model;

/// Token counts metered from one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Part of `prompt_tokens` served from the provider's prompt cache.
    pub cached_tokens: i64,
}

/// Cost of `usage` on `model` in a group with ratio `ratio_ppm`:
/// `ceil(((prompt - cached) * input + cached * cached_or_input + completion *
/// output) * ratio_ppm / 1e12) + request_price`. Negative counts are taken as
/// 0 and `cached` never exceeds `prompt`; the result saturates at `i64::MAX`.
pub fn cost_micros(usage: &Usage, model: &Model, ratio_ppm: i64) -> i64 {
    let prompt = i128::from(usage.prompt_tokens.max(0));
    let cached = i128::from(usage.cached_tokens.max(0)).min(prompt);
    let completion = i128::from(usage.completion_tokens.max(0));
    let cached_price = if model.cached_price_micros > 0 { model.cached_price_micros } else { model.input_price_micros };
    // Each product fits in i128 (both factors < 2^63); the sums saturate.
    let tokens = ((prompt - cached) * i128::from(model.input_price_micros))
        .saturating_add(cached * i128::from(cached_price))
        .saturating_add(completion * i128::from(model.output_price_micros));
    let scaled = tokens.saturating_mul(i128::from(ratio_ppm.max(0)));
    const DIVISOR: i128 = 1_000_000_000_000;
    let rounded_up = scaled.saturating_add(DIVISOR - 1).div_euclid(DIVISOR);
    let total = rounded_up.saturating_add(i128::from(model.request_price_micros.max(0)));
    i64::try_from(total).unwrap_or(i64::MAX)
}

/// What a request used besides tokens, priced by the model's per-image and
/// per-second prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Units {
    /// Images generated or edited.
    pub images: i64,
    /// Audio length in milliseconds.
    pub audio_millis: i64,
}

/// Cost of `units` on `model` at `ratio_ppm`: `ceil((images * image_price +
/// audio_millis / 1000 * second_price) * ratio_ppm / 1e6)`, saturating, with
/// negative counts taken as 0. Adds to `cost_micros`.
pub fn units_cost_micros(units: &Units, model: &Model, ratio_ppm: i64) -> i64 {
    let images = i128::from(units.images.max(0)) * i128::from(model.image_price_micros.max(0)) * 1000;
    let audio = i128::from(units.audio_millis.max(0)) * i128::from(model.second_price_micros.max(0));
    let scaled = images.saturating_add(audio).saturating_mul(i128::from(ratio_ppm.max(0)));
    const DIVISOR: i128 = 1_000_000_000;
    let rounded_up = scaled.saturating_add(DIVISOR - 1).div_euclid(DIVISOR);
    i64::try_from(rounded_up).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn model(input: i64, output: i64, cached: i64, request: i64) -> Model {
        Model {
            id: "m".into(),
            category: "chat".into(),
            input_price_micros: input,
            output_price_micros: output,
            cached_price_micros: cached,
            request_price_micros: request,
            second_price_micros: 0,
            image_price_micros: 0,
            owned_by: String::new(),
        }
    }

    fn usage(prompt: i64, completion: i64, cached: i64) -> Usage {
        Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached }
    }

    #[test]
    fn whole_dollars_price_exactly() {
        // $1/M in, $2/M out: 1M in + 1M out at ratio 1 = $3.
        let m = model(1_000_000, 2_000_000, 0, 0);
        assert_eq!(cost_micros(&usage(1_000_000, 1_000_000, 0), &m, 1_000_000), 3_000_000);
    }

    #[test]
    fn fractions_of_a_micro_round_up() {
        // 10 prompt tokens at $1/M = 10 micro-USD exactly; 1 token = 1 µ$.
        let m = model(1_000_000, 0, 0, 0);
        assert_eq!(cost_micros(&usage(10, 0, 0), &m, 1_000_000), 10);
        // 1 token at $0.15/M = 0.15 µ$ → 1 µ$.
        let cheap = model(150_000, 0, 0, 0);
        assert_eq!(cost_micros(&usage(1, 0, 0), &cheap, 1_000_000), 1);
        assert_eq!(cost_micros(&usage(0, 0, 0), &cheap, 1_000_000), 0);
    }

    #[test]
    fn cached_tokens_use_cached_price_or_fall_back_to_input() {
        let with_cache = model(2_000_000, 0, 500_000, 0);
        // 900k uncached * 2 + 100k cached * 0.5 = 1.8 + 0.05 = $1.85
        assert_eq!(cost_micros(&usage(1_000_000, 0, 100_000), &with_cache, 1_000_000), 1_850_000);
        let no_cache_price = model(2_000_000, 0, 0, 0);
        assert_eq!(cost_micros(&usage(1_000_000, 0, 100_000), &no_cache_price, 1_000_000), 2_000_000);
    }

    #[test]
    fn group_ratio_scales_tokens_but_not_request_price() {
        let m = model(1_000_000, 1_000_000, 0, 7);
        // 1000 + 1000 tokens at $1/M = 2000 µ$, × 1.5 = 3000 µ$, + 7.
        assert_eq!(cost_micros(&usage(1000, 1000, 0), &m, 1_500_000), 3007);
        assert_eq!(cost_micros(&usage(1000, 1000, 0), &m, 0), 7);
    }

    #[test]
    fn bad_counts_are_clamped_and_huge_ones_saturate() {
        let m = model(1_000_000, 1_000_000, 0, 0);
        assert_eq!(cost_micros(&usage(-5, -5, 99), &m, 1_000_000), 0);
        assert_eq!(cost_micros(&usage(10, 0, 99), &m, 1_000_000), 10);
        let pricey = model(i64::MAX, i64::MAX, 0, i64::MAX);
        assert_eq!(cost_micros(&usage(i64::MAX, i64::MAX, 0), &pricey, i64::MAX), i64::MAX);
    }
    #[test]
    fn images_and_seconds_scale_with_the_ratio_and_round_up() {
        let m = Model { image_price_micros: 40_000, second_price_micros: 100, ..model(0, 0, 0, 0) };
        let units = |images, audio_millis| Units { images, audio_millis };
        assert_eq!(units_cost_micros(&units(2, 0), &m, 1_000_000), 80_000);
        assert_eq!(units_cost_micros(&units(2, 0), &m, 1_500_000), 120_000);
        // 3.25 s at 100 µ$/s = 325 µ$; 1 ms = 0.1 µ$ → 1 µ$.
        assert_eq!(units_cost_micros(&units(0, 3_250), &m, 1_000_000), 325);
        assert_eq!(units_cost_micros(&units(0, 1), &m, 1_000_000), 1);
        assert_eq!(units_cost_micros(&units(-1, -1), &m, 1_000_000), 0);
        assert_eq!(units_cost_micros(&units(i64::MAX, i64::MAX), &m, i64::MAX), i64::MAX);
    }
}
