//! Parsers for the flag values shared by several resources: comma lists,
//! rate limits (`60/1`), model maps (`a=b,c=d`), expiry times and statuses.
//!
//! Each parser returns a `String` error so clap reports it against the flag.

use std::collections::HashMap;
use std::net::IpAddr;

use gw_proto::pb;

/// A comma-separated list flag (`--groups default,vip`). Blank items are
/// dropped and repeats removed, so `--models ""` is the empty list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CsvList(pub Vec<String>);

/// The paging flags of every list.
#[derive(Debug, Clone, clap::Args)]
pub struct Page {
    /// At most this many items; when more exist, the continue token is
    /// printed (on stderr for tables). 0 lists everything.
    #[arg(long, default_value_t = 500)]
    pub limit: u32,
    /// Token printed by the previous page, to list the next.
    #[arg(long = "continue", value_name = "TOKEN")]
    pub continue_token: Option<String>,
}

/// The time-range flags of the logs (usage records, the audit log).
#[derive(Debug, Clone, clap::Args)]
pub struct Since {
    /// Only entries at or after this time: RFC 3339, a date, or a span ago (24h, 7d).
    #[arg(long, value_parser = parse_time)]
    pub since: Option<i64>,
    /// Only entries before this time: RFC 3339, a date, or a span ago.
    #[arg(long, value_parser = parse_time)]
    pub until: Option<i64>,
}

/// `enabled` or `disabled`, as the control plane spells statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Status {
    Enabled,
    Disabled,
}

// === impl Since ===

impl Since {
    /// `(from, to)` in Unix seconds, 0 for an open end; fails when the range
    /// is empty.
    pub fn range(&self) -> anyhow::Result<(i64, i64)> {
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            anyhow::bail!("--since must be before --until");
        }
        Ok((self.since.unwrap_or(0), self.until.unwrap_or(0)))
    }
}

// === impl Page ===

impl Page {
    /// A list request for this page, with no filter.
    pub fn request(&self) -> pb::ListRequest {
        pb::ListRequest {
            page_size: self.limit,
            page_token: self.continue_token.clone().unwrap_or_default(),
            ..Default::default()
        }
    }
}

// === impl CsvList ===

impl std::str::FromStr for CsvList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut items: Vec<String> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if !items.iter().any(|seen| seen == item) {
                items.push(item.to_string());
            }
        }
        Ok(CsvList(items))
    }
}

impl From<CsvList> for Vec<String> {
    fn from(list: CsvList) -> Vec<String> {
        list.0
    }
}

// === impl Status ===

impl Status {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Enabled => "enabled",
            Status::Disabled => "disabled",
        }
    }
}

/// Parses `MAX/MINUTES` ("60/1": 60 requests per minute). `off`, `none` and
/// `0` give the zero limit, which disables rate limiting.
pub fn parse_rate_limit(text: &str) -> Result<pb::RateLimit, String> {
    let text = text.trim();
    if matches!(text, "off" | "none" | "0") {
        return Ok(pb::RateLimit::default());
    }
    let invalid = || format!("invalid rate limit {text:?}: expected MAX/MINUTES such as 60/1, or off");
    let (max, window) = text.split_once('/').ok_or_else(invalid)?;
    let max_requests: u32 = max.trim().parse().map_err(|_| invalid())?;
    let window_minutes: u32 = window.trim().parse().map_err(|_| invalid())?;
    if max_requests == 0 || window_minutes == 0 {
        return Err(format!(
            "invalid rate limit {text:?}: requests and minutes must be at least 1 (use off to disable)"
        ));
    }
    Ok(pb::RateLimit { window_minutes, max_requests })
}

/// Parses a count limit (tokens per minute, requests in flight): a whole
/// number, where `off`, `none` and `0` give 0, no limit.
pub fn parse_count_limit(text: &str) -> Result<u32, String> {
    let text = text.trim();
    if matches!(text, "off" | "none") {
        return Ok(0);
    }
    text.replace('_', "")
        .parse()
        .map_err(|_| format!("invalid limit {text:?}: expected a whole number up to {}, or off", u32::MAX))
}

/// Parses a model map, `requested=upstream` pairs separated by commas. The
/// empty string is the empty map (clears a channel's mapping).
pub fn parse_model_map(text: &str) -> Result<HashMap<String, String>, String> {
    let mut map = HashMap::new();
    for pair in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (from, to) = pair
            .split_once('=')
            .map(|(from, to)| (from.trim(), to.trim()))
            .filter(|(from, to)| !from.is_empty() && !to.is_empty())
            .ok_or_else(|| {
                format!("invalid model mapping {pair:?}: expected REQUESTED=UPSTREAM such as gpt-4o=gpt-4o-2024-08-06")
            })?;
        if map.insert(from.to_string(), to.to_string()).is_some() {
            return Err(format!("model {from:?} is mapped twice"));
        }
    }
    Ok(map)
}

