//! The pure core of the SDK: from the request, the interceptor's [`Progress`] and the time, what
//! to write into the interceptor's own `status.interceptors[]` entry ([`next_write`]) and when to
//! look again ([`next_wakeup`]). Every write it proposes passes admission rule S4 against the
//! request it was computed from.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use evictord_api::{EvictionRequest, InterceptorStatus, MAX_INTERCEPTOR_MESSAGE_BYTES};

/// What an interceptor reports each time it is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Still working; the runner keeps the heartbeat going.
    InProgress {
        /// Human-readable progress, shown in `status.interceptors[].message`.
        message: String,
        /// When the interceptor expects to finish (written only when not in the past).
        expected_finish: Option<Timestamp>,
    },
    /// Done: `completionTime` is set and the controller hands the request to the next
    /// interceptor.
    Complete {
        /// Why or how it finished.
        message: String,
    },
}

impl Progress {
    /// In progress with a message and no expected finish time.
    pub fn in_progress(message: impl Into<String>) -> Self {
        Progress::InProgress {
            message: message.into(),
            expected_finish: None,
        }
    }

    /// Complete with a message.
    pub fn complete(message: impl Into<String>) -> Self {
        Progress::Complete {
            message: message.into(),
        }
    }
}

/// Timing of the runner; use the same values as the webhook's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The webhook's `--min-heartbeat-interval` (default 60 s): heartbeats never move faster.
    pub min_heartbeat_interval: Duration,
    /// The webhook's `--interceptor-deadline` (default 20 min), used when the request sets no
    /// `spec.heartbeatDeadlineSeconds`.
    pub default_deadline: Duration,
    /// How often an active request is looked at again while the interceptor is in progress.
    pub poll_interval: Duration,
    /// The least time between two writes of an in-progress message ([`held_until`]): a state
    /// that lasts less is never written, only the one that follows it. The first write (the
    /// start), a completion and a due heartbeat are never held.
    pub min_progress_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            min_heartbeat_interval: Duration::from_secs(60),
            default_deadline: Duration::from_secs(1200),
            poll_interval: Duration::from_secs(5),
            min_progress_interval: Duration::from_secs(5),
        }
    }
}

/// One write of the interceptor's own entry: the whole new entry at `index` in
/// `status.interceptors`.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryPatch {
    /// Position of the entry in `status.interceptors`.
    pub index: usize,
    /// The complete new entry.
    pub entry: InterceptorStatus,
}

