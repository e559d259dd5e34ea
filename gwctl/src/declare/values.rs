//! The scalar values of configuration documents, each kept in the unit the
//! wire uses and written back in the form people type: dollars and ratios
//! as exact decimals (`"2.5"`, never `2.500000` or a float's rounding), rate
//! limits as `MAX/MINUTES`, expiry as RFC 3339 in UTC. Each reads a YAML
//! number as well as a string, so `inputPrice: 2.5` and `"2.5"` agree.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::flags;

/// US dollars, held as micro-USD; never negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usd(pub i64);

/// A non-negative decimal ratio, held in parts per million.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ratio(pub i64);

/// `MAX/MINUTES`: at most MAX requests per MINUTES minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub max_requests: u32,
    pub window_minutes: u32,
}

/// A moment as Unix seconds, written as RFC 3339 in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expires(pub i64);

/// Whether an object serves requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    #[default]
    Enabled,
    Disabled,
}

/// Reads a scalar as the text it was written as: strings as they are,
/// numbers in their shortest exact decimal form (`2.5`, `0.075`).
struct Text;

// === impl Text ===

impl Visitor<'_> for Text {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number or a string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<String, E> {
        Ok(text.to_owned())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<String, E> {
        Ok(n.to_string())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<String, E> {
        Ok(n.to_string())
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<String, E> {
        // Display never uses an exponent and gives the shortest text that
        // reads back as the same float: 0.075 stays "0.075".
        if n.is_finite() { Ok(n.to_string()) } else { Err(E::custom(format!("{n} is not a number"))) }
    }
}

fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    deserializer.deserialize_any(Text)
}

// === impl Usd ===

impl Usd {
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&gw_pricing::format_ratio(self.0))
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Usd, D::Error> {
        let text = text(deserializer)?;
        gw_pricing::parse_usd_non_negative(text.trim()).map(Usd).map_err(de::Error::custom)
    }
}

// === impl Ratio ===

impl Ratio {
    pub const ONE: Ratio = Ratio(1_000_000);

    pub fn one() -> Ratio {
        Ratio::ONE
    }

    pub fn is_one(&self) -> bool {
        *self == Ratio::ONE
    }

    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&gw_pricing::format_ratio(self.0))
    }
}

impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ratio, D::Error> {
        let text = text(deserializer)?;
        gw_pricing::parse_ratio_ppm(text.trim()).map(Ratio).map_err(de::Error::custom)
    }
}

// === impl RateLimit ===

impl RateLimit {
    /// The limit on the wire; `None` for no limit (a zero window).
    pub fn from_wire(limit: Option<&gw_proto::pb::RateLimit>) -> Option<RateLimit> {
        limit
            .filter(|l| l.window_minutes > 0 && l.max_requests > 0)
            .map(|l| RateLimit { max_requests: l.max_requests, window_minutes: l.window_minutes })
    }

    /// The wire form of an optional limit: the zero limit for none.
    pub fn to_wire(limit: Option<RateLimit>) -> gw_proto::pb::RateLimit {
        limit
            .map(|l| gw_proto::pb::RateLimit { window_minutes: l.window_minutes, max_requests: l.max_requests })
            .unwrap_or_default()
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.max_requests, self.window_minutes)
    }
}

impl Serialize for RateLimit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `MAX/MINUTES`, or `off`; `off` reads as no limit.
pub fn rate_limit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<RateLimit>, D::Error> {
    let text = text(deserializer)?;
    let limit = flags::parse_rate_limit(&text).map_err(de::Error::custom)?;
    Ok(RateLimit::from_wire(Some(&limit)))
}

// === impl Expires ===

impl fmt::Display for Expires {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp(self.0, 0) {
            Some(time) => f.write_str(&time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            None => write!(f, "{}", self.0),
        }
    }
}

impl Serialize for Expires {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// RFC 3339, or `never` for no expiry.
pub fn expires<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Expires>, D::Error> {
    let text = text(deserializer)?;
    let seconds = flags::parse_expiry(&text).map_err(de::Error::custom)?;
    Ok((seconds > 0).then_some(Expires(seconds)))
}

// === impl Status ===

impl Status {
    pub fn is_enabled(&self) -> bool {
        *self == Status::Enabled
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Enabled => "enabled",
            Status::Disabled => "disabled",
        }
    }

    /// A status from the wire: anything but `disabled` (enabled, or a
    /// channel the control plane took out of rotation) is enabled, the
    /// state an operator declares.
    pub fn from_wire(status: &str) -> Status {
        if status == "disabled" { Status::Disabled } else { Status::Enabled }
    }
}

/// For `skip_serializing_if`.
pub fn is_false(value: &bool) -> bool {
    !*value
}

/// For `skip_serializing_if`.
pub fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
