//! The per-node step of a rollout and its record on the node's maintenance (annotation
//! `evictord.dev/rollout-step`, JSON): written `Running` before the step starts, `Succeeded` or
//! `Failed` when it ends. The record is what makes a resumed rollout safe:
//!
//! - `Succeeded`: never run again;
//! - `Failed` (an earlier run stopped on it): run again when the same command runs again, which
//!   is how a person retries after fixing the cause;
//! - `Running` left by a run that was interrupted (Ctrl-C pressed twice, or the plugin killed):
//!   nobody knows how far it got, so it is run again from the start — unless its process still
//!   runs on this host (then the rollout waits for it), or, with `--reboot`, the node booted
//!   again since it started (then it counts as done).
//!
//! Whether a stepped node is back: Ready, and with `--reboot` on a boot ID other than the one
//! recorded before the step.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::api::{NodeMaintenance, ROLLOUT_STEP_ANNOTATION};

/// Where a step is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepState {
    /// Started and not seen ending.
    Running,
    /// Exited 0.
    Succeeded,
    /// Exited non-zero or was killed by a signal.
    Failed,
}

/// The record of a node's step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// Where it is.
    pub state: StepState,
    /// How many times it was started.
    pub attempt: u32,
    /// `status.nodeInfo.bootID` of the node when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id_before: Option<String>,
    /// When it started.
    pub started: Timestamp,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Timestamp>,
    /// Its exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The host the plugin ran it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its process ID there (also its process group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// How a step process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal, when one killed it.
    pub signal: Option<i32>,
}

impl Exit {
    /// True for exit code 0.
    pub fn success(self) -> bool {
        self.code == Some(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => f.write_str("ended without an exit code"),
        }
    }
}

impl StepRecord {
    /// The record on a maintenance, if any.
    ///
    /// # Errors
    /// An annotation that does not parse (the message says how to go on).
    pub fn read(nm: &NodeMaintenance) -> Result<Option<StepRecord>, String> {
        let Some(text) = nm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROLLOUT_STEP_ANNOTATION))
        else {
            return Ok(None);
        };
        serde_json::from_str(text).map(Some).map_err(|e| {
            format!(
                "the step record of maintenance {} (annotation {ROLLOUT_STEP_ANNOTATION}) does not parse ({e}); remove the annotation to run the step again, or move the maintenance to Complete to skip the node",
                nm.metadata.name.as_deref().unwrap_or_default()
            )
        })
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// How it ended, when it did.
    pub fn exit(&self) -> Option<Exit> {
        (self.state != StepState::Running).then_some(Exit {
            code: self.exit_code,
            signal: self.signal,
        })
    }
}

/// The step may not start: it succeeded already.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the step succeeded already (attempt {attempt}); a finished step is never run again")]
pub struct AlreadyDone {
    /// The attempt that succeeded.
    pub attempt: u32,
}

/// The record written before the step starts (again).
///
/// # Errors
/// [`AlreadyDone`] when it succeeded already.
pub fn start(
    previous: Option<&StepRecord>,
    boot_id: Option<&str>,
    host: Option<&str>,
    now: Timestamp,
) -> Result<StepRecord, AlreadyDone> {
    if let Some(p) = previous.filter(|p| p.state == StepState::Succeeded) {
        return Err(AlreadyDone { attempt: p.attempt });
    }
    Ok(StepRecord {
        state: StepState::Running,
        attempt: previous.map_or(0, |p| p.attempt) + 1,
        boot_id_before: boot_id.filter(|b| !b.is_empty()).map(str::to_string),
        started: now,
        finished: None,
        exit_code: None,
        signal: None,
        host: host.map(str::to_string),
        pid: None,
    })
}

/// The record once the step ended.
pub fn finish(running: &StepRecord, exit: Exit, now: Timestamp) -> StepRecord {
    StepRecord {
        state: if exit.success() {
            StepState::Succeeded
        } else {
            StepState::Failed
        },
        finished: Some(now),
        exit_code: exit.code,
        signal: exit.signal,
        ..running.clone()
    }
}

/// What a record found by a run that did not start the step means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// No record: the step is due.
    Due,
    /// Succeeded: the node waits to be back.
    Done,
    /// It failed (how, for the person): due again when a run starts anew.
    Failed(String),
    /// It was interrupted (when, for the person): due again from the start.
    Interrupted(String),
    /// Its process still runs on this host: wait for it.
    StillRunning {
        /// Its process ID.
        pid: u32,
    },
}

/// Reads a record this run did not write. `alive(host, pid)` says whether that process still
/// runs (only answerable on the same host); `boot_id` is the node's now.
pub fn found(
    record: Option<&StepRecord>,
    reboot: bool,
    boot_id: Option<&str>,
    alive: impl Fn(Option<&str>, u32) -> bool,
) -> Found {
    let Some(r) = record else {
        return Found::Due;
    };
    match r.state {
        StepState::Succeeded => Found::Done,
        StepState::Failed => Found::Failed(format!(
            "attempt {} failed ({})",
            r.attempt,
            r.exit().map(|e| e.to_string()).unwrap_or_default()
        )),
        StepState::Running => {
            if reboot && booted_since(r, boot_id) {
                return Found::Done;
            }
            match r.pid {
                Some(pid) if alive(r.host.as_deref(), pid) => Found::StillRunning { pid },
                _ => Found::Interrupted(format!(
                    "attempt {} was interrupted (started {})",
                    r.attempt,
                    r.started.strftime("%Y-%m-%dT%H:%M:%SZ")
                )),
            }
        }
    }
}