/// Parses a time filter: RFC 3339 (`2027-01-01T00:00:00Z`), a date
/// (`2027-01-01`, midnight UTC), or a span back from now (`30m`, `24h`,
/// `7d`). Returns Unix seconds.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let invalid = || {
        format!(
            "invalid time {text:?}: expected RFC 3339 (2027-01-01T00:00:00Z), a date (2027-01-01) or a span ago (30m, 24h, 7d)"
        )
    };
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.timestamp());
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return date.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp()).ok_or_else(invalid);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(invalid()),
    };
    Ok(chrono::Utc::now().timestamp() - number.saturating_mul(seconds))
}

/// Parses an RFC 3339 time into Unix seconds; `never` (or `0`) is 0, "no
/// expiry".
pub fn parse_expiry(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if matches!(text, "never" | "0") {
        return Ok(0);
    }
    let time = chrono::DateTime::parse_from_rfc3339(text).map_err(|err| {
        format!("invalid time {text:?}: {err}; expected RFC 3339 such as 2027-01-01T00:00:00Z, or never")
    })?;
    let seconds = time.timestamp();
    if seconds <= 0 {
        return Err(format!("invalid time {text:?}: must be after 1970"));
    }
    Ok(seconds)
}

/// Parses a list of source addresses, each an IP address or a CIDR block.
/// The control plane validates again; this catches typos before the call.
pub fn parse_ip_list(text: &str) -> Result<CsvList, String> {
    let list: CsvList = text.parse()?;
    for item in &list.0 {
        let (addr, prefix) = match item.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (item.as_str(), None),
        };
        let invalid = || format!("invalid address {item:?}: expected an IP or CIDR such as 10.0.0.0/8 or ::1");
        let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
        if let Some(prefix) = prefix {
            let bits: u8 = prefix.parse().map_err(|_| invalid())?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            if bits > max {
                return Err(invalid());
            }
        }
    }
    Ok(list)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn list(text: &str) -> Vec<String> {
        text.parse::<CsvList>().unwrap().0
    }

    #[test]
    fn comma_lists_trim_and_drop_blanks_and_repeats() {
        assert_eq!(list("default,vip"), ["default", "vip"]);
        assert_eq!(list(" a , b,,a "), ["a", "b"]);
        assert!(list("").is_empty());
    }

    #[test]
    fn count_limits_read_whole_numbers_or_off() {
        assert_eq!(parse_count_limit("90000").unwrap(), 90_000);
        assert_eq!(parse_count_limit("90_000").unwrap(), 90_000);
        assert_eq!(parse_count_limit("off").unwrap(), 0);
        assert_eq!(parse_count_limit("0").unwrap(), 0);
        for text in ["-1", "1.5", "lots", "99999999999"] {
            assert!(parse_count_limit(text).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn rate_limit_reads_max_requests_over_window_minutes() {
        let limit = parse_rate_limit("60/1").unwrap();
        assert_eq!((limit.max_requests, limit.window_minutes), (60, 1));
        let limit = parse_rate_limit("1000/ 60").unwrap();
        assert_eq!((limit.max_requests, limit.window_minutes), (1000, 60));
        assert_eq!(parse_rate_limit("off").unwrap(), pb::RateLimit::default());
    }

    #[test]
    fn malformed_rate_limits_are_refused() {
        for text in ["60", "60/", "/1", "a/1", "60/0", "0/5", "-1/1", "1/2/3"] {
            assert!(parse_rate_limit(text).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn model_map_reads_comma_separated_pairs() {
        let map = parse_model_map("gpt-4o=gpt-4o-2024-08-06, mini = gpt-4o-mini").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map["gpt-4o"], "gpt-4o-2024-08-06");
        assert_eq!(map["mini"], "gpt-4o-mini");
        assert!(parse_model_map("").unwrap().is_empty());
    }

    #[test]
    fn malformed_model_maps_are_refused() {
        for text in ["gpt-4o", "=x", "x=", "a=b,a=c"] {
            assert!(parse_model_map(text).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn expiry_parses_rfc3339_to_unix_seconds() {
        assert_eq!(parse_expiry("2027-01-01T00:00:00Z"), Ok(1_798_761_600));
        assert_eq!(parse_expiry("2027-01-01T01:00:00+01:00"), Ok(1_798_761_600));
        assert_eq!(parse_expiry("never"), Ok(0));
        assert!(parse_expiry("2027-01-01").is_err());
        assert!(parse_expiry("tomorrow").is_err());
    }

    #[test]
    fn time_filters_read_instants_dates_and_spans_ago() {
        assert_eq!(parse_time("2027-01-01T00:00:00Z"), Ok(1_798_761_600));
        assert_eq!(parse_time("2027-01-01"), Ok(1_798_761_600));
        let now = chrono::Utc::now().timestamp();
        let day_ago = parse_time("1d").unwrap();
        assert!((now - 86_400 - day_ago).abs() <= 2, "{day_ago}");
        for bad in ["yesterday", "5", "5w", "2027-13-01"] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ip_lists_accept_addresses_and_cidrs_only() {
        assert_eq!(parse_ip_list("10.0.0.0/8,::1").unwrap().0, ["10.0.0.0/8", "::1"]);
        assert!(parse_ip_list("10.0.0.0/33").is_err());
        assert!(parse_ip_list("example.com").is_err());
        assert!(parse_ip_list("fe80::/129").is_err());
    }
}
