//! What batches pay: a share of the regular price of their lines, the
//! model's `batch_price_ppm` (0 is the providers' own batch discount, half).

/// The share of the regular price a model with `batch_price_ppm` 0 bills
/// batch lines at: half, what OpenAI and Anthropic charge for batches.
pub const DEFAULT_BATCH_PRICE_PPM: i64 = 500_000;

/// The share in millionths that `batch_price_ppm` stands for.
pub fn batch_share_ppm(batch_price_ppm: i64) -> i64 {
    if batch_price_ppm <= 0 { DEFAULT_BATCH_PRICE_PPM } else { batch_price_ppm }
}

/// `regular_micros` (what the lines cost at the regular prices) at the
/// batch share, rounded up; saturating.
pub fn batch_cost_micros(regular_micros: i64, batch_price_ppm: i64) -> i64 {
    let scaled = i128::from(regular_micros.max(0)) * i128::from(batch_share_ppm(batch_price_ppm));
    let micros = (scaled + 999_999).div_euclid(1_000_000);
    i64::try_from(micros).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_half_and_rounding_is_up() {
        assert_eq!(batch_cost_micros(1_000, 0), 500);
        assert_eq!(batch_cost_micros(1_001, 0), 501, "half a micro-USD rounds up");
        assert_eq!(batch_cost_micros(1_000, 250_000), 250);
        assert_eq!(batch_cost_micros(1_000, 1_000_000), 1_000, "a share of one is the regular price");
        assert_eq!(batch_cost_micros(-5, 0), 0);
        assert_eq!(batch_cost_micros(i64::MAX, 2_000_000), i64::MAX, "saturates");
    }
}
