//! US dollars on the command line and micro-USD on the wire.
//!
//! Amounts are parsed from their decimal text, never through a float, so
//! "0.1" is exactly 100000 µ$; more than six decimals is an error rather than a
//! silent rounding.

/// Micro-USD in one US dollar.
pub const MICROS_PER_USD: i64 = 1_000_000;

/// Parses a signed decimal amount of US dollars ("5", "-2.5", ".25") into
/// micro-USD. Fails on anything but digits with one optional point, on more
/// than six decimals and on amounts that do not fit an `i64`.
pub fn parse_usd(text: &str) -> Result<i64, String> {
    let trimmed = text.trim();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let invalid = || format!("invalid amount {text:?}: expected US dollars such as 5, 0.25 or 1.000001");
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(invalid());
    }
    if !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    if fraction.len() > 6 {
        return Err(format!("invalid amount {text:?}: at most 6 decimal places (1 micro-USD)"));
    }
    let too_large = || format!("invalid amount {text:?}: too large");
    let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let fraction: i64 = if fraction.is_empty() {
        0
    } else {
        // Right-pad to six digits: ".5" is 500000 µ$.
        format!("{fraction:0<6}").parse().map_err(|_| invalid())?
    };
    let micros = whole.checked_mul(MICROS_PER_USD).and_then(|m| m.checked_add(fraction)).ok_or_else(too_large)?;
    Ok(if negative { -micros } else { micros })
}

/// [`parse_usd`] that also refuses negative amounts (balances, quotas, prices).
pub fn parse_usd_non_negative(text: &str) -> Result<i64, String> {
    let micros = parse_usd(text)?;
    if micros < 0 {
        return Err(format!("invalid amount {text:?}: must not be negative"));
    }
    Ok(micros)
}

/// Formats micro-USD with six decimals and no currency sign: `-1.500000`.
pub fn format_usd(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    let per = MICROS_PER_USD.unsigned_abs();
    format!("{sign}{}.{:06}", abs / per, abs % per)
}

/// Micro-USD as a JSON-friendly number of US dollars (`5_500_000` → `5.5`).
pub fn usd_number(micros: i64) -> f64 {
    // Exact for every amount below 2^53 µ$ (about 9 billion USD); the division
    // is correctly rounded, so short decimals print back as typed.
    micros as f64 / MICROS_PER_USD as f64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn decimal_amounts_parse_exactly() {
        assert_eq!(parse_usd("0.1"), Ok(100_000));
        assert_eq!(parse_usd("5.5"), Ok(5_500_000));
        assert_eq!(parse_usd("100"), Ok(100_000_000));
        assert_eq!(parse_usd(".25"), Ok(250_000));
        assert_eq!(parse_usd("3."), Ok(3_000_000));
        assert_eq!(parse_usd("0.000001"), Ok(1));
        assert_eq!(parse_usd("+2"), Ok(2_000_000));
        assert_eq!(parse_usd(" 7 "), Ok(7_000_000));
        assert_eq!(parse_usd("0"), Ok(0));
    }

    #[test]
    fn negative_amounts_parse_for_deductions_only() {
        assert_eq!(parse_usd("-2.5"), Ok(-2_500_000));
        assert_eq!(parse_usd("-0.000001"), Ok(-1));
        assert!(parse_usd_non_negative("-1").is_err());
        assert_eq!(parse_usd_non_negative("1"), Ok(1_000_000));
    }

    #[test]
    fn more_than_six_decimals_is_refused() {
        let err = parse_usd("0.0000001").unwrap_err();
        assert!(err.contains("at most 6 decimal places"), "{err}");
    }

    #[test]
    fn malformed_amounts_are_refused() {
        for text in ["", ".", "-", "abc", "1.2.3", "1,5", "1e3", "$5", "- 1", "--1", "0x10"] {
            assert!(parse_usd(text).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn overflowing_amounts_are_refused() {
        assert!(parse_usd("9223372036854775807").is_err());
        assert!(parse_usd("9223372036855").is_err());
        assert_eq!(parse_usd("9223372036854"), Ok(9_223_372_036_854_000_000));
    }

    #[test]
    fn micros_format_with_six_decimals() {
        assert_eq!(format_usd(0), "0.000000");
        assert_eq!(format_usd(100_000), "0.100000");
        assert_eq!(format_usd(-1_500_000), "-1.500000");
        assert_eq!(format_usd(i64::MIN), "-9223372036854.775808");
        assert_eq!(usd_number(5_500_000), 5.5);
        assert_eq!(usd_number(100_000), 0.1);
    }
}