/// True when the node's boot ID now is a new one: differs from the one recorded before the step
/// (any boot ID counts when none was recorded).
pub fn booted_since(record: &StepRecord, boot_id: Option<&str>) -> bool {
    match boot_id.filter(|b| !b.is_empty()) {
        None => false,
        Some(now) => record.boot_id_before.as_deref() != Some(now),
    }
}

/// True when a stepped node is back: Ready, and with `reboot` booted since the step started.
pub fn is_back(record: &StepRecord, reboot: bool, ready: bool, boot_id: Option<&str>) -> bool {
    ready && (!reboot || booted_since(record, boot_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn record(state: StepState, attempt: u32) -> StepRecord {
        StepRecord {
            state,
            attempt,
            boot_id_before: Some("boot-1".into()),
            started: t(0),
            finished: None,
            exit_code: None,
            signal: None,
            host: Some("here".into()),
            pid: Some(42),
        }
    }

    #[rstest]
    #[case::first(None, Ok(1))]
    #[case::after_failure(Some(record(StepState::Failed, 1)), Ok(2))]
    #[case::after_interruption(Some(record(StepState::Running, 2)), Ok(3))]
    #[case::never_twice(Some(record(StepState::Succeeded, 1)), Err(1))]
    fn starting(#[case] previous: Option<StepRecord>, #[case] want: Result<u32, u32>) {
        let got = start(previous.as_ref(), Some("boot-2"), Some("here"), t(5));
        match (got, want) {
            (Ok(r), Ok(attempt)) => {
                assert_eq!(r.attempt, attempt);
                assert_eq!(r.state, StepState::Running);
                assert_eq!(r.boot_id_before.as_deref(), Some("boot-2"));
                assert_eq!((r.started, r.finished, r.pid), (t(5), None, None));
            }
            (Err(e), Err(attempt)) => assert_eq!(e.attempt, attempt),
            (got, want) => panic!("{got:?} != {want:?}"),
        }
    }

    #[rstest]
    #[case::zero(Exit { code: Some(0), signal: None }, StepState::Succeeded)]
    #[case::non_zero(Exit { code: Some(3), signal: None }, StepState::Failed)]
    #[case::killed(Exit { code: None, signal: Some(15) }, StepState::Failed)]
    fn finishing(#[case] exit: Exit, #[case] state: StepState) {
        let r = finish(&record(StepState::Running, 1), exit, t(9));
        assert_eq!(r.state, state);
        assert_eq!(r.finished, Some(t(9)));
        assert_eq!(r.exit(), Some(exit));
        assert_eq!(r.started, t(0), "the start is kept");
    }

    #[rstest]
    #[case::none(None, false, "boot-1", false, Found::Due)]
    #[case::succeeded(
        Some(record(StepState::Succeeded, 1)),
        false,
        "boot-1",
        false,
        Found::Done
    )]
    #[case::failed(Some(record(StepState::Failed, 1)), false, "boot-1", false, Found::Failed("attempt 1 failed (ended without an exit code)".into()))]
    #[case::interrupted(Some(record(StepState::Running, 1)), false, "boot-1", false, Found::Interrupted("attempt 1 was interrupted (started 2027-01-15T08:00:00Z)".into()))]
    #[case::still_running(Some(record(StepState::Running, 1)), false, "boot-1", true, Found::StillRunning { pid: 42 })]
    #[case::rebooted_meanwhile(
        Some(record(StepState::Running, 1)),
        true,
        "boot-2",
        true,
        Found::Done
    )]
    #[case::not_rebooted_yet(Some(record(StepState::Running, 1)), true, "boot-1", false, Found::Interrupted("attempt 1 was interrupted (started 2027-01-15T08:00:00Z)".into()))]
    fn found_records(
        #[case] r: Option<StepRecord>,
        #[case] reboot: bool,
        #[case] boot: &str,
        #[case] alive: bool,
        #[case] want: Found,
    ) {
        assert_eq!(found(r.as_ref(), reboot, Some(boot), |_, _| alive), want);
    }

    #[rstest]
    #[case::ready(false, true, Some("boot-1"), true)]
    #[case::not_ready(false, false, Some("boot-2"), false)]
    #[case::reboot_same_boot(true, true, Some("boot-1"), false)]
    #[case::reboot_new_boot(true, true, Some("boot-2"), true)]
    #[case::reboot_new_boot_not_ready(true, false, Some("boot-2"), false)]
    #[case::reboot_no_boot_id(true, true, None, false)]
    fn back(
        #[case] reboot: bool,
        #[case] ready: bool,
        #[case] boot: Option<&str>,
        #[case] want: bool,
    ) {
        let r = finish(
            &record(StepState::Running, 1),
            Exit {
                code: Some(0),
                signal: None,
            },
            t(1),
        );
        assert_eq!(is_back(&r, reboot, ready, boot), want);
    }

    #[test]
    fn no_boot_id_before_means_any_boot_id_is_new() {
        let mut r = record(StepState::Succeeded, 1);
        r.boot_id_before = None;
        assert!(booted_since(&r, Some("boot-1")));
        assert!(!booted_since(&r, Some("")));
    }

    #[test]
    fn the_record_round_trips_through_the_annotation() {
        let r = record(StepState::Running, 2);
        let mut nm = NodeMaintenance::new("m", Default::default());
        nm.metadata.annotations =
            Some([(ROLLOUT_STEP_ANNOTATION.to_string(), r.to_annotation())].into());
        assert_eq!(StepRecord::read(&nm), Ok(Some(r)));
        nm.metadata.annotations =
            Some([(ROLLOUT_STEP_ANNOTATION.to_string(), "{".to_string())].into());
        assert!(
            StepRecord::read(&nm)
                .unwrap_err()
                .contains("does not parse")
        );
    }
}
