//! What a request costs. Token prices are micro-USD per 1M tokens and the
//! ratio is parts per million, so token costs are divided by 10^12; per-unit
//! prices (image, second) by 10^6. All arithmetic is `i128`: each product of
//! two `i64` factors fits, and sums and further products saturate.

/// Token counts metered from one response, normalised the same way for
/// every dialect (the readers in the data plane do the conversion, once):
///
/// - `prompt_tokens` is the whole prompt: fresh input, cache reads and
///   cache writes (OpenAI's `prompt_tokens` already are; the messages API's
///   `input_tokens` excludes both cache counts, so they are added);
/// - `cached_tokens`, `cache_write_5m_tokens` and `cache_write_1h_tokens`
///   are parts of `prompt_tokens` (reads, and writes kept five minutes or
///   one hour);
/// - `completion_tokens` is the whole output, `reasoning_tokens` a part of
///   it (as OpenAI counts them).
///
/// - `audio_prompt_tokens` and `audio_completion_tokens` are the audio
///   parts of the prompt and the output (realtime sessions), and
///   `audio_cached_tokens` the audio part of `cached_tokens`.
///
/// Parts larger than what is left of their whole are clamped, in the order
/// reads, 5-minute writes, 1-hour writes; audio within each kind after that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Part of `prompt_tokens` served from the provider's prompt cache.
    pub cached_tokens: i64,
    /// Part of `prompt_tokens` written to the cache for five minutes.
    pub cache_write_5m_tokens: i64,
    /// Part of `prompt_tokens` written to the cache for one hour.
    pub cache_write_1h_tokens: i64,
    /// Part of `completion_tokens` spent reasoning.
    pub reasoning_tokens: i64,
    /// Part of `prompt_tokens` that was audio (cache reads included).
    pub audio_prompt_tokens: i64,
    /// Part of `completion_tokens` that was audio.
    pub audio_completion_tokens: i64,
    /// Part of `cached_tokens` (and of `audio_prompt_tokens`) that was audio.
    pub audio_cached_tokens: i64,
}

/// What a request used besides tokens, priced by the per-image,
/// per-second and per-search-unit prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Units {
    /// Images generated or edited.
    pub images: i64,
    /// Audio length in milliseconds.
    pub audio_millis: i64,
    /// Rerank search units: one query over up to [`DOCUMENTS_PER_SEARCH_UNIT`]
    /// documents (see [`search_units`]).
    pub search_units: i64,
}

/// Documents one search unit covers, as Cohere bills rerank.
pub const DOCUMENTS_PER_SEARCH_UNIT: i64 = 100;

/// A model's prices in micro-USD: token prices per 1M tokens, the others per
/// request, per second (audio, video) and per image. Negative prices are
/// taken as 0, and a token price of 0 falls back as its field says.
///
/// The tier is long-context pricing as providers bill it: when a request's
/// whole prompt (cache reads and writes included) is more than
/// `tier_threshold_tokens`, the whole request, not just the tokens past the
/// threshold, is billed at the tier's prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prices {
    pub input_price_micros: i64,
    pub output_price_micros: i64,
    /// 0 bills cached prompt tokens at the input price.
    pub cached_price_micros: i64,
    pub request_price_micros: i64,
    pub second_price_micros: i64,
    pub image_price_micros: i64,
    /// Prompt tokens above which the tier applies; 0 for no tier.
    pub tier_threshold_tokens: i64,
    /// The tier's input price; 0 keeps `input_price_micros`.
    pub tier_input_price_micros: i64,
    /// The tier's output price; 0 keeps `output_price_micros`.
    pub tier_output_price_micros: i64,
    /// The tier's cache-read price; 0 keeps `cached_price_micros` (and so
    /// falls back to the tier's input price when that is 0 too).
    pub tier_cached_price_micros: i64,
    /// Cache writes kept five minutes; 0 bills them at the input price
    /// (the tier's, when the tier applies).
    pub cache_write_5m_price_micros: i64,
    /// Cache writes kept one hour; 0 bills them at the input price (the
    /// tier's, when the tier applies).
    pub cache_write_1h_price_micros: i64,
    /// Reasoning tokens; 0 bills them at the output price (the tier's, when
    /// the tier applies).
    pub reasoning_price_micros: i64,
    /// Audio prompt tokens; 0 bills them at the input price (the tier's,
    /// when the tier applies).
    pub audio_input_price_micros: i64,
    /// Audio output tokens; 0 bills them at the output price.
    pub audio_output_price_micros: i64,
    /// Audio cache reads; 0 bills them at the cache-read rate (and so at
    /// the input price when that is 0 too).
    pub audio_cached_price_micros: i64,
    /// One rerank search unit (see [`Units::search_units`]).
    pub search_unit_price_micros: i64,
}

