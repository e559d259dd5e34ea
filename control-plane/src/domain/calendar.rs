//! Calendar budgets: a spending cap per day, week or month in an IANA time
//! zone, or over a rolling number of hours, beside the lifetime cap of a
//! token or an account.
//!
//! Spend is counted in buckets. A calendar window is one bucket, named by
//! its period and the Unix second it starts (`d…`, `w…`, `m…`); a record
//! counts in the window that holds its `created_at`, in the zone set when
//! it is applied. A rolling window of N hours is N hourly buckets (`h…`,
//! UTC hours): what was spent in the hour that holds now and the N - 1
//! hours before it. So a rolling window frees spend an hour at a time, on
//! the hour, and "resets" (frees its oldest hour) at the next full hour.
//! Days start at midnight of the zone, weeks on Monday at midnight, months
//! on the 1st at midnight; on a day a zone changes its clocks the day is 23
//! or 25 hours long. Changing a budget's period or zone starts counting
//! afresh in the new windows.

use jiff::{Timestamp, ToSpan, Zoned, civil::Date, tz::TimeZone};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Longest rolling window, in hours (30 days).
pub const MAX_ROLLING_HOURS: u32 = 720;
/// The zone of a window budget that names none, unless the control plane
/// sets another (`budget_time_zone`).
pub const DEFAULT_TIME_ZONE: &str = "UTC";
/// How long a bucket's counter is kept past the end of the last window
/// that counts it.
pub const BUCKET_GRACE_SECS: i64 = 86_400;
const HOUR: i64 = 3_600;

/// How often a window budget starts again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowPeriod {
    /// No window budget.
    #[default]
    None,
    Day,
    /// Weeks start on Monday.
    Week,
    Month,
    /// The last `rolling_hours` hours, counted in whole hours.
    Rolling,
}

/// A spending cap per window, beside a lifetime cap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowBudget {
    pub period: WindowPeriod,
    /// Hours of a rolling window, 1..=720; 0 for calendar periods.
    #[serde(default)]
    pub rolling_hours: u32,
    /// What may be spent in one window, micro-USD.
    pub quota_micros: i64,
    /// IANA name of the zone calendar windows follow.
    #[serde(default)]
    pub time_zone: String,
}

/// One window of a budget: `[start, end)` in Unix seconds, and the buckets
/// whose sum is what was spent in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub start: i64,
    /// When the window (or, rolling, its oldest hour) ends.
    pub end: i64,
    pub buckets: Vec<String>,
}

/// A window budget that cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CalendarError {
    #[error("unknown time zone {0:?}")]
    UnknownZone(String),
    #[error("rolling_hours must be between 1 and {MAX_ROLLING_HOURS}, got {0}")]
    RollingHours(u32),
    #[error("rolling_hours is only for a rolling period")]
    HoursWithoutRolling,
    #[error("period_quota_micros must not be negative")]
    NegativeQuota,
    #[error("unknown period {0:?}: expected none, day, week, month or rolling")]
    UnknownPeriod(String),
    #[error("instant {0} is out of range")]
    OutOfRange(i64),
}

// === impl WindowPeriod ===

impl WindowPeriod {
    /// The name the admin API and gwctl use.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowPeriod::None => "none",
            WindowPeriod::Day => "day",
            WindowPeriod::Week => "week",
            WindowPeriod::Month => "month",
            WindowPeriod::Rolling => "rolling",
        }
    }

    /// Parses a period name; the empty string is `none`.
    pub fn parse(text: &str) -> Result<WindowPeriod, CalendarError> {
        Ok(match text {
            "" | "none" => WindowPeriod::None,
            "day" | "daily" => WindowPeriod::Day,
            "week" | "weekly" => WindowPeriod::Week,
            "month" | "monthly" => WindowPeriod::Month,
            "rolling" => WindowPeriod::Rolling,
            other => return Err(CalendarError::UnknownPeriod(other.to_owned())),
        })
    }
}

// === impl WindowBudget ===

impl WindowBudget {
    /// Whether this is a budget at all.
    pub fn is_set(&self) -> bool {
        self.period != WindowPeriod::None
    }

