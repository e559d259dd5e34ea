//! US dollars and price ratios as decimal text, to and from integers with six
//! decimal places: micro-USD and parts per million. Text is parsed digit by
//! digit, never through a float, so "0.1" is exactly 100000; more than six
//! decimals is an error rather than a silent rounding.

use crate::MICROS_PER_USD;

/// Why a dollar amount or a ratio did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("invalid amount {text:?}: expected US dollars such as 5, 0.25 or 1.000001")]
    Amount { text: String },
    #[error("invalid amount {text:?}: at most 6 decimal places (1 micro-USD)")]
    AmountTooPrecise { text: String },
    #[error("invalid amount {text:?}: too large")]
    AmountTooLarge { text: String },
    #[error("invalid amount {text:?}: must not be negative")]
    NegativeAmount { text: String },
    #[error("invalid ratio {text:?}: expected a number such as 1 or 0.5")]
    Ratio { text: String },
    #[error("invalid ratio {text:?}: at most 6 decimal places (1 part per million)")]
    RatioTooPrecise { text: String },
    #[error("invalid ratio {text:?}: too large")]
    RatioTooLarge { text: String },
}

/// How a decimal failed, before it is named an amount or a ratio.
enum Malformed {
    Syntax,
    TooPrecise,
    TooLarge,
}

/// Parses a signed decimal amount of US dollars ("5", "-2.5", ".25", " 7 ")
/// into micro-USD. Fails on anything but digits with one optional point and
/// an optional sign, on more than six decimals and on amounts that do not fit
/// an `i64`.
pub fn parse_usd(text: &str) -> Result<i64, ParseError> {
    parse_millionths(text).map_err(|malformed| {
        let text = text.to_owned();
        match malformed {
            Malformed::Syntax => ParseError::Amount { text },
            Malformed::TooPrecise => ParseError::AmountTooPrecise { text },
            Malformed::TooLarge => ParseError::AmountTooLarge { text },
        }
    })
}

/// [`parse_usd`] that also refuses negative amounts (balances, quotas, prices).
pub fn parse_usd_non_negative(text: &str) -> Result<i64, ParseError> {
    match parse_usd(text)? {
        micros if micros < 0 => Err(ParseError::NegativeAmount { text: text.to_owned() }),
        micros => Ok(micros),
    }
}

/// Formats micro-USD with six decimals and no currency sign: `-1.500000`.
pub fn format_usd(micros: i64) -> String {
    // Pieces pushed rather than `format!`: every answer's cost header is
    // written with it.
    let (sign, whole, fraction) = split(micros);
    let mut digits = itoa::Buffer::new();
    let mut text = String::with_capacity(28);
    text.push_str(sign);
    text.push_str(digits.format(whole));
    text.push('.');
    let fraction = digits.format(fraction);
    text.push_str(&"000000"[fraction.len()..]);
    text.push_str(fraction);
    text
}

/// Formats micro-USD with the fewest decimals that keep it exact, but at
/// least one: `5.0`, `0.1`, `-2.5`, `0.000001`. Never scientific notation.
pub fn format_usd_short(micros: i64) -> String {
    let (sign, whole, fraction) = split(micros);
    let fraction = format!("{fraction:06}");
    let fraction = match fraction.trim_end_matches('0') {
        "" => "0",
        digits => digits,
    };
    format!("{sign}{whole}.{fraction}")
}

/// Parses a non-negative decimal price ratio ("1", "0.5", "1.25") into parts
/// per million. Fails on negative ratios, exponents and anything but digits
/// with one optional point and sign, on more than six decimals and on ratios
/// that do not fit an `i64`.
pub fn parse_ratio_ppm(text: &str) -> Result<i64, ParseError> {
    let owned = || text.to_owned();
    match parse_millionths(text) {
        Ok(ppm) if ppm < 0 => Err(ParseError::Ratio { text: owned() }),
        Ok(ppm) => Ok(ppm),
        Err(Malformed::Syntax) => Err(ParseError::Ratio { text: owned() }),
        Err(Malformed::TooPrecise) => Err(ParseError::RatioTooPrecise { text: owned() }),
        Err(Malformed::TooLarge) => Err(ParseError::RatioTooLarge { text: owned() }),
    }
}

