//! What a request costs. Token prices are micro-USD per 1M tokens and the
//! ratio is parts per million, so token costs are divided by 10^12; per-unit
//! prices (image, second) by 10^6. All arithmetic is `i128`: each product of
//! two `i64` factors fits, and sums and further products saturate.

/// Token counts metered from one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Part of `prompt_tokens` served from the provider's prompt cache.
    pub cached_tokens: i64,
}

/// What a request used besides tokens, priced by the per-image and
/// per-second prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Units {
    /// Images generated or edited.
    pub images: i64,
    /// Audio length in milliseconds.
    pub audio_millis: i64,
}

/// A model's prices in micro-USD: token prices per 1M tokens, the others per
/// request, per second (audio, video) and per image. Negative prices are
/// taken as 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prices {
    pub input_price_micros: i64,
    pub output_price_micros: i64,
    /// 0 bills cached prompt tokens at the input price.
    pub cached_price_micros: i64,
    pub request_price_micros: i64,
    pub second_price_micros: i64,
    pub image_price_micros: i64,
}

/// 10^12: micro-USD per 1M tokens times parts per million.
const TOKEN_DIVISOR: i128 = 1_000_000_000_000;
/// 10^9: micro-USD per second times milliseconds times parts per million.
const UNIT_DIVISOR: i128 = 1_000_000_000;
/// 10^6: micro-USD per second times whole seconds times parts per million.
const VIDEO_DIVISOR: i128 = 1_000_000;

/// Cost of `usage` at `prices` in a group with ratio `ratio_ppm`:
/// `ceil(((prompt - cached) * input + cached * cached_or_input + completion *
/// output) * ratio_ppm / 1e12) + request_price`. The ratio scales tokens, not
/// the per-request price. Negative counts and ratios are taken as 0, `cached`
/// never exceeds `prompt`; the result saturates at `i64::MAX`.
pub fn cost_micros(usage: &Usage, prices: &Prices, ratio_ppm: i64) -> i64 {
    let prompt = i128::from(usage.prompt_tokens.max(0));
    let cached = i128::from(usage.cached_tokens.max(0)).min(prompt);
    let completion = i128::from(usage.completion_tokens.max(0));
    let input = i128::from(prices.input_price_micros.max(0));
    let cached_price = match prices.cached_price_micros {
        price if price > 0 => i128::from(price),
        _ => input,
    };
    let tokens = ((prompt - cached) * input)
        .saturating_add(cached * cached_price)
        .saturating_add(completion * i128::from(prices.output_price_micros.max(0)));
    let scaled = tokens.saturating_mul(i128::from(ratio_ppm.max(0)));
    let total = ceil_div(scaled, TOKEN_DIVISOR).saturating_add(i128::from(prices.request_price_micros.max(0)));
    saturate(total)
}

/// Cost of `units` at `prices` and `ratio_ppm`: `ceil((images * image_price
/// + audio_millis / 1000 * second_price) * ratio_ppm / 1e6)`, saturating,
/// with negative counts, prices and ratios taken as 0. It adds to
/// [`cost_micros`]; the per-request price is not charged again.
pub fn units_cost_micros(units: &Units, prices: &Prices, ratio_ppm: i64) -> i64 {
    let images = i128::from(units.images.max(0)) * i128::from(prices.image_price_micros.max(0)) * 1000;
    let audio = i128::from(units.audio_millis.max(0)) * i128::from(prices.second_price_micros.max(0));
    let scaled = images.saturating_add(audio).saturating_mul(i128::from(ratio_ppm.max(0)));
    saturate(ceil_div(scaled, UNIT_DIVISOR))
}

/// Cost of a video of `seconds` at `second_price_micros` and `ratio_ppm`:
/// `ceil(second_price * seconds * ratio_ppm / 1e6)`, saturating, with a
/// negative price or ratio taken as 0. What a video task is charged when it
/// is created; the data plane checks the same figure before asking.
pub fn video_cost_micros(second_price_micros: i64, seconds: u32, ratio_ppm: i64) -> i64 {
    let scaled =
        (i128::from(second_price_micros.max(0)) * i128::from(seconds)).saturating_mul(i128::from(ratio_ppm.max(0)));
    saturate(ceil_div(scaled, VIDEO_DIVISOR))
}