    /// Checks the budget and fills in the default zone; `None` stays `None`
    /// (a period of none drops the rest).
    pub fn normalized(mut self) -> Result<Option<WindowBudget>, CalendarError> {
        if !self.is_set() {
            return Ok(None);
        }
        if self.quota_micros < 0 {
            return Err(CalendarError::NegativeQuota);
        }
        match self.period {
            WindowPeriod::Rolling if !(1..=MAX_ROLLING_HOURS).contains(&self.rolling_hours) => {
                return Err(CalendarError::RollingHours(self.rolling_hours));
            }
            WindowPeriod::Rolling => {}
            _ if self.rolling_hours != 0 => return Err(CalendarError::HoursWithoutRolling),
            _ => {}
        }
        if self.time_zone.is_empty() {
            self.time_zone = DEFAULT_TIME_ZONE.to_owned();
        }
        zone(&self.time_zone)?;
        Ok(Some(self))
    }

    /// The window that holds Unix second `now`: what a lease must fit in.
    pub fn window_at(&self, now: i64) -> Result<Window, CalendarError> {
        if self.period == WindowPeriod::Rolling {
            let hour = now - now.rem_euclid(HOUR);
            let hours = i64::from(self.rolling_hours.max(1));
            let buckets = (0..hours).map(|k| format!("h{}", hour - k * HOUR)).collect();
            return Ok(Window { start: hour - (hours - 1) * HOUR, end: hour + HOUR, buckets });
        }
        let (start, end) = self.calendar_window(now)?;
        Ok(Window { start, end, buckets: vec![self.bucket_name(start)] })
    }

    /// The bucket a record created at `created_at` counts in, and the Unix
    /// second its counter may be forgotten.
    pub fn bucket_of(&self, created_at: i64) -> Result<(String, i64), CalendarError> {
        if self.period == WindowPeriod::Rolling {
            let hour = created_at - created_at.rem_euclid(HOUR);
            let last_end = hour + i64::from(self.rolling_hours.max(1)) * HOUR;
            return Ok((format!("h{hour}"), last_end + BUCKET_GRACE_SECS));
        }
        let (start, end) = self.calendar_window(created_at)?;
        Ok((self.bucket_name(start), end + BUCKET_GRACE_SECS))
    }

    fn bucket_name(&self, start: i64) -> String {
        let code = match self.period {
            WindowPeriod::Week => 'w',
            WindowPeriod::Month => 'm',
            _ => 'd',
        };
        format!("{code}{start}")
    }

    /// `[start, end)` of the day, week or month holding `at` in the zone.
    fn calendar_window(&self, at: i64) -> Result<(i64, i64), CalendarError> {
        // Zones are checked when a budget is written; one that a later tz
        // database no longer knows falls back to UTC rather than stopping.
        let tz = zone(&self.time_zone).unwrap_or(TimeZone::UTC);
        let instant = Timestamp::from_second(at).map_err(|_| CalendarError::OutOfRange(at))?;
        let date = instant.to_zoned(tz.clone()).date();
        let (first, next) = match self.period {
            WindowPeriod::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                let monday = date.checked_sub(back.days()).map_err(|_| CalendarError::OutOfRange(at))?;
                (monday, monday.checked_add(7.days()))
            }
            WindowPeriod::Month => {
                let first = date.first_of_month();
                (first, first.checked_add(1.month()))
            }
            _ => (date, date.checked_add(1.day())),
        };
        let next = next.map_err(|_| CalendarError::OutOfRange(at))?;
        Ok((start_of(first, &tz, at)?, start_of(next, &tz, at)?))
    }
}

/// The first instant of `date` in `tz` (midnight, or the first time that
/// exists when a clock change skips midnight).
fn start_of(date: Date, tz: &TimeZone, at: i64) -> Result<i64, CalendarError> {
    let zoned: Zoned = date.to_zoned(tz.clone()).map_err(|_| CalendarError::OutOfRange(at))?;
    let start = zoned.start_of_day().map_err(|_| CalendarError::OutOfRange(at))?;
    Ok(start.timestamp().as_second())
}

/// The zone named `name` from the bundled tz database.
pub fn zone(name: &str) -> Result<TimeZone, CalendarError> {
    TimeZone::get(name).map_err(|_| CalendarError::UnknownZone(name.to_owned()))
}

