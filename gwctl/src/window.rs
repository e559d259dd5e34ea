//! Window budgets on the command line: the flags that set a token's or an
//! account's spending cap per day, week, month or rolling hours, and how
//! the current window is shown (what was spent, what is left, when it
//! resets), as the control plane computes it.

use gw_proto::pb;

use crate::{money, output};

/// How often a window budget starts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Period {
    /// No window budget (removes one).
    None,
    /// Calendar days, from midnight in --time-zone.
    Day,
    /// Calendar weeks, from Monday midnight in --time-zone.
    Week,
    /// Calendar months, from the 1st at midnight in --time-zone.
    Month,
    /// The last --rolling-hours hours, counted in whole hours.
    Rolling,
}

/// The window budget flags of `create` and `update`.
#[derive(Debug, Default, clap::Args)]
pub struct WindowArgs {
    /// A spending cap per window beside the lifetime cap; `none` removes it.
    #[arg(long, value_enum)]
    period: Option<Period>,
    /// What may be spent per window, in US dollars.
    #[arg(long, value_parser = money::parse_usd_non_negative, requires = "period")]
    period_quota: Option<i64>,
    /// Hours of a rolling window, 1 to 720.
    #[arg(long, requires = "period")]
    rolling_hours: Option<u32>,
    /// IANA time zone the windows follow, e.g. Europe/Berlin [default: the control plane's, UTC unless set].
    #[arg(long, requires = "period")]
    time_zone: Option<String>,
}

// === impl Period ===

impl Period {
    fn as_str(self) -> &'static str {
        match self {
            Period::None => "none",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Rolling => "rolling",
        }
    }
}

// === impl WindowArgs ===

impl WindowArgs {
    /// The window budget to send; `None` leaves it as it is.
    pub fn request(&self) -> Option<pb::WindowBudget> {
        let period = self.period?;
        Some(pb::WindowBudget {
            period: period.as_str().to_owned(),
            rolling_hours: self.rolling_hours.unwrap_or(0),
            quota_micros: self.period_quota.unwrap_or(0),
            time_zone: self.time_zone.clone().unwrap_or_default(),
            ..Default::default()
        })
    }
}

/// What a window budget is, e.g. `$10.000000 per day (Europe/Berlin)`.
fn budget(w: &pb::WindowBudget) -> String {
    let per = match w.period.as_str() {
        "rolling" => format!("per {} hours, rolling", w.rolling_hours),
        period => format!("per {period} ({})", w.time_zone),
    };
    format!("{} {per}", output::usd(w.quota_micros))
}

/// One column for lists: `$4.000000 of $10.000000 per day (UTC) left`.
pub fn summary(window: Option<&pb::WindowBudget>) -> String {
    match window {
        Some(w) => format!("{} left of {}", output::usd(w.remaining_micros), budget(w)),
        None => "-".to_owned(),
    }
}

/// The fields `get` shows of a window budget.
pub fn fields(window: Option<&pb::WindowBudget>) -> Vec<(&'static str, String)> {
    let Some(w) = window else {
        return vec![("window budget", "none".to_owned())];
    };
    vec![
        ("window budget", budget(w)),
        ("window used", output::usd(w.used_micros)),
        ("window left", output::usd(w.remaining_micros)),
        ("window started", w.window_start.clone()),
        ("window resets", w.resets_at.clone()),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn flags_become_a_window_budget_only_with_a_period() {
        assert_eq!(WindowArgs::default().request(), None);
        let args = WindowArgs {
            period: Some(Period::Rolling),
            period_quota: Some(2_500_000),
            rolling_hours: Some(5),
            time_zone: None,
        };
        let w = args.request().unwrap();
        assert_eq!(
            (w.period.as_str(), w.rolling_hours, w.quota_micros, w.time_zone.as_str()),
            ("rolling", 5, 2_500_000, "")
        );
        let none = WindowArgs { period: Some(Period::None), ..WindowArgs::default() };
        assert_eq!(none.request().unwrap().period, "none");
    }

    #[test]
    fn the_window_shows_what_is_left_and_when_it_resets() {
        let w = pb::WindowBudget {
            period: "day".into(),
            quota_micros: 10_000_000,
            time_zone: "Europe/Berlin".into(),
            used_micros: 6_000_000,
            remaining_micros: 4_000_000,
            window_start: "2026-11-23T00:00:00+01:00".into(),
            resets_at: "2026-11-24T00:00:00+01:00".into(),
            ..Default::default()
        };
        assert_eq!(summary(Some(&w)), "$4.000000 left of $10.000000 per day (Europe/Berlin)");
        let fields = fields(Some(&w));
        assert!(fields.contains(&("window resets", "2026-11-24T00:00:00+01:00".to_owned())), "{fields:?}");
        assert_eq!(summary(None), "-");
    }
}