/// `now` without its fraction of a second: times are stored with whole seconds.
pub fn whole_seconds(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn add(at: Timestamp, d: Duration) -> Timestamp {
    at.saturating_add(d).unwrap_or(Timestamp::MAX)
}

/// When the interceptor should heartbeat again: a third of the heartbeat deadline after its
/// last heartbeat (two more chances before it expires), never sooner than the minimum interval.
/// `None` before the first heartbeat (due at once) .
pub fn heartbeat_due(
    request: &EvictionRequest,
    entry: &InterceptorStatus,
    settings: &Settings,
) -> Option<Timestamp> {
    let last = entry.heartbeat_time.as_ref()?.0;
    let deadline = request.spec.heartbeat_deadline(settings.default_deadline);
    Some(add(
        last,
        (deadline / 3).max(settings.min_heartbeat_interval),
    ))
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_INTERCEPTOR_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_INTERCEPTOR_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// The next write of interceptor `name`'s entry for `progress` at `now`, or `None` when the entry
/// is already right (or complete: a completed interceptor writes nothing more).
///
/// # Guarantees
/// The write obeys rule S4: `startTime` comes with the first heartbeat; a heartbeat moves
/// forward by at least the minimum interval and is `now`; `startTime` and `completionTime` are
/// set once, to `now`; `expectedFinishTime` is never in the past; the message fits.
pub fn next_write(
    request: &EvictionRequest,
    name: &str,
    progress: &Progress,
    now: Timestamp,
    settings: &Settings,
) -> Option<EntryPatch> {
    let status = request.status.as_ref()?;
    let index = status.interceptors.iter().position(|i| i.name == name)?;
    let old = &status.interceptors[index];
    if old.completion_time.is_some() {
        return None;
    }
    let now = whole_seconds(now);
    let mut new = old.clone();
    if new.start_time.is_none() {
        new.start_time = Some(Time(now));
        new.heartbeat_time = Some(Time(now));
    }
    match progress {
        Progress::InProgress {
            message,
            expected_finish,
        } => {
            new.message = Some(truncate(message));
            if let Some(t) = expected_finish.filter(|t| *t >= now) {
                new.expected_finish_time = Some(Time(whole_seconds(t)));
            }
        }
        Progress::Complete { message } => {
            new.message = Some(truncate(message));
            new.completion_time = Some(Time(now));
        }
    }
    let may_beat = old
        .heartbeat_time
        .as_ref()
        .is_none_or(|Time(last)| now >= add(*last, settings.min_heartbeat_interval));
    let due = heartbeat_due(request, old, settings).is_none_or(|due| now >= due);
    // A heartbeat when it falls due, and with any other write when the interval allows it (a
    // free refresh that keeps the writes few).
    if may_beat && old.start_time.is_some() && (due || new != *old) {
        new.heartbeat_time = Some(Time(now));
    }
    (new != *old).then_some(EntryPatch { index, entry: new })
}

/// Until when the write [`next_write`] proposes may wait, or `None` to write it now: a change of
/// an in-progress message (or expected finish) within [`Settings::min_progress_interval`] of the
/// runner's last write of the request (`last_write`, `None` when it wrote none it remembers)
/// waits for the interval's end. An interceptor's states often follow each other within a
/// second (waiting for room, for the controller to observe, surged): written one by one they
/// cost the request a status write (and a webhook call) each, where the one that lasts tells
/// the reader as much. Never held: the first write (`startTime`, which the controller's
/// deadline waits for), a completion (the hand-off to the next interceptor), a new expected
/// finish time (when the interceptor expects to be done: an observer waits on it) and a
/// heartbeat that falls due.
pub fn held_until(
    request: &EvictionRequest,
    name: &str,
    progress: &Progress,
    now: Timestamp,
    last_write: Option<Timestamp>,
    settings: &Settings,
) -> Option<Timestamp> {
    let Progress::InProgress {
        expected_finish, ..
    } = progress
    else {
        return None;
    };
    let entry = request.status.as_ref()?.interceptor(name)?;
    entry.start_time.as_ref()?;
    let announced = expected_finish
        .filter(|t| *t >= whole_seconds(now))
        .map(|t| Time(whole_seconds(t)));
    if announced.is_some() && announced != entry.expected_finish_time {
        return None;
    }
    if heartbeat_due(request, entry, settings).is_none_or(|due| now >= due) {
        return None;
    }
    let until = add(last_write?, settings.min_progress_interval);
    (now < until).then_some(until)
}

/// How long until the runner should look at the request again: the next heartbeat, or the poll
/// interval, whichever comes first (at least one second, so a clock step cannot spin).
pub fn next_wakeup(
    request: &EvictionRequest,
    name: &str,
    now: Timestamp,
    settings: &Settings,
) -> Duration {
    let entry = request
        .status
        .as_ref()
        .and_then(|s| s.interceptor(name))
        .cloned()
        .unwrap_or_default();
    let until_due = heartbeat_due(request, &entry, settings)
        .map(|due| Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO))
        .unwrap_or(Duration::ZERO);
    until_due
        .min(settings.poll_interval)
        .max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use evictord_api::{EvictionRequestSpec, EvictionRequestStatus};

    const NAME: &str = "x.example.com";

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn settings() -> Settings {
        Settings {
            min_heartbeat_interval: Duration::from_secs(60),
            default_deadline: Duration::from_secs(1200),
            poll_interval: Duration::from_secs(5),
            min_progress_interval: Duration::from_secs(5),
        }
    }

    fn request(entry: InterceptorStatus) -> EvictionRequest {
        let mut r = EvictionRequest::new("u", EvictionRequestSpec::default());
        r.metadata.creation_timestamp = Some(Time(t(-10)));
        r.status = Some(EvictionRequestStatus {
            active_interceptors: vec![NAME.into()],
            interceptors: vec![
                entry,
                InterceptorStatus {
                    name: "imperative-eviction.k8s.io".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        r
    }

    fn entry(
        start: Option<i64>,
        heartbeat: Option<i64>,
        message: Option<&str>,
    ) -> InterceptorStatus {
        InterceptorStatus {
            name: NAME.into(),
            activation_time: Some(Time(t(-5))),
            start_time: start.map(|s| Time(t(s))),
            heartbeat_time: heartbeat.map(|s| Time(t(s))),
            message: message.map(str::to_string),
            ..Default::default()
        }
    }

    /// Seconds from `t(0)` of (startTime, heartbeatTime, completionTime), and the message.
    type Written = (Option<i64>, Option<i64>, Option<i64>, &'static str);

    /// One row per rule: (entry start, heartbeat, message), progress, now →
    /// expected (start, heartbeat, completion, message) or no write.
    #[rstest]
    // S4: the first write sets startTime and the first heartbeat together.
    #[case::first_write_starts(None, None, None, Progress::in_progress("m"), 0, Some((Some(0), Some(0), None, "m")))]
    #[case::complete_at_once(None, None, None, Progress::complete("done"), 0, Some((Some(0), Some(0), Some(0), "done")))]
    // Nothing changed and no heartbeat due: no write.
    #[case::nothing_new(Some(0), Some(0), Some("m"), Progress::in_progress("m"), 30, None)]
    // A new message before the minimum interval: the message, not the heartbeat.
    #[case::message_without_beat(Some(0), Some(0), Some("m"), Progress::in_progress("n"), 30, Some((Some(0), Some(0), None, "n")))]
    // A new message after the minimum interval refreshes the heartbeat too.
    #[case::message_with_beat(Some(0), Some(0), Some("m"), Progress::in_progress("n"), 61, Some((Some(0), Some(61), None, "n")))]
    // Cadence: deadline/3 = 400 s after the last heartbeat.
    #[case::beat_not_due(Some(0), Some(0), Some("m"), Progress::in_progress("m"), 399, None)]
    #[case::beat_due(Some(0), Some(0), Some("m"), Progress::in_progress("m"), 400, Some((Some(0), Some(400), None, "m")))]
    // startTime and completionTime are set once.
    #[case::completion_keeps_start(Some(0), Some(0), Some("m"), Progress::complete("ok"), 10, Some((Some(0), Some(0), Some(10), "ok")))]
    fn next_write_rows(
        #[case] start: Option<i64>,
        #[case] heartbeat: Option<i64>,
        #[case] message: Option<&str>,
        #[case] progress: Progress,
        #[case] now: i64,
        #[case] expected: Option<Written>,
    ) {
        let r = request(entry(start, heartbeat, message));
        let got = next_write(&r, NAME, &progress, t(now), &settings()).map(|p| {
            assert_eq!(p.index, 0);
            let e = p.entry;
            let s = |x: Option<Time>| x.map(|Time(v)| v.as_second() - t(0).as_second());
            (
                s(e.start_time),
                s(e.heartbeat_time),
                s(e.completion_time),
                e.message.unwrap_or_default(),
            )
        });
        let expected = expected.map(|(a, b, c, m)| (a, b, c, m.to_string()));
        assert_eq!(got, expected);
    }

    /// One row per rule of [`held_until`]: (entry start, heartbeat), progress, seconds since the
    /// runner's last write (`None`: none remembered), now → held until (seconds) or written now.
    #[rstest]
    // A new message 2 s after the last write waits until 5 s after it.
    #[case::quick_change_waits(Some(0), Some(0), Progress::in_progress("n"), Some(8), 10, Some(13))]
    // Once the interval has passed it is written.
    #[case::interval_passed(Some(0), Some(0), Progress::in_progress("n"), Some(5), 10, None)]
    // No write remembered (a restarted runner, a request first seen): written.
    #[case::no_write_remembered(Some(0), Some(0), Progress::in_progress("n"), None, 10, None)]
    // The first write starts the interceptor's turn: never held.
    #[case::first_write(None, None, Progress::in_progress("n"), Some(9), 10, None)]
    // A completion hands the request on: never held.
    #[case::completion(Some(0), Some(0), Progress::complete("ok"), Some(9), 10, None)]
    // A new expected finish time is told at once; the same one again is held like a message.
    #[case::new_expected_finish(Some(0), Some(0), Progress::InProgress { message: "n".into(), expected_finish: Some(t(40)) }, Some(8), 10, None)]
    #[case::same_expected_finish(Some(0), Some(0), Progress::InProgress { message: "n".into(), expected_finish: Some(t(30)) }, Some(8), 10, Some(13))]
    // A heartbeat that falls due (deadline/3 = 400 s) is never held.
    #[case::heartbeat_due(Some(0), Some(0), Progress::in_progress("n"), Some(398), 400, None)]
    fn held_until_rows(
        #[case] start: Option<i64>,
        #[case] heartbeat: Option<i64>,
        #[case] progress: Progress,
        #[case] last_write: Option<i64>,
        #[case] now: i64,
        #[case] held: Option<i64>,
    ) {
        let mut e = entry(start, heartbeat, Some("m"));
        e.expected_finish_time = Some(Time(t(30)));
        let r = request(e);
        assert_eq!(
            held_until(&r, NAME, &progress, t(now), last_write.map(t), &settings()),
            held.map(t)
        );
    }

    #[test]
    fn completed_interceptor_writes_nothing() {
        let mut e = entry(Some(0), Some(0), Some("m"));
        e.completion_time = Some(Time(t(1)));
        let r = request(e);
        assert_eq!(
            next_write(&r, NAME, &Progress::in_progress("x"), t(500), &settings()),
            None
        );
    }

    #[test]
    fn unknown_interceptor_writes_nothing() {
        let r = request(entry(None, None, None));
        let p = Progress::in_progress("x");
        assert_eq!(
            next_write(&r, "other.example.com", &p, t(0), &settings()),
            None
        );
    }

    #[rstest]
    #[case::future_is_written(Some(100), Some(100))]
    #[case::past_is_dropped(Some(-100), None)]
    #[case::none(None, None)]
    fn expected_finish_rows(#[case] finish: Option<i64>, #[case] written: Option<i64>) {
        let r = request(entry(Some(0), Some(0), Some("m")));
        let p = Progress::InProgress {
            message: "n".into(),
            expected_finish: finish.map(t),
        };
        let e = next_write(&r, NAME, &p, t(10), &settings()).unwrap().entry;
        assert_eq!(e.expected_finish_time, written.map(|s| Time(t(s))));
    }

    #[test]
    fn fractional_now_is_truncated() {
        let r = request(entry(None, None, None));
        let now = t(3).checked_add(Duration::from_millis(700)).unwrap();
        let e = next_write(&r, NAME, &Progress::in_progress("m"), now, &settings())
            .unwrap()
            .entry;
        assert_eq!(e.start_time, Some(Time(t(3))));
    }

    #[test]
    fn long_message_is_cut_at_a_char_boundary() {
        let r = request(entry(None, None, None));
        let long = "é".repeat(MAX_INTERCEPTOR_MESSAGE_BYTES);
        let e = next_write(&r, NAME, &Progress::in_progress(long), t(0), &settings())
            .unwrap()
            .entry;
        let m = e.message.unwrap();
        assert!(m.len() <= MAX_INTERCEPTOR_MESSAGE_BYTES && m.len() > 32000);
    }

    #[rstest]
    // Poll interval first; the heartbeat when it is sooner; never below a second.
    #[case::poll(Some(0), 10, 5)]
    #[case::heartbeat_sooner(Some(0), 397, 3)]
    #[case::overdue(Some(0), 500, 1)]
    #[case::not_started(None, 0, 1)]
    fn wakeup_rows(#[case] heartbeat: Option<i64>, #[case] now: i64, #[case] secs: u64) {
        let r = request(entry(heartbeat, heartbeat, Some("m")));
        assert_eq!(
            next_wakeup(&r, NAME, t(now), &settings()),
            Duration::from_secs(secs)
        );
    }

    #[test]
    fn spec_deadline_sets_the_cadence() {
        let mut r = request(entry(Some(0), Some(0), Some("m")));
        r.spec.heartbeat_deadline_seconds = Some(600);
        assert_eq!(
            heartbeat_due(&r, &entry(Some(0), Some(0), None), &settings()),
            Some(t(200))
        );
        // A minimum interval above a third of the deadline wins.
        let s = Settings {
            min_heartbeat_interval: Duration::from_secs(300),
            ..settings()
        };
        assert_eq!(
            heartbeat_due(&r, &entry(Some(0), Some(0), None), &s),
            Some(t(300))
        );
    }
}
