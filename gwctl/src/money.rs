//! US dollars on the command line and micro-USD on the wire, read and
//! written by `gw-pricing` so gwctl shows amounts exactly as the planes
//! charge them: "0.1" is exactly 100000 µ$, and more than six decimals is an
//! error rather than a silent rounding.

use serde_json::{Number, Value};

pub use gw_pricing::{format_usd, parse_usd, parse_usd_non_negative};

/// Micro-USD as a JSON number of US dollars (`5_500_000` → `5.5`,
/// `5_000_000` → `5.0`), read from its exact decimal text. The number is
/// exact below 2^53 µ$ (about 9 billion USD), as JSON readers hold it.
pub fn usd_number(micros: i64) -> Value {
    let text = gw_pricing::format_usd_short(micros);
    match text.parse::<Number>() {
        Ok(number) => Value::Number(number),
        // Unreachable (the text is digits and a point); keep it exact anyway.
        Err(_) => Value::String(text),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn usd_numbers_keep_their_decimal_value() {
        assert_eq!(usd_number(5_500_000), 5.5);
        assert_eq!(usd_number(100_000), 0.1);
        assert_eq!(usd_number(100_100_000), 100.1);
        assert_eq!(usd_number(-2_500_000), -2.5);
        assert_eq!(usd_number(0).to_string(), "0.0");
        assert_eq!(usd_number(5_000_000).to_string(), "5.0", "whole dollars stay a float, as before");
        assert!(usd_number(1).is_f64());
    }

    #[test]
    fn errors_name_the_amount_for_clap() {
        let err = parse_usd_non_negative("-1").unwrap_err();
        assert_eq!(err.to_string(), r#"invalid amount "-1": must not be negative"#);
        assert_eq!(parse_usd("0.1"), Ok(100_000));
        assert_eq!(format_usd(-1_500_000), "-1.500000");
    }
}