/// `ceil(value / divisor)` for a non-negative `value`, without overflow.
fn ceil_div(value: i128, divisor: i128) -> i128 {
    value.saturating_add(divisor - 1).div_euclid(divisor)
}

fn saturate(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATIO_ONE: i64 = 1_000_000;

    fn prices(input: i64, output: i64, cached: i64, request: i64) -> Prices {
        Prices {
            input_price_micros: input,
            output_price_micros: output,
            cached_price_micros: cached,
            request_price_micros: request,
            ..Prices::default()
        }
    }

    fn usage(prompt: i64, completion: i64, cached: i64) -> Usage {
        Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached }
    }

    #[test]
    fn whole_dollars_price_exactly() {
        // $1/M in, $2/M out: 1M in + 1M out at ratio 1 = $3.
        let p = prices(1_000_000, 2_000_000, 0, 0);
        assert_eq!(cost_micros(&usage(1_000_000, 1_000_000, 0), &p, RATIO_ONE), 3_000_000);
    }

    #[test]
    fn fractions_of_a_micro_round_up() {
        // 10 prompt tokens at $1/M = 10 micro-USD exactly.
        let p = prices(1_000_000, 0, 0, 0);
        assert_eq!(cost_micros(&usage(10, 0, 0), &p, RATIO_ONE), 10);
        // 1 token at $0.15/M = 0.15 µ$ → 1 µ$.
        let cheap = prices(150_000, 0, 0, 0);
        assert_eq!(cost_micros(&usage(1, 0, 0), &cheap, RATIO_ONE), 1);
        assert_eq!(cost_micros(&usage(0, 0, 0), &cheap, RATIO_ONE), 0);
        // 1M + 1 tokens at $1/M: exactly one µ$ more, no rounding.
        assert_eq!(cost_micros(&usage(1_000_001, 0, 0), &p, RATIO_ONE), 1_000_001);
        // 7 tokens at $1/M and ratio 1.000001: 7.000007 µ$ → 8.
        assert_eq!(cost_micros(&usage(7, 0, 0), &p, RATIO_ONE + 1), 8);
    }

    #[test]
    fn rounding_happens_once_over_the_whole_request() {
        // 1 in + 1 out at $0.4/M each is 0.8 µ$ → 1, not 1 + 1.
        let p = prices(400_000, 400_000, 0, 0);
        assert_eq!(cost_micros(&usage(1, 1, 0), &p, RATIO_ONE), 1);
    }

    #[test]
    fn cached_tokens_use_cached_price_or_fall_back_to_input() {
        let with_cache = prices(2_000_000, 0, 500_000, 0);
        // 900k uncached * 2 + 100k cached * 0.5 = 1.8 + 0.05 = $1.85
        assert_eq!(cost_micros(&usage(1_000_000, 0, 100_000), &with_cache, RATIO_ONE), 1_850_000);
        let no_cache_price = prices(2_000_000, 0, 0, 0);
        assert_eq!(cost_micros(&usage(1_000_000, 0, 100_000), &no_cache_price, RATIO_ONE), 2_000_000);
        let negative_cache_price = prices(2_000_000, 0, -1, 0);
        assert_eq!(cost_micros(&usage(1_000_000, 0, 100_000), &negative_cache_price, RATIO_ONE), 2_000_000);
    }

    #[test]
    fn group_ratio_scales_tokens_but_not_request_price() {
        let p = prices(1_000_000, 1_000_000, 0, 7);
        // 1000 + 1000 tokens at $1/M = 2000 µ$, × 1.5 = 3000 µ$, + 7.
        assert_eq!(cost_micros(&usage(1000, 1000, 0), &p, 1_500_000), 3007);
        assert_eq!(cost_micros(&usage(1000, 1000, 0), &p, 0), 7);
        assert_eq!(cost_micros(&usage(1000, 1000, 0), &p, -1), 7, "a negative ratio is 0");
        assert_eq!(cost_micros(&usage(0, 0, 0), &p, RATIO_ONE), 7, "the request price alone");
    }

    #[test]
    fn bad_counts_are_clamped_and_huge_ones_saturate() {
        let p = prices(1_000_000, 1_000_000, 0, 0);
        assert_eq!(cost_micros(&usage(-5, -5, 99), &p, RATIO_ONE), 0);
        assert_eq!(cost_micros(&usage(10, 0, 99), &p, RATIO_ONE), 10);
        assert_eq!(cost_micros(&usage(10, 0, -3), &p, RATIO_ONE), 10);
        let negative = prices(-1_000_000, -1_000_000, 0, -7);
        assert_eq!(cost_micros(&usage(10, 10, 0), &negative, RATIO_ONE), 0);
        let pricey = prices(i64::MAX, i64::MAX, 0, i64::MAX);
        assert_eq!(cost_micros(&usage(i64::MAX, i64::MAX, 0), &pricey, i64::MAX), i64::MAX);
        assert_eq!(cost_micros(&usage(i64::MAX, i64::MAX, i64::MAX), &pricey, i64::MAX), i64::MAX);
    }

    #[test]
    fn images_and_seconds_scale_with_the_ratio_and_round_up() {
        let p = Prices { image_price_micros: 40_000, second_price_micros: 100, ..Prices::default() };
        let units = |images, audio_millis| Units { images, audio_millis };
        assert_eq!(units_cost_micros(&units(2, 0), &p, RATIO_ONE), 80_000);
        assert_eq!(units_cost_micros(&units(2, 0), &p, 1_500_000), 120_000);
        // 3.25 s at 100 µ$/s = 325 µ$; 1 ms = 0.1 µ$ → 1 µ$.
        assert_eq!(units_cost_micros(&units(0, 3_250), &p, RATIO_ONE), 325);
        assert_eq!(units_cost_micros(&units(0, 1), &p, RATIO_ONE), 1);
        assert_eq!(units_cost_micros(&units(1, 3_250), &p, RATIO_ONE), 40_325);
        assert_eq!(units_cost_micros(&units(-1, -1), &p, RATIO_ONE), 0);
        assert_eq!(units_cost_micros(&units(2, 1_000), &p, 0), 0);
        assert_eq!(units_cost_micros(&units(i64::MAX, i64::MAX), &p, i64::MAX), i64::MAX);
    }

    #[test]
    fn units_ignore_token_and_request_prices() {
        let p = prices(1_000_000, 1_000_000, 0, 7);
        assert_eq!(units_cost_micros(&Units { images: 3, audio_millis: 3_000 }, &p, RATIO_ONE), 0);
    }

    #[test]
    fn video_is_price_times_seconds_times_ratio_rounded_up() {
        // $0.10 per second, 4 s at ratio 1.5.
        assert_eq!(video_cost_micros(100_000, 4, 1_500_000), 600_000);
        assert_eq!(video_cost_micros(1, 1, 500_000), 1, "half a micro-USD rounds up");
        assert_eq!(video_cost_micros(3, 1, 333_334), 2, "1.000002 µ$ rounds up");
        assert_eq!(video_cost_micros(0, 10, 2_000_000), 0);
        assert_eq!(video_cost_micros(100, 0, RATIO_ONE), 0);
        assert_eq!(video_cost_micros(-5, 10, 2_000_000), 0, "a negative price is free");
        assert_eq!(video_cost_micros(100, 10, -1), 0, "a negative ratio is 0");
    }

    #[test]
    fn video_saturates() {
        assert_eq!(video_cost_micros(i64::MAX, 600, 1_000_000_000_000_000), i64::MAX);
        assert_eq!(video_cost_micros(i64::MAX, u32::MAX, i64::MAX), i64::MAX);
    }
}
