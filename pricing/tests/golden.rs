//! Golden figures for every part of the price formula, in integer micro-USD,
//! each worked out by hand in its comment, and the property that the
//! up-front bound is never below what a request within it can cost.

use gw_pricing::{Prices, RATIO_ONE_PPM, Usage, bound_micros, cost_micros, tier};
use proptest::prelude::*;

/// A long-context model as providers list one: $3 in, $15 out, $0.30 cache
/// reads, $3.75 and $6 cache writes; past 200k prompt tokens $6 in, $22.50
/// out, $0.60 cache reads.
fn long_context() -> Prices {
    Prices {
        input_price_micros: 3_000_000,
        output_price_micros: 15_000_000,
        cached_price_micros: 300_000,
        tier_threshold_tokens: 200_000,
        tier_input_price_micros: 6_000_000,
        tier_output_price_micros: 22_500_000,
        tier_cached_price_micros: 600_000,
        cache_write_5m_price_micros: 3_750_000,
        cache_write_1h_price_micros: 6_000_000,
        ..Prices::default()
    }
}

fn tokens(prompt: i64, completion: i64) -> Usage {
    Usage { prompt_tokens: prompt, completion_tokens: completion, ..Usage::default() }
}

#[test]
fn below_the_threshold_bills_base_prices() {
    // 100k × $3/M + 1k × $15/M = 300 000 + 15 000.
    assert_eq!(cost_micros(&tokens(100_000, 1_000), &long_context(), RATIO_ONE_PPM), 315_000);
    assert_eq!(tier(100_000, &long_context()), 0);
}

#[test]
fn at_the_threshold_bills_base_prices() {
    // 200k × $3/M + 1k × $15/M = 600 000 + 15 000.
    assert_eq!(cost_micros(&tokens(200_000, 1_000), &long_context(), RATIO_ONE_PPM), 615_000);
    assert_eq!(tier(200_000, &long_context()), 0);
}

#[test]
fn past_the_threshold_the_whole_request_bills_at_the_tier() {
    // 200 001 × $6/M + 1k × $22.50/M = 1 200 006 + 22 500.
    assert_eq!(cost_micros(&tokens(200_001, 1_000), &long_context(), RATIO_ONE_PPM), 1_222_506);
    assert_eq!(tier(200_001, &long_context()), 1);
    // Cache reads count towards the threshold and bill at the tier's read
    // price: 100 001 fresh × $6/M + 100k read × $0.60/M = 600 006 + 60 000.
    let read = Usage { cached_tokens: 100_000, ..tokens(200_001, 0) };
    assert_eq!(cost_micros(&read, &long_context(), RATIO_ONE_PPM), 660_006);
}

#[test]
fn a_tier_price_of_zero_keeps_the_base_price() {
    let input_only = Prices { tier_output_price_micros: 0, tier_cached_price_micros: 0, ..long_context() };
    // 200 001 × $6/M + 1k × $15/M (base output) = 1 200 006 + 15 000.
    assert_eq!(cost_micros(&tokens(200_001, 1_000), &input_only, RATIO_ONE_PPM), 1_215_006);
    // Reads at the base read price: 1 fresh × $6/M + 200k × $0.30/M = 6 + 60 000.
    let read = Usage { cached_tokens: 200_000, ..tokens(200_001, 0) };
    assert_eq!(cost_micros(&read, &input_only, RATIO_ONE_PPM), 60_006);
    // No read price at all: reads at the tier's input price, 200 001 × $6/M.
    let no_read = Prices { cached_price_micros: 0, ..input_only };
    assert_eq!(cost_micros(&read, &no_read, RATIO_ONE_PPM), 1_200_006);
    // A threshold of 0 is no tier.
    let untiered = Prices { tier_threshold_tokens: 0, ..long_context() };
    assert_eq!(cost_micros(&tokens(1_000_000, 0), &untiered, RATIO_ONE_PPM), 3_000_000);
    assert_eq!(tier(1_000_000, &untiered), 0);
}

#[test]
fn five_minute_cache_writes_bill_at_their_price() {
    // 5k fresh × $3/M + 4k written × $3.75/M + 1k read × $0.30/M
    // = 15 000 + 15 000 + 300.
    let usage = Usage { cached_tokens: 1_000, cache_write_5m_tokens: 4_000, ..tokens(10_000, 0) };
    assert_eq!(cost_micros(&usage, &long_context(), RATIO_ONE_PPM), 30_300);
}

