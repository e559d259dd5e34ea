//! US dollars on the command line and micro-USD on the wire, read and
//! written by `gw-pricing` so gwctl shows amounts exactly as the planes
//! charge them: "0.1" is exactly 100000 µ$, and more than six decimals is an
//! error rather than a silent rounding.

pub use gw_pricing::{format_usd, parse_usd, parse_usd_non_negative};

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_amount_for_clap() {
        let err = parse_usd_non_negative("-1").unwrap_err();
        assert_eq!(err.to_string(), r#"invalid amount "-1": must not be negative"#);
        assert_eq!(parse_usd("0.1"), Ok(100_000));
        assert_eq!(format_usd(-1_500_000), "-1.500000");
    }
}