/// The per-1M-token price of each kind of token for one request, after the
/// tier and the fallbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rates {
    input: i128,
    cached: i128,
    write_5m: i128,
    write_1h: i128,
    output: i128,
    reasoning: i128,
    audio_input: i128,
    audio_cached: i128,
    audio_output: i128,
}

/// 10^12: micro-USD per 1M tokens times parts per million.
const TOKEN_DIVISOR: i128 = 1_000_000_000_000;
/// 10^9: micro-USD per second times milliseconds times parts per million.
const UNIT_DIVISOR: i128 = 1_000_000_000;
/// 10^6: micro-USD per second times whole seconds times parts per million.
const VIDEO_DIVISOR: i128 = 1_000_000;

/// The tier a request with `prompt_tokens` is billed at: 1 when `prices`
/// has a tier and the prompt is more than its threshold, else 0. A usage
/// record keeps it next to its counts.
pub fn tier(prompt_tokens: i64, prices: &Prices) -> u32 {
    u32::from(prices.tier_threshold_tokens > 0 && prompt_tokens > prices.tier_threshold_tokens)
}

/// Cost of `usage` at `prices` in a group with ratio `ratio_ppm`, with the
/// rates of the request's [`tier`] and each 0 price falling back as
/// [`Prices`] says:
/// `ceil((fresh * input + cached * cached_rate + write_5m * write_5m_rate +
/// write_1h * write_1h_rate + (completion - reasoning) * output + reasoning *
/// reasoning_rate) * ratio_ppm / 1e12) + request_price`, where `fresh` is
/// the prompt less its cached and written parts. The ratio scales tokens,
/// not the per-request price; rounding happens once. Negative counts and
/// ratios are taken as 0, parts are clamped to their whole (see [`Usage`]);
/// the result saturates at `i64::MAX`.
pub fn cost_micros(usage: &Usage, prices: &Prices, ratio_ppm: i64) -> i64 {
    let rates = Rates::of(prices, tier(usage.prompt_tokens, prices) == 1);
    let prompt = i128::from(usage.prompt_tokens.max(0));
    let cached = i128::from(usage.cached_tokens.max(0)).min(prompt);
    let write_5m = i128::from(usage.cache_write_5m_tokens.max(0)).min(prompt - cached);
    let write_1h = i128::from(usage.cache_write_1h_tokens.max(0)).min(prompt - cached - write_5m);
    let fresh = prompt - cached - write_5m - write_1h;
    let completion = i128::from(usage.completion_tokens.max(0));
    let reasoning = i128::from(usage.reasoning_tokens.max(0)).min(completion);
    // Audio is a part of the cache reads, of the fresh prompt and of the
    // output that is not reasoning.
    let audio_cached = i128::from(usage.audio_cached_tokens.max(0)).min(cached);
    let audio_fresh = (i128::from(usage.audio_prompt_tokens.max(0)) - audio_cached).clamp(0, fresh);
    let audio_output = i128::from(usage.audio_completion_tokens.max(0)).min(completion - reasoning);
    let tokens = [
        (fresh - audio_fresh, rates.input),
        (audio_fresh, rates.audio_input),
        (cached - audio_cached, rates.cached),
        (audio_cached, rates.audio_cached),
        (write_5m, rates.write_5m),
        (write_1h, rates.write_1h),
        (completion - reasoning - audio_output, rates.output),
        (audio_output, rates.audio_output),
        (reasoning, rates.reasoning),
    ]
    .iter()
    // Each count and rate is a non-negative `i64`, so each product is below
    // 2^126 and exact; only the sum can overflow.
    .fold(0i128, |sum, (count, rate)| sum.saturating_add(count * rate));
    scale_tokens(tokens, prices, ratio_ppm)
}