/// Unix second `at` as RFC 3339 in zone `name` (UTC when the zone is
/// unknown), e.g. `2026-03-30T00:00:00+02:00`.
pub fn rfc3339_in(at: i64, name: &str) -> String {
    let tz = zone(name).unwrap_or(TimeZone::UTC);
    match Timestamp::from_second(at) {
        Ok(instant) => {
            let zoned = instant.to_zoned(tz);
            zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
        }
        Err(_) => at.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn budget(period: WindowPeriod, zone: &str) -> WindowBudget {
        WindowBudget { period, rolling_hours: 0, quota_micros: 1_000, time_zone: zone.into() }
    }

    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_second()
    }

    fn span(b: &WindowBudget, t: &str) -> (String, String) {
        let w = b.window_at(at(t)).unwrap();
        (rfc3339_in(w.start, &b.time_zone), rfc3339_in(w.end, &b.time_zone))
    }

    #[test]
    fn days_start_at_midnight_of_the_zone() {
        let utc = budget(WindowPeriod::Day, "UTC");
        assert_eq!(
            span(&utc, "2026-11-23T03:00:00Z"),
            ("2026-11-23T00:00:00+00:00".into(), "2026-11-24T00:00:00+00:00".into())
        );
        let tokyo = budget(WindowPeriod::Day, "Asia/Tokyo");
        // 20:00 UTC is 05:00 the next day in Tokyo.
        assert_eq!(
            span(&tokyo, "2026-11-23T20:00:00Z"),
            ("2026-11-24T00:00:00+09:00".into(), "2026-11-25T00:00:00+09:00".into())
        );
        let kolkata = budget(WindowPeriod::Day, "Asia/Kolkata");
        assert_eq!(span(&kolkata, "2026-11-23T18:29:59Z").1, "2026-11-24T00:00:00+05:30");
        assert_eq!(span(&kolkata, "2026-11-23T18:30:00Z").0, "2026-11-24T00:00:00+05:30");
    }

    #[test]
    fn days_of_a_clock_change_are_23_or_25_hours_long() {
        let berlin = budget(WindowPeriod::Day, "Europe/Berlin");
        let spring = berlin.window_at(at("2026-03-29T12:00:00Z")).unwrap();
        assert_eq!(spring.end - spring.start, 23 * HOUR);
        assert_eq!(rfc3339_in(spring.start, "Europe/Berlin"), "2026-03-29T00:00:00+01:00");
        assert_eq!(rfc3339_in(spring.end, "Europe/Berlin"), "2026-03-30T00:00:00+02:00");
        let autumn = berlin.window_at(at("2026-10-25T12:00:00Z")).unwrap();
        assert_eq!(autumn.end - autumn.start, 25 * HOUR);
        // Midnight does not exist in Sao Paulo's 2018 spring-forward: the day starts at 01:00.
        let sao_paulo = budget(WindowPeriod::Day, "America/Sao_Paulo");
        assert_eq!(span(&sao_paulo, "2018-11-04T12:00:00Z").0, "2018-11-04T01:00:00-02:00");
    }

    #[test]
    fn weeks_start_on_monday() {
        let utc = budget(WindowPeriod::Week, "UTC");
        // 2026-11-23 is a Monday.
        for t in ["2026-11-23T00:00:00Z", "2026-11-25T12:00:00Z", "2026-11-29T23:59:59Z"] {
            assert_eq!(span(&utc, t), ("2026-11-23T00:00:00+00:00".into(), "2026-11-30T00:00:00+00:00".into()), "{t}");
        }
        assert_eq!(span(&utc, "2026-11-22T23:59:59Z").0, "2026-11-16T00:00:00+00:00", "Sunday ends the week");
        let new_york = budget(WindowPeriod::Week, "America/New_York");
        // Monday 02:00 UTC is still Sunday evening in New York.
        assert_eq!(span(&new_york, "2026-11-23T02:00:00Z").0, "2026-11-16T00:00:00-05:00");
        // The week of the autumn change (Sunday 1 November 2026) is 7 days and an hour.
        let w = new_york.window_at(at("2026-10-28T12:00:00Z")).unwrap();
        assert_eq!(w.end - w.start, 7 * 24 * HOUR + HOUR);
    }

    #[test]
    fn months_start_on_the_first() {
        let berlin = budget(WindowPeriod::Month, "Europe/Berlin");
        assert_eq!(
            span(&berlin, "2026-02-15T00:00:00Z"),
            ("2026-02-01T00:00:00+01:00".into(), "2026-03-01T00:00:00+01:00".into())
        );
        let march = berlin.window_at(at("2026-03-31T21:59:59Z")).unwrap();
        assert_eq!(rfc3339_in(march.end, "Europe/Berlin"), "2026-04-01T00:00:00+02:00");
        assert_eq!(march.end - march.start, 31 * 24 * HOUR - HOUR, "March loses an hour in Berlin");
        assert_eq!(span(&berlin, "2026-03-31T22:00:00Z").0, "2026-04-01T00:00:00+02:00");
        let leap = budget(WindowPeriod::Month, "UTC").window_at(at("2028-02-29T23:00:00Z")).unwrap();
        assert_eq!(leap.end - leap.start, 29 * 24 * HOUR);
    }

    #[test]
    fn rolling_windows_sum_the_last_hours() {
        let rolling =
            WindowBudget { period: WindowPeriod::Rolling, rolling_hours: 3, ..budget(WindowPeriod::None, "UTC") };
        let now = at("2026-11-23T03:20:00Z");
        let w = rolling.window_at(now).unwrap();
        assert_eq!(w.start, at("2026-11-23T01:00:00Z"));
        assert_eq!(w.end, at("2026-11-23T04:00:00Z"), "the oldest hour leaves at the next full hour");
        let hours: Vec<String> =
            ["03", "02", "01"].iter().map(|h| format!("h{}", at(&format!("2026-11-23T{h}:00:00Z")))).collect();
        assert_eq!(w.buckets, hours);
        let (bucket, forget) = rolling.bucket_of(at("2026-11-23T01:59:59Z")).unwrap();
        assert_eq!(bucket, hours[2]);
        assert_eq!(forget, at("2026-11-23T04:00:00Z") + BUCKET_GRACE_SECS);
    }

    #[test]
    fn a_record_counts_in_the_bucket_of_the_window_holding_it() {
        let berlin = budget(WindowPeriod::Day, "Europe/Berlin");
        let (bucket, forget) = berlin.bucket_of(at("2026-11-23T22:59:59Z")).unwrap();
        assert_eq!(bucket, format!("d{}", at("2026-11-22T23:00:00Z")));
        assert_eq!(forget, at("2026-11-23T23:00:00Z") + BUCKET_GRACE_SECS);
        assert_eq!(berlin.window_at(at("2026-11-23T12:00:00Z")).unwrap().buckets, vec![bucket]);
        let week = budget(WindowPeriod::Week, "Europe/Berlin");
        assert!(week.bucket_of(at("2026-11-23T12:00:00Z")).unwrap().0.starts_with('w'));
    }

    #[test]
    fn budgets_are_checked_and_get_the_default_zone() {
        let mut b = budget(WindowPeriod::Day, "");
        assert_eq!(b.clone().normalized().unwrap().unwrap().time_zone, "UTC");
        b.time_zone = "Mars/Olympus".into();
        assert_eq!(b.clone().normalized(), Err(CalendarError::UnknownZone("Mars/Olympus".into())));
        assert_eq!(b.to_string_err(), "unknown time zone \"Mars/Olympus\"");
        let rolling =
            |h| WindowBudget { period: WindowPeriod::Rolling, rolling_hours: h, ..budget(WindowPeriod::None, "UTC") };
        assert_eq!(rolling(0).normalized(), Err(CalendarError::RollingHours(0)));
        assert_eq!(rolling(721).normalized(), Err(CalendarError::RollingHours(721)));
        assert!(rolling(720).normalized().unwrap().is_some());
        let hours_on_a_day = WindowBudget { rolling_hours: 5, ..budget(WindowPeriod::Day, "UTC") };
        assert_eq!(hours_on_a_day.normalized(), Err(CalendarError::HoursWithoutRolling));
        let negative = WindowBudget { quota_micros: -1, ..budget(WindowPeriod::Day, "UTC") };
        assert_eq!(negative.normalized(), Err(CalendarError::NegativeQuota));
        assert_eq!(budget(WindowPeriod::None, "Mars/Olympus").normalized(), Ok(None));
        assert_eq!(WindowPeriod::parse("fortnight"), Err(CalendarError::UnknownPeriod("fortnight".into())));
    }

    impl WindowBudget {
        fn to_string_err(&self) -> String {
            self.clone().normalized().unwrap_err().to_string()
        }
    }
}
