//! Maintenance windows of a MaintenanceBudget (SPEC 6.1): a five-field cron schedule in a time
//! zone and a duration. Parsing is croner's (POSIX/Vixie semantics, as Kubernetes CronJobs and
//! Karpenter's budgets read a schedule); whether a window is open, when it closes and when the next
//! one opens are pure functions of the parsed windows and `now`.

use std::time::Duration;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

use crate::api::MaintenanceWindow;

/// The longest window: a month (longer ones would simply always be open).
pub const MAX_WINDOW: Duration = Duration::from_secs(31 * 24 * 3600);
/// At most this many windows chained one after the other are followed to find when the open
/// period ends.
const MAX_CHAINED: usize = 64;

/// A parsed window.
#[derive(Clone, Debug)]
pub struct Window {
    schedule: Cron,
    duration: SignedDuration,
    time_zone: TimeZone,
}

/// Whether the windows are open at a time, and the times around it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowState {
    /// A window is open (always, without windows).
    pub open: bool,
    /// When the open period ends (windows that overlap or follow each other without a gap are
    /// one period); `None` without windows.
    pub closes: Option<Timestamp>,
    /// While closed: when the next window opens.
    pub next_open: Option<Timestamp>,
}

/// Parses one window; the error names the field under `path` (e.g. `spec.windows[0]`).
///
/// # Errors
/// A schedule that is not a five-field cron expression or never fires, a duration that is not a
/// positive duration of at most [`MAX_WINDOW`], an unknown time zone.
pub fn parse_window(w: &MaintenanceWindow, path: &str) -> Result<Window, String> {
    let schedule = parse_schedule(&w.schedule).map_err(|e| format!("{path}.schedule: {e}"))?;
    let duration =
        parse_window_duration(&w.duration).map_err(|e| format!("{path}.duration: {e}"))?;
    let zone = w.time_zone.as_deref().unwrap_or("UTC");
    let time_zone = TimeZone::get(zone).map_err(|_| {
        format!("{path}.timeZone: {zone:?} is not a known IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)")
    })?;
    let window = Window {
        schedule,
        duration,
        time_zone,
    };
    // A schedule such as `0 0 30 2 *` parses but never fires: the window would never open.
    if window.next_start(Timestamp::UNIX_EPOCH).is_none() {
        return Err(format!("{path}.schedule: {:?} never fires", w.schedule));
    }
    Ok(window)
}

/// Parses every window of a budget (`spec.windows`).
///
/// # Errors
/// The first window that does not parse, named by its index.
pub fn parse_windows(windows: &[MaintenanceWindow]) -> Result<Vec<Window>, String> {
    windows
        .iter()
        .enumerate()
        .map(|(i, w)| parse_window(w, &format!("spec.windows[{i}]")))
        .collect()
}