/// The most a request of at most `prompt_tokens` and `completion_tokens`
/// can cost at `prices` and `ratio_ppm`, whatever parts of it are cached,
/// written to the cache or reasoning, and whichever tier its real prompt
/// falls in: every prompt token at the highest prompt rate of either tier,
/// every completion token at the highest output rate. Never less than
/// [`cost_micros`] of any usage within those counts; what the data plane
/// reserves before it sends a request.
pub fn bound_micros(prompt_tokens: i64, completion_tokens: i64, prices: &Prices, ratio_ppm: i64) -> i64 {
    let base = Rates::of(prices, false);
    let rates = if prices.tier_threshold_tokens > 0 { base.max(Rates::of(prices, true)) } else { base };
    let prompt_rate = rates.input.max(rates.cached).max(rates.write_5m).max(rates.write_1h);
    let prompt_rate = prompt_rate.max(rates.audio_input).max(rates.audio_cached);
    let output_rate = rates.output.max(rates.reasoning).max(rates.audio_output);
    // Products of non-negative `i64`s: exact in `i128` (see `cost_micros`).
    let tokens = (i128::from(prompt_tokens.max(0)) * prompt_rate)
        .saturating_add(i128::from(completion_tokens.max(0)) * output_rate);
    scale_tokens(tokens, prices, ratio_ppm)
}

/// `ceil(tokens * ratio_ppm / 1e12) + request_price`, saturating.
fn scale_tokens(tokens: i128, prices: &Prices, ratio_ppm: i64) -> i64 {
    let ratio = i128::from(ratio_ppm.max(0));
    // Two factors of 63 bits cannot overflow: the checked multiplication,
    // an out-of-line call for `i128`, is for sums past `i64`.
    let scaled = if tokens <= i128::from(i64::MAX) { tokens * ratio } else { tokens.saturating_mul(ratio) };
    saturate(ceil_div(scaled, TOKEN_DIVISOR).saturating_add(i128::from(prices.request_price_micros.max(0))))
}

// === impl Rates ===

impl Rates {
    /// The rates of `prices`, in the tier or not.
    fn of(prices: &Prices, tiered: bool) -> Rates {
        let price = |micros: i64| i128::from(micros.max(0));
        // A set price, or else `fallback`.
        let or = |micros: i64, fallback: i128| if micros > 0 { i128::from(micros) } else { fallback };
        let (input, output, cached) = if tiered {
            (
                or(prices.tier_input_price_micros, price(prices.input_price_micros)),
                or(prices.tier_output_price_micros, price(prices.output_price_micros)),
                if prices.tier_cached_price_micros > 0 {
                    prices.tier_cached_price_micros
                } else {
                    prices.cached_price_micros
                },
            )
        } else {
            (price(prices.input_price_micros), price(prices.output_price_micros), prices.cached_price_micros)
        };
        let cached = or(cached, input);
        Rates {
            input,
            cached,
            write_5m: or(prices.cache_write_5m_price_micros, input),
            write_1h: or(prices.cache_write_1h_price_micros, input),
            output,
            reasoning: or(prices.reasoning_price_micros, output),
            audio_input: or(prices.audio_input_price_micros, input),
            audio_cached: or(prices.audio_cached_price_micros, cached),
            audio_output: or(prices.audio_output_price_micros, output),
        }
    }

    /// Each rate the higher of the two.
    fn max(self, other: Rates) -> Rates {
        Rates {
            input: self.input.max(other.input),
            cached: self.cached.max(other.cached),
            write_5m: self.write_5m.max(other.write_5m),
            write_1h: self.write_1h.max(other.write_1h),
            output: self.output.max(other.output),
            reasoning: self.reasoning.max(other.reasoning),
            audio_input: self.audio_input.max(other.audio_input),
            audio_cached: self.audio_cached.max(other.audio_cached),
            audio_output: self.audio_output.max(other.audio_output),
        }
    }
}

/// Cost of `units` at `prices` and `ratio_ppm`: `ceil((images *
/// image_price + audio_millis / 1000 * second_price + search_units *
/// search_unit_price) * ratio_ppm / 1e6)`, saturating, with negative
/// counts, prices and ratios taken as 0. It adds to [`cost_micros`]; the
/// per-request price is not charged again. A rerank request is billed its
/// search units here and its tokens, as prompt tokens, by [`cost_micros`]:
/// a model priced per search unit bills units, one priced per token bills
/// tokens.
pub fn units_cost_micros(units: &Units, prices: &Prices, ratio_ppm: i64) -> i64 {
    // Most requests use no units: nothing to multiply.
    if units.images <= 0 && units.audio_millis <= 0 && units.search_units <= 0 {
        return 0;
    }
    let images = i128::from(units.images.max(0)) * i128::from(prices.image_price_micros.max(0)) * 1000;
    let audio = i128::from(units.audio_millis.max(0)) * i128::from(prices.second_price_micros.max(0));
    let searches = (i128::from(units.search_units.max(0)) * i128::from(prices.search_unit_price_micros.max(0)))
        .saturating_mul(1000);
    let scaled = images.saturating_add(audio).saturating_add(searches).saturating_mul(i128::from(ratio_ppm.max(0)));
    saturate(ceil_div(scaled, UNIT_DIVISOR))
}