#[test]
fn one_hour_cache_writes_bill_at_their_price() {
    // 6k fresh × $3/M + 4k written × $6/M = 18 000 + 24 000.
    let usage = Usage { cache_write_1h_tokens: 4_000, ..tokens(10_000, 0) };
    assert_eq!(cost_micros(&usage, &long_context(), RATIO_ONE_PPM), 42_000);
    // Both at once: 3k fresh × 3 + 3k × 3.75 + 4k × 6 = 9 000 + 11 250 + 24 000.
    let both = Usage { cache_write_5m_tokens: 3_000, ..usage };
    assert_eq!(cost_micros(&both, &long_context(), RATIO_ONE_PPM), 44_250);
}

#[test]
fn unpriced_cache_writes_bill_at_the_input_price_of_the_tier_applied() {
    let unpriced = Prices { cache_write_5m_price_micros: 0, cache_write_1h_price_micros: 0, ..long_context() };
    let usage = Usage { cache_write_5m_tokens: 2_000, cache_write_1h_tokens: 2_000, ..tokens(10_000, 0) };
    // Everything at $3/M: 30 000.
    assert_eq!(cost_micros(&usage, &unpriced, RATIO_ONE_PPM), 30_000);
    // Past the threshold, at the tier's $6/M: 300k × 6 = 1 800 000.
    let long = Usage { cache_write_5m_tokens: 100_000, ..tokens(300_000, 0) };
    assert_eq!(cost_micros(&long, &unpriced, RATIO_ONE_PPM), 1_800_000);
    // Priced writes keep their price in the tier: 200k × 6 + 100k × 3.75.
    assert_eq!(cost_micros(&long, &long_context(), RATIO_ONE_PPM), 1_575_000);
}

#[test]
fn reasoning_bills_at_the_output_price_unless_priced_apart() {
    let usage = Usage { reasoning_tokens: 1_500, ..tokens(0, 2_000) };
    // 2k × $15/M, whatever part was reasoning.
    assert_eq!(cost_micros(&usage, &long_context(), RATIO_ONE_PPM), 30_000);
    // 500 × $15/M + 1.5k × $20/M = 7 500 + 30 000.
    let apart = Prices { reasoning_price_micros: 20_000_000, ..long_context() };
    assert_eq!(cost_micros(&usage, &apart, RATIO_ONE_PPM), 37_500);
    // Unpriced reasoning past the threshold follows the tier's output price:
    // 200 001 × $6/M + 2k × $22.50/M = 1 200 006 + 45 000.
    let long = Usage { prompt_tokens: 200_001, ..usage };
    assert_eq!(cost_micros(&long, &long_context(), RATIO_ONE_PPM), 1_245_006);
}

#[test]
fn parts_larger_than_their_whole_are_clamped() {
    // 10 prompt tokens claiming 8 read, 8 written 5 min, 8 written 1 h:
    // 8 read × $0.30 + 2 written × $3.75 = 2.4 + 7.5 = 9.9 → 10.
    let usage = Usage { cached_tokens: 8, cache_write_5m_tokens: 8, cache_write_1h_tokens: 8, ..tokens(10, 0) };
    assert_eq!(cost_micros(&usage, &long_context(), RATIO_ONE_PPM), 10);
    // 5 output tokens claiming 9 reasoning: all 5 at reasoning's $20/M.
    let apart = Prices { reasoning_price_micros: 20_000_000, ..long_context() };
    let reasoning = Usage { reasoning_tokens: 9, ..tokens(0, 5) };
    assert_eq!(cost_micros(&reasoning, &apart, RATIO_ONE_PPM), 100);
    let negative = Usage { cache_write_5m_tokens: -4, reasoning_tokens: -4, ..tokens(10, 10) };
    assert_eq!(cost_micros(&negative, &long_context(), RATIO_ONE_PPM), 180);
}

#[test]
fn the_group_ratio_scales_every_kind_of_token() {
    // (5k × 3 + 4k × 3.75 + 1k × 0.30 + 1k × 15) × 1.5 = 45 300 × 1.5.
    let usage = Usage { cached_tokens: 1_000, cache_write_5m_tokens: 4_000, ..tokens(10_000, 1_000) };
    assert_eq!(cost_micros(&usage, &long_context(), 1_500_000), 67_950);
    // Past the threshold at ratio 0.5: 1 222 506 / 2 = 611 253.
    assert_eq!(cost_micros(&tokens(200_001, 1_000), &long_context(), 500_000), 611_253);
}