/// A five-field cron expression (minute, hour, day of month, month, day of week), or a nickname
/// such as `@daily`.
fn parse_schedule(text: &str) -> Result<Cron, String> {
    let fields = text.split_whitespace().count();
    if !text.trim_start().starts_with('@') && fields != 5 {
        return Err(format!(
            "{text:?} has {fields} fields; a schedule has five: minute hour day-of-month month day-of-week, e.g. \"0 22 * * 1-5\""
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| format!("{text:?} is not a cron schedule: {e}"))
}

/// A window's duration: positive, at most [`MAX_WINDOW`].
fn parse_window_duration(text: &str) -> Result<SignedDuration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 6h, 90m or 1h30m: {e}"))?;
    if d.is_zero() {
        return Err("the duration must be positive".into());
    }
    if d > MAX_WINDOW {
        return Err(format!(
            "{text:?} is longer than 31 days; a budget without windows is always open"
        ));
    }
    SignedDuration::try_from(d).map_err(|e| format!("{text:?}: {e}"))
}

impl Window {
    fn zoned(&self, t: Timestamp) -> Zoned {
        t.to_zoned(self.time_zone.clone())
    }

    /// The latest start at or before `t`.
    fn last_start(&self, t: Timestamp) -> Option<Timestamp> {
        self.schedule
            .find_previous_occurrence(&self.zoned(t), true)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The first start after `t`.
    fn next_start(&self, t: Timestamp) -> Option<Timestamp> {
        self.schedule
            .find_next_occurrence(&self.zoned(t), false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// When the window that is open at `t` ends, if one is.
    fn open_until(&self, t: Timestamp) -> Option<Timestamp> {
        let start = self.last_start(t)?;
        let end = start.checked_add(self.duration).ok()?;
        (end > t).then_some(end)
    }
}

/// Whether `windows` are open at `now`, when the open period ends, and when the next window
/// opens while closed. No windows: always open.
pub fn window_state(windows: &[Window], now: Timestamp) -> WindowState {
    if windows.is_empty() {
        return WindowState {
            open: true,
            closes: None,
            next_open: None,
        };
    }
    let open_until = |t: Timestamp| windows.iter().filter_map(|w| w.open_until(t)).max();
    match open_until(now) {
        Some(mut end) => {
            // A window opening as (or before) another ends extends the open period.
            for _ in 0..MAX_CHAINED {
                match open_until(end) {
                    Some(later) if later > end => end = later,
                    _ => break,
                }
            }
            WindowState {
                open: true,
                closes: Some(end),
                next_open: None,
            }
        }
        None => WindowState {
            open: false,
            closes: None,
            next_open: windows.iter().filter_map(|w| w.next_start(now)).min(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(schedule: &str, duration: &str, tz: Option<&str>) -> MaintenanceWindow {
        MaintenanceWindow {
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: tz.map(Into::into),
        }
    }

    fn parsed(ws: &[MaintenanceWindow]) -> Vec<Window> {
        parse_windows(ws).unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// 2026-11-23 is a Monday.
    #[rstest::rstest]
    #[case::weekday_evening_open(
        "0 22 * * 1-5",
        "6h",
        None,
        "2026-11-23T23:00:00Z",
        true,
        Some("2026-11-24T04:00:00Z"),
        None
    )]
    #[case::weekday_evening_before(
        "0 22 * * 1-5",
        "6h",
        None,
        "2026-11-23T21:59:00Z",
        false,
        None,
        Some("2026-11-23T22:00:00Z")
    )]
    #[case::opens_at_its_start(
        "0 22 * * 1-5",
        "6h",
        None,
        "2026-11-23T22:00:00Z",
        true,
        Some("2026-11-24T04:00:00Z"),
        None
    )]
    #[case::closed_at_its_end(
        "0 22 * * 1-5",
        "6h",
        None,
        "2026-11-24T04:00:00Z",
        false,
        None,
        Some("2026-11-24T22:00:00Z")
    )]
    #[case::friday_night_runs_into_saturday(
        "0 22 * * 1-5",
        "6h",
        None,
        "2026-11-28T03:00:00Z",
        true,
        Some("2026-11-28T04:00:00Z"),
        None
    )]
    #[case::saturday_evening_waits_for_monday(
        "0 22 * * 1-5",
        "6h",
        None,
        "2026-11-28T22:30:00Z",
        false,
        None,
        Some("2026-11-30T22:00:00Z")
    )]
    #[case::sunday_is_zero(
        "0 1 * * 0",
        "1h",
        None,
        "2026-11-29T01:30:00Z",
        true,
        Some("2026-11-29T02:00:00Z"),
        None
    )]
    #[case::sunday_is_seven(
        "0 1 * * 7",
        "1h",
        None,
        "2026-11-29T01:30:00Z",
        true,
        Some("2026-11-29T02:00:00Z"),
        None
    )]
    #[case::day_names(
        "0 1 * * SUN",
        "1h",
        None,
        "2026-11-29T01:30:00Z",
        true,
        Some("2026-11-29T02:00:00Z"),
        None
    )]
    #[case::dom_or_dow(
        "0 0 1 * MON",
        "1h",
        None,
        "2026-11-30T00:30:00Z",
        true,
        Some("2026-11-30T01:00:00Z"),
        None
    )]
    #[case::time_zone(
        "0 22 * * *",
        "2h",
        Some("Europe/Berlin"),
        "2026-11-23T21:30:00Z",
        true,
        Some("2026-11-23T23:00:00Z"),
        None
    )]
    #[case::time_zone_before(
        "0 22 * * *",
        "2h",
        Some("Europe/Berlin"),
        "2026-11-23T20:30:00Z",
        false,
        None,
        Some("2026-11-23T21:00:00Z")
    )]
    #[case::summer_time(
        "0 22 * * *",
        "2h",
        Some("Europe/Berlin"),
        "2026-07-01T20:30:00Z",
        true,
        Some("2026-07-01T22:00:00Z"),
        None
    )]
    #[case::every_ten_minutes_chain(
        "*/10 * * * *",
        "10m",
        None,
        "2026-11-23T10:05:00Z",
        true,
        None,
        None
    )]
    #[case::nickname(
        "@daily",
        "1h",
        None,
        "2026-11-23T00:10:00Z",
        true,
        Some("2026-11-23T01:00:00Z"),
        None
    )]
    fn window_state_rows(
        #[case] schedule: &str,
        #[case] duration: &str,
        #[case] tz: Option<&str>,
        #[case] now: &str,
        #[case] open: bool,
        #[case] closes: Option<&str>,
        #[case] next_open: Option<&str>,
    ) {
        let state = window_state(&parsed(&[window(schedule, duration, tz)]), at(now));
        assert_eq!(state.open, open, "open");
        if schedule != "*/10 * * * *" {
            assert_eq!(state.closes, closes.map(at), "closes");
        } else {
            // Windows that follow each other without a gap are one period, followed as far as
            // the bound lets.
            assert!(state.closes.unwrap() > at("2026-11-23T20:00:00Z"));
        }
        assert_eq!(state.next_open, next_open.map(at), "next open");
    }

    #[test]
    fn no_windows_is_always_open() {
        assert_eq!(
            window_state(&[], at("2026-11-23T00:00:00Z")),
            WindowState {
                open: true,
                closes: None,
                next_open: None
            }
        );
    }

    #[test]
    fn several_windows_overlap_and_the_earliest_next_one_counts() {
        let ws = parsed(&[
            window("0 22 * * *", "2h", None),
            window("0 23 * * *", "3h", None),
            window("0 12 * * 6", "1h", None),
        ]);
        // 22:00-00:00 and 23:00-02:00 overlap: one period until 02:00.
        let s = window_state(&ws, at("2026-11-23T22:30:00Z"));
        assert_eq!(s.closes, Some(at("2026-11-24T02:00:00Z")));
        let s = window_state(&ws, at("2026-11-24T03:00:00Z"));
        assert_eq!(
            (s.open, s.next_open),
            (false, Some(at("2026-11-24T22:00:00Z")))
        );
        let s = window_state(&ws, at("2026-11-28T11:00:00Z"));
        assert_eq!(s.next_open, Some(at("2026-11-28T12:00:00Z")));
    }

    #[rstest::rstest]
    #[case::six_fields("0 0 22 * * 1-5", "6h", None, "has 6 fields")]
    #[case::four_fields("0 22 * *", "6h", None, "has 4 fields")]
    #[case::bad_minute("61 22 * * *", "6h", None, "is not a cron schedule")]
    #[case::never("0 0 30 2 *", "6h", None, "never fires")]
    #[case::bad_duration("0 22 * * *", "six hours", None, "is not a duration")]
    #[case::zero_duration("0 22 * * *", "0s", None, "must be positive")]
    #[case::long_duration("0 22 * * *", "32days", None, "longer than 31 days")]
    #[case::bad_zone("0 22 * * *", "6h", Some("Mars/Olympus"), "not a known IANA time zone")]
    fn invalid_windows_name_the_field(
        #[case] schedule: &str,
        #[case] duration: &str,
        #[case] tz: Option<&str>,
        #[case] problem: &str,
    ) {
        let e = parse_windows(&[
            window("0 1 * * *", "1h", None),
            window(schedule, duration, tz),
        ])
        .unwrap_err();
        assert!(e.starts_with("spec.windows[1]."), "{e}");
        assert!(e.contains(problem), "{e}");
    }
}