/// The search units of one rerank query over `documents` documents, as
/// Cohere bills them when the upstream does not say: one per started
/// [`DOCUMENTS_PER_SEARCH_UNIT`], and at least one (a query over nothing
/// is still a query).
pub fn search_units(documents: usize) -> i64 {
    let per_unit = usize::try_from(DOCUMENTS_PER_SEARCH_UNIT).unwrap_or(usize::MAX);
    i64::try_from(documents.div_ceil(per_unit)).unwrap_or(i64::MAX).max(1)
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
/// A cost almost always fits in 64 bits, where dividing by a constant is a
/// multiplication; in 128 it is a call to a division routine.
fn ceil_div(value: i128, divisor: i128) -> i128 {
    match (u64::try_from(value), u64::try_from(divisor)) {
        (Ok(value), Ok(divisor)) if divisor > 0 => i128::from(value.div_ceil(divisor)),
        _ => value.saturating_add(divisor - 1).div_euclid(divisor),
    }
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
        Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached, ..Usage::default() }
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
        let units = |images, audio_millis| Units { images, audio_millis, search_units: 0 };
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
        assert_eq!(units_cost_micros(&Units { images: 3, audio_millis: 3_000, search_units: 2 }, &p, RATIO_ONE), 0);
    }

    #[test]
    fn search_units_cover_a_hundred_documents_each_and_scale_with_the_ratio() {
        assert_eq!([0, 1, 100, 101, 250].map(search_units), [1, 1, 1, 2, 3]);
        // $2 per 1000 searches: 2000 µ$ a unit.
        let p = Prices { search_unit_price_micros: 2_000, input_price_micros: 1_000_000, ..Prices::default() };
        let units = Units { search_units: 3, ..Units::default() };
        assert_eq!(units_cost_micros(&units, &p, RATIO_ONE), 6_000);
        assert_eq!(units_cost_micros(&units, &p, 1_500_000), 9_000);
        // A fraction of a micro-USD per unit rounds up once, over all units.
        let cheap = Prices { search_unit_price_micros: 1, ..Prices::default() };
        assert_eq!(units_cost_micros(&units, &cheap, 500_000), 2, "1.5 µ$ rounds up");
        assert_eq!(units_cost_micros(&Units { search_units: -1, ..units }, &p, RATIO_ONE), 0);
        let huge = Units { search_units: i64::MAX, ..units };
        assert_eq!(units_cost_micros(&huge, &Prices { search_unit_price_micros: i64::MAX, ..p }, i64::MAX), i64::MAX);
    }

    #[test]
    fn a_rerank_bills_its_tokens_at_the_input_price_and_its_units_apart() {
        // 1M tokens at $0.02/M = 20 000 µ$; one unit at $1 per 1000 searches = 1000 µ$.
        let per_token = Prices { input_price_micros: 20_000, ..Prices::default() };
        let per_unit = Prices { search_unit_price_micros: 1_000, ..Prices::default() };
        let usage = Usage { prompt_tokens: 1_000_000, ..Usage::default() };
        let units = Units { search_units: 1, ..Units::default() };
        let total = |p: &Prices| cost_micros(&usage, p, RATIO_ONE) + units_cost_micros(&units, p, RATIO_ONE);
        assert_eq!(total(&per_token), 20_000, "tokens only");
        assert_eq!(total(&per_unit), 1_000, "the unit only");
        assert_eq!(total(&Prices { search_unit_price_micros: 1_000, ..per_token }), 21_000, "both when both are set");
    }

    #[test]
    fn audio_tokens_bill_at_audio_prices_or_fall_back_to_the_text_ones() {
        // gpt-realtime's list prices: text $4 in, $0.40 cached, $16 out;
        // audio $32 in, $0.40 cached, $64 out.
        let p = Prices {
            input_price_micros: 4_000_000,
            cached_price_micros: 400_000,
            output_price_micros: 16_000_000,
            audio_input_price_micros: 32_000_000,
            audio_cached_price_micros: 400_000,
            audio_output_price_micros: 64_000_000,
            ..Prices::default()
        };
        // 1000 prompt (300 cached, 100 of them audio; 600 audio in all),
        // 500 out (400 audio): 200 text + 500 audio fresh, 200 text + 100
        // audio cached, 100 text + 400 audio out.
        let usage = Usage {
            prompt_tokens: 1_000,
            cached_tokens: 300,
            audio_prompt_tokens: 600,
            audio_cached_tokens: 100,
            completion_tokens: 500,
            audio_completion_tokens: 400,
            ..Usage::default()
        };
        let expected = 200 * 4 + 500 * 32 + 200 * 4 / 10 + 100 * 4 / 10 + 100 * 16 + 400 * 64;
        assert_eq!(cost_micros(&usage, &p, RATIO_ONE), expected);
        // Unpriced audio bills as text of the same kind.
        let text_only =
            Prices { audio_input_price_micros: 0, audio_cached_price_micros: 0, audio_output_price_micros: 0, ..p };
        let text = Usage { audio_prompt_tokens: 0, audio_cached_tokens: 0, audio_completion_tokens: 0, ..usage };
        assert_eq!(cost_micros(&usage, &text_only, RATIO_ONE), cost_micros(&text, &p, RATIO_ONE));
        // Audio parts larger than their whole are clamped to it.
        let over =
            Usage { audio_prompt_tokens: 5_000, audio_cached_tokens: 5_000, audio_completion_tokens: 5_000, ..usage };
        assert_eq!(cost_micros(&over, &p, RATIO_ONE), 700 * 32 + 300 * 4 / 10 + 500 * 64);
        // The bound covers every token at the dearest audio rates.
        assert!(bound_micros(1_000, 500, &p, RATIO_ONE) >= cost_micros(&over, &p, RATIO_ONE));
        assert_eq!(bound_micros(1_000, 500, &p, RATIO_ONE), 1_000 * 32 + 500 * 64);
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

    /// The 128-bit rounding `ceil_div` uses past 64 bits, for every value.
    fn ceil_div_general(value: i128, divisor: i128) -> i128 {
        value.saturating_add(divisor - 1).div_euclid(divisor)
    }

    proptest::proptest! {
        #[test]
        fn the_64_bit_rounding_is_the_128_bit_one(
            value in proptest::prop_oneof![0..=i128::from(u64::MAX), 0..=i128::MAX, proptest::strategy::Just(i128::from(u64::MAX))],
            divisor in proptest::prop_oneof![
                proptest::strategy::Just(TOKEN_DIVISOR),
                proptest::strategy::Just(UNIT_DIVISOR),
                proptest::strategy::Just(VIDEO_DIVISOR),
                1..=i128::from(u64::MAX),
            ],
        ) {
            proptest::prop_assert_eq!(ceil_div(value, divisor), ceil_div_general(value, divisor));
        }

        #[test]
        fn costs_are_the_saturating_sum_of_exact_products(
            counts in proptest::array::uniform9(proptest::prop_oneof![0..100_000_000i64, proptest::num::i64::ANY]),
            rates in proptest::array::uniform4(proptest::prop_oneof![0..1_000_000_000i64, proptest::num::i64::ANY]),
            ratio in proptest::prop_oneof![0..10_000_000i64, proptest::num::i64::ANY],
        ) {
            let usage = Usage {
                prompt_tokens: counts[0],
                completion_tokens: counts[1],
                cached_tokens: counts[2],
                cache_write_5m_tokens: counts[3],
                cache_write_1h_tokens: counts[4],
                reasoning_tokens: counts[5],
                audio_prompt_tokens: counts[6],
                audio_completion_tokens: counts[7],
                audio_cached_tokens: counts[8],
            };
            let p = prices(rates[0], rates[1], rates[2], rates[3]);
            // With only these prices set, cache writes and audio bill at the
            // input price, reasoning and audio output at the output price:
            // the whole is fresh-or-written input, cache reads and output.
            let (prompt, completion) = (counts[0].max(0), counts[1].max(0));
            let cached = counts[2].max(0).min(prompt);
            let input = i128::from(rates[0].max(0));
            let cached_rate = if rates[2] > 0 { i128::from(rates[2]) } else { input };
            let parts = [(prompt - cached, input), (cached, cached_rate), (completion, i128::from(rates[1].max(0)))];
            // Checked, not saturating: an overflow anywhere is a cost past
            // `i64`, which saturates.
            let tokens =
                parts.iter().try_fold(0i128, |sum, (n, rate)| sum.checked_add(i128::from(*n).checked_mul(*rate)?));
            let expected = tokens
                .and_then(|t| t.checked_mul(i128::from(ratio.max(0))))
                .map_or(i64::MAX, |t| saturate(ceil_div_general(t, TOKEN_DIVISOR).saturating_add(i128::from(rates[3].max(0)))));
            proptest::prop_assert_eq!(cost_micros(&usage, &p, ratio), expected);
        }
    }
}
