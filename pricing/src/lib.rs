//! The gateway's one price formula, shared by the control plane, the data
//! plane and gwctl. Money is integer micro-USD and a group's price ratio is
//! integer parts per million; every cost rounds up to a whole micro-USD, so
//! nothing that used a priced resource is free, and saturates at `i64::MAX`.
//!
//! Prices arrive as plain integers (`Prices`), so this crate depends on no
//! other crate of the workspace.

mod batch;
mod cost;
mod text;
pub mod wire;

pub use self::batch::{DEFAULT_BATCH_PRICE_PPM, batch_cost_micros, batch_share_ppm};
pub use self::cost::{
    DOCUMENTS_PER_SEARCH_UNIT, Prices, Units, Usage, bound_micros, cost_micros, search_units, tier, units_cost_micros,
    video_cost_micros,
};
pub use self::text::{
    ParseError, format_ratio, format_usd, format_usd_short, parse_ratio_ppm, parse_usd, parse_usd_non_negative,
};

/// Micro-USD in one US dollar.
pub const MICROS_PER_USD: i64 = 1_000_000;

/// A price ratio of 1 (prices as listed), in parts per million.
pub const RATIO_ONE_PPM: i64 = 1_000_000;