/// Formats a ratio in parts per million with the fewest decimals that keep
/// it exact: `1`, `1.5`, `0.000001`. Never scientific notation.
pub fn format_ratio(ppm: i64) -> String {
    let (sign, whole, fraction) = split(ppm);
    match format!("{fraction:06}").trim_end_matches('0') {
        "" => format!("{sign}{whole}"),
        digits => format!("{sign}{whole}.{digits}"),
    }
}

/// `[+-]digits[.digits]` (either side of the point may be empty, not both)
/// as an integer count of millionths.
fn parse_millionths(text: &str) -> Result<i64, Malformed> {
    let trimmed = text.trim();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(Malformed::Syntax);
    }
    if !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(Malformed::Syntax);
    }
    if fraction.len() > 6 {
        return Err(Malformed::TooPrecise);
    }
    let mut magnitude: i64 = 0;
    for digit in whole.bytes().chain(fraction.bytes()).chain(std::iter::repeat_n(b'0', 6 - fraction.len())) {
        magnitude = magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(digit - b'0')))
            .ok_or(Malformed::TooLarge)?;
    }
    Ok(if negative { -magnitude } else { magnitude })
}

/// Sign, whole units and millionths of `value`.
fn split(value: i64) -> (&'static str, u64, u64) {
    let sign = if value < 0 { "-" } else { "" };
    let abs = value.unsigned_abs();
    let per = MICROS_PER_USD.unsigned_abs();
    (sign, abs / per, abs % per)
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
        assert_eq!(parse_usd("007.50"), Ok(7_500_000));
        assert_eq!(parse_usd("1.000000"), Ok(1_000_000), "six zeros are not too precise");
    }

    #[test]
    fn negative_amounts_parse_for_deductions_only() {
        assert_eq!(parse_usd("-2.5"), Ok(-2_500_000));
        assert_eq!(parse_usd("-0.000001"), Ok(-1));
        assert_eq!(parse_usd("-0"), Ok(0));
        let err = parse_usd_non_negative("-1").unwrap_err();
        assert_eq!(err.to_string(), r#"invalid amount "-1": must not be negative"#);
        assert_eq!(parse_usd_non_negative("1"), Ok(1_000_000));
        assert_eq!(parse_usd_non_negative("-0"), Ok(0));
    }

    #[test]
    fn more_than_six_decimals_is_refused() {
        let err = parse_usd("0.0000001").unwrap_err();
        assert_eq!(err.to_string(), r#"invalid amount "0.0000001": at most 6 decimal places (1 micro-USD)"#);
        assert!(parse_usd("1.0000000").is_err(), "a seventh decimal is refused even when 0");
    }

    #[test]
    fn malformed_amounts_are_refused() {
        for text in ["", " ", ".", "-", "+", "-.", "abc", "1.2.3", "1,5", "1e3", "$5", "- 1", "--1", "+-1", "0x10", "½"]
        {
            assert!(matches!(parse_usd(text), Err(ParseError::Amount { .. })), "{text:?} should be refused");
        }
        let err = parse_usd("abc").unwrap_err();
        assert_eq!(err.to_string(), r#"invalid amount "abc": expected US dollars such as 5, 0.25 or 1.000001"#);
    }

    #[test]
    fn overflowing_amounts_are_refused() {
        assert!(matches!(parse_usd("9223372036854775807"), Err(ParseError::AmountTooLarge { .. })));
        assert!(parse_usd("9223372036855").is_err());
        assert!(parse_usd("9223372036854.775808").is_err());
        assert!(parse_usd("99999999999999999999999999").is_err());
        assert_eq!(parse_usd("9223372036854"), Ok(9_223_372_036_854_000_000));
        assert_eq!(parse_usd("9223372036854.775807"), Ok(i64::MAX));
        assert_eq!(parse_usd("-9223372036854.775807"), Ok(-i64::MAX));
    }

    #[test]
    fn micros_format_with_six_decimals() {
        assert_eq!(format_usd(0), "0.000000");
        assert_eq!(format_usd(1), "0.000001");
        assert_eq!(format_usd(100_000), "0.100000");
        assert_eq!(format_usd(-1_500_000), "-1.500000");
        assert_eq!(format_usd(i64::MAX), "9223372036854.775807");
        assert_eq!(format_usd(i64::MIN), "-9223372036854.775808");
    }

    #[test]
    fn short_format_keeps_one_decimal_and_never_uses_exponents() {
        assert_eq!(format_usd_short(0), "0.0");
        assert_eq!(format_usd_short(5_000_000), "5.0");
        assert_eq!(format_usd_short(5_500_000), "5.5");
        assert_eq!(format_usd_short(100_000), "0.1");
        assert_eq!(format_usd_short(1), "0.000001");
        assert_eq!(format_usd_short(-2_500_000), "-2.5");
        assert_eq!(format_usd_short(i64::MIN), "-9223372036854.775808");
    }

    #[test]
    fn formatted_amounts_parse_back() {
        for micros in [0, 1, -1, 10, 999_999, 1_000_000, 1_234_567, -7_000_001, i64::MAX, i64::MIN + 1] {
            assert_eq!(parse_usd(&format_usd(micros)), Ok(micros));
            assert_eq!(parse_usd(&format_usd_short(micros)), Ok(micros));
        }
    }

    #[test]
    fn ratios_parse_into_parts_per_million() {
        assert_eq!(parse_ratio_ppm("1"), Ok(1_000_000));
        assert_eq!(parse_ratio_ppm("2"), Ok(2_000_000));
        assert_eq!(parse_ratio_ppm("0.5"), Ok(500_000));
        assert_eq!(parse_ratio_ppm("1.25"), Ok(1_250_000));
        assert_eq!(parse_ratio_ppm("0"), Ok(0));
        assert_eq!(parse_ratio_ppm(".000001"), Ok(1));
        assert_eq!(parse_ratio_ppm(" 3 "), Ok(3_000_000));
        assert_eq!(parse_ratio_ppm("1000"), Ok(1_000_000_000));
        assert_eq!(parse_ratio_ppm("+1"), Ok(1_000_000));
        assert_eq!(parse_ratio_ppm("-0"), Ok(0));
    }

    #[test]
    fn bad_ratios_are_refused() {
        for text in ["-1", "-0.000001", "NaN", "inf", "x", "", ".", "1e3", "1,5", "0.5x"] {
            assert!(matches!(parse_ratio_ppm(text), Err(ParseError::Ratio { .. })), "{text:?} should be refused");
        }
        assert_eq!(
            parse_ratio_ppm("-1").unwrap_err().to_string(),
            r#"invalid ratio "-1": expected a number such as 1 or 0.5"#
        );
        assert!(matches!(parse_ratio_ppm("0.0000001"), Err(ParseError::RatioTooPrecise { .. })));
        assert!(matches!(parse_ratio_ppm("10000000000000"), Err(ParseError::RatioTooLarge { .. })));
    }

    #[test]
    fn ratios_format_without_trailing_zeros() {
        assert_eq!(format_ratio(1_000_000), "1");
        assert_eq!(format_ratio(2_000_000), "2");
        assert_eq!(format_ratio(1_500_000), "1.5");
        assert_eq!(format_ratio(1), "0.000001");
        assert_eq!(format_ratio(0), "0");
        assert_eq!(format_ratio(-500_000), "-0.5");
        for ppm in [0, 1, 10, 500_000, 1_000_000, 1_234_567, i64::MAX] {
            assert_eq!(parse_ratio_ppm(&format_ratio(ppm)), Ok(ppm));
        }
    }
}
