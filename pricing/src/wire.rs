//! The group ratio as gateway.v1 carries it: a `double`. These two functions
//! are the only floats in this crate, and they exist because of the wire:
//! every plane turns the double into parts per million here, on arrival, and
//! prices with the integer from then on.

/// The ratio in parts per million, `round(ratio * 1e6)`, saturating; `None`
/// for a NaN, an infinity or a negative ratio. Exact for every ratio that
/// [`ratio`] produced.
pub fn ratio_ppm(ratio: f64) -> Option<i64> {
    if !ratio.is_finite() || ratio < 0.0 {
        return None;
    }
    // `as` saturates, so an absurd ratio is i64::MAX ppm rather than a wrap.
    Some((ratio * 1e6).round() as i64)
}

/// The double nearest to `ppm / 1e6`, for the wire: the same double that
/// parsing the decimal text of the ratio gives, so "0.1" and 100000 ppm send
/// the same bits.
pub fn ratio(ppm: i64) -> f64 {
    // Exact for |ppm| < 2^53; the division is correctly rounded.
    ppm as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_ratios_round_to_the_nearest_part_per_million() {
        assert_eq!(ratio_ppm(1.0), Some(1_000_000));
        assert_eq!(ratio_ppm(1.5), Some(1_500_000));
        assert_eq!(ratio_ppm(0.1), Some(100_000));
        assert_eq!(ratio_ppm(0.0), Some(0));
        assert_eq!(ratio_ppm(-0.0), Some(0));
        assert_eq!(ratio_ppm(0.0000004), Some(0));
        assert_eq!(ratio_ppm(0.0000006), Some(1));
        assert_eq!(ratio_ppm(1e300), Some(i64::MAX));
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(ratio_ppm(bad), None, "{bad}");
        }
    }

    #[test]
    fn ppm_survive_the_round_trip_through_the_wire() {
        for ppm in [0, 1, 7, 100_000, 333_333, 1_000_000, 1_500_000, 1_000_000_000, 123_456_789_012] {
            assert_eq!(ratio_ppm(ratio(ppm)), Some(ppm));
        }
        assert_eq!(ratio(100_000), 0.1);
        assert_eq!(ratio(1_500_000), 1.5);
    }
}