#[test]
fn rounding_happens_once_and_upward() {
    // 1 fresh × $3/M + 1 read × $0.30/M = 3.3 µ$ → 4, not 3 + 1.
    let usage = Usage { cached_tokens: 1, ..tokens(2, 0) };
    assert_eq!(cost_micros(&usage, &long_context(), RATIO_ONE_PPM), 4);
    // 1 written × $3.75/M = 3.75 → 4; 1 reasoning at $0.10/M = 0.1 → 1.
    let write = Usage { cache_write_5m_tokens: 1, ..tokens(1, 0) };
    assert_eq!(cost_micros(&write, &long_context(), RATIO_ONE_PPM), 4);
    let cheap = Prices { reasoning_price_micros: 100_000, ..Prices::default() };
    assert_eq!(cost_micros(&Usage { reasoning_tokens: 1, ..tokens(0, 1) }, &cheap, RATIO_ONE_PPM), 1);
}

#[test]
fn the_bound_uses_the_highest_price_either_tier_may_charge() {
    // A prompt estimated under the threshold may be past it: 100k prompt
    // tokens at the highest prompt rate ($6: tier input, 1 h writes), 1k
    // output at the tier's $22.50.
    assert_eq!(bound_micros(100_000, 1_000, &long_context(), RATIO_ONE_PPM), 622_500);
    // Reasoning dearer than output bounds the output.
    let apart = Prices { reasoning_price_micros: 40_000_000, ..long_context() };
    assert_eq!(bound_micros(0, 1_000, &apart, RATIO_ONE_PPM), 40_000);
    // Without a tier only the base rates count.
    let untiered = Prices { tier_threshold_tokens: 0, cache_write_1h_price_micros: 0, ..long_context() };
    assert_eq!(bound_micros(1_000, 1_000, &untiered, RATIO_ONE_PPM), 3_750 + 15_000);
    let request = Prices { request_price_micros: 7, ..untiered };
    assert_eq!(bound_micros(0, 0, &request, RATIO_ONE_PPM), 7);
}

/// Any price: each 0 (fallback) a quarter of the time.
fn price() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), 1i64..100_000_000, 0i64..100_000_000, 1i64..1_000]
}

fn prices() -> impl Strategy<Value = Prices> {
    let audio = (price(), price(), price());
    (
        (price(), price(), price(), price()),
        (0i64..400_000, price(), price(), price()),
        (price(), price(), price()),
        audio,
    )
        .prop_map(
            |((input, output, cached, request), (threshold, t_in, t_out, t_cached), (w5, w1, reasoning), audio)| {
                Prices {
                    input_price_micros: input,
                    output_price_micros: output,
                    cached_price_micros: cached,
                    request_price_micros: request,
                    tier_threshold_tokens: threshold,
                    tier_input_price_micros: t_in,
                    tier_output_price_micros: t_out,
                    tier_cached_price_micros: t_cached,
                    cache_write_5m_price_micros: w5,
                    cache_write_1h_price_micros: w1,
                    reasoning_price_micros: reasoning,
                    audio_input_price_micros: audio.0,
                    audio_output_price_micros: audio.1,
                    audio_cached_price_micros: audio.2,
                    ..Prices::default()
                }
            },
        )
}

proptest! {
    #[test]
    fn no_usage_within_the_bound_costs_more_than_the_bound(
        prices in prices(),
        prompt_bound in 0i64..1_000_000,
        completion_bound in 0i64..200_000,
        shares in (0u32..=100, 0u32..=100, 0u32..=100, 0u32..=100, 0u32..=100, 0u32..=100),
        ratio in 0i64..5_000_000,
    ) {
        let (p, c, r, w5, w1, reasoning) = shares;
        let part = |whole: i64, pct: u32| whole * i64::from(pct) / 100;
        let prompt = part(prompt_bound, p);
        let completion = part(completion_bound, c);
        let usage = Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: part(prompt, r),
            cache_write_5m_tokens: part(prompt, w5),
            cache_write_1h_tokens: part(prompt, w1),
            reasoning_tokens: part(completion, reasoning),
            // Audio parts overlap the others as realtime reports them.
            audio_prompt_tokens: part(prompt, 100 - p / 2),
            audio_cached_tokens: part(prompt, r / 2),
            audio_completion_tokens: part(completion, 100 - c / 2),
        };
        let cost = cost_micros(&usage, &prices, ratio);
        let bound = bound_micros(prompt_bound, completion_bound, &prices, ratio);
        prop_assert!(cost <= bound, "cost {cost} above bound {bound} for {usage:?}");
    }
}
