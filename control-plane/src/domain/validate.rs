//! The admin API's input rules: what a name, a list, a status, a price, a
//! rate limit, a channel type, a base URL or an IP allowlist must look like
//! (a channel kind's settings and keys: `domain::channel_kind`).
//! Each check fails with an `Invalid` naming the field (the API answers
//! it as InvalidArgument), never a store error.

use std::net::IpAddr;

use crate::domain::{Model, RateLimit};

/// Input that breaks one of the rules; the text names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Model categories the catalogue accepts.
pub const CATEGORIES: [&str; 11] = [
    "chat",
    "completion",
    "embedding",
    "image",
    "audio",
    "speech",
    "moderation",
    "video",
    "responses",
    "rerank",
    "realtime",
];
/// Channel provider types the data planes can speak (their settings'
/// rules are in `domain::channel_kind`).
pub const CHANNEL_TYPES: [&str; 6] = crate::domain::channel_kind::KINDS;

/// `value` trimmed; `Invalid` when that leaves nothing.
pub fn required(field: &str, value: String) -> Result<String, Invalid> {
    let value = value.trim().to_owned();
    if value.is_empty() { Err(Invalid(format!("{field} is required"))) } else { Ok(value) }
}

/// Trims, drops empty entries and duplicates, keeps order.
pub fn clean_list(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let item = item.trim().to_owned();
        if !item.is_empty() && !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// `status` when it is one of `allowed`.
pub fn status_value(status: &str, allowed: &[&str]) -> Result<String, Invalid> {
    if allowed.contains(&status) {
        Ok(status.to_owned())
    } else {
        Err(Invalid(format!("status must be one of {}", allowed.join(", "))))
    }
}

/// A group's price ratio: 0 to 1000.
pub fn check_ratio(ratio: f64) -> Result<(), Invalid> {
    if (0.0..=1000.0).contains(&ratio) { Ok(()) } else { Err(Invalid("ratio must be between 0 and 1000".into())) }
}

/// A limit with a window allows at least one request in it.
pub fn check_rate_limit(limit: &RateLimit) -> Result<(), Invalid> {
    if limit.window_minutes > 0 && limit.max_requests == 0 {
        return Err(Invalid("a rate limit needs at least one request per window".into()));
    }
    Ok(())
}

/// One of `CHANNEL_TYPES`.
pub fn check_channel_type(kind: &str) -> Result<(), Invalid> {
    crate::domain::channel_kind::check_kind(kind)
}

/// `http://` or `https://` and a host.
pub fn check_base_url(url: &str) -> Result<(), Invalid> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(Invalid("base URL must start with http:// or https:// and name a host".into())),
    }
}

/// A known category and no negative price.
pub fn check_model(model: &Model) -> Result<(), Invalid> {
    if !CATEGORIES.contains(&model.category.as_str()) {
        return Err(Invalid(format!("category must be one of {}", CATEGORIES.join(", "))));
    }
    let prices = [
        model.input_price_micros,
        model.output_price_micros,
        model.cached_price_micros,
        model.request_price_micros,
        model.second_price_micros,
        model.image_price_micros,
        model.tier_input_price_micros,
        model.tier_output_price_micros,
        model.tier_cached_price_micros,
        model.cache_write_5m_price_micros,
        model.cache_write_1h_price_micros,
        model.reasoning_price_micros,
        model.audio_input_price_micros,
        model.audio_output_price_micros,
        model.audio_cached_price_micros,
        model.search_unit_price_micros,
    ];
    if prices.iter().any(|p| *p < 0) {
        return Err(Invalid("prices must not be negative".into()));
    }
    if model.tier_threshold_tokens < 0 {
        return Err(Invalid("tier threshold must not be negative".into()));
    }
    if !(0..=gw_pricing::RATIO_ONE_PPM).contains(&model.batch_price_ppm) {
        return Err(Invalid("batch price share must be between 0 and 1000000 ppm (0: half)".into()));
    }
    Ok(())
}

/// Each entry is an IPv4/IPv6 address or CIDR.
pub fn check_ip_list(entries: &[String]) -> Result<(), Invalid> {
    for entry in entries {
        let (addr, bits) = match entry.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (entry.as_str(), None),
        };
        let valid = match (addr.parse::<IpAddr>(), bits.map(str::parse::<u8>)) {
            (Ok(_), None) => true,
            (Ok(IpAddr::V4(_)), Some(Ok(b))) => b <= 32,
            (Ok(IpAddr::V6(_)), Some(Ok(b))) => b <= 128,
            _ => false,
        };
        if !valid {
            return Err(Invalid(format!("{entry:?} is not an IP address or CIDR")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_lists_accept_addresses_and_cidrs_only() {
        let ok = ["10.0.0.0/8", "::1", "2001:db8::/32", "127.0.0.1"].map(String::from);
        assert!(check_ip_list(&ok).is_ok());
        for bad in ["10.0.0.0/33", "::/129", "localhost", "1.2.3"] {
            assert!(check_ip_list(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_are_trimmed_and_deduplicated() {
        let list = clean_list(vec![" a".into(), "b".into(), "".into(), "a".into()]);
        assert_eq!(list, ["a", "b"]);
    }
}
