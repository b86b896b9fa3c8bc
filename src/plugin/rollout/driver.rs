//! Who drives a rollout: the plugin process running it records itself on the rollout's budget
//! (annotation `evictord.dev/rollout-driver`: host, process ID, renewed every
//! [`RENEW_EVERY`]), so that the same command started a second time — in another terminal, on
//! another machine — does not run the same steps beside it. The record is released when the
//! process ends; one left by a killed process is taken over at once on the same host (its
//! process is gone) and after [`STALE_AFTER`] from anywhere else.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::api::MaintenanceBudget;

/// Annotation on a rollout's budget: the process driving it (JSON).
pub const ROLLOUT_DRIVER_ANNOTATION: &str = "evictord.dev/rollout-driver";
/// How often the driver renews its record. Each renewal is a write of the budget, which every
/// watch of budgets (evictord's) receives: a rollout of minutes to hours needs no finer lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(30);
/// A record not renewed for this long is taken over (three renewals missed).
pub const STALE_AFTER: Duration = Duration::from_secs(90);

/// A process driving a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Driver {
    /// Its host name (empty when unknown).
    pub host: String,
    /// Its process ID.
    pub pid: u32,
    /// When it last renewed the record.
    pub renewed: Timestamp,
}

impl Driver {
    /// The record on a budget, if any (an unreadable one counts as none).
    pub fn of(budget: &MaintenanceBudget) -> Option<Driver> {
        budget
            .metadata
            .annotations
            .as_ref()?
            .get(ROLLOUT_DRIVER_ANNOTATION)
            .and_then(|v| serde_json::from_str(v).ok())
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn is(&self, other: &Driver) -> bool {
        self.host == other.host && self.pid == other.pid
    }
}

/// Another process drives the rollout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "rollout {rollout} is being run by process {pid} on {host} (last seen {renewed}); wait for it to end or stop it; a process that was killed is taken over {stale} s after it was last seen"
)]
pub struct Busy {
    /// The rollout.
    pub rollout: String,
    /// Its driver's host.
    pub host: String,
    /// Its driver's process ID.
    pub pid: u32,
    /// When it was last seen.
    pub renewed: Timestamp,
    /// [`STALE_AFTER`] in seconds.
    pub stale: u64,
}

/// Whether `me` may drive the rollout whose budget records `current`. `alive(pid)` says whether
/// a process of this host runs.
///
/// # Errors
/// [`Busy`] while another live process drives it.
pub fn may_drive(
    rollout: &str,
    current: Option<&Driver>,
    me: &Driver,
    now: Timestamp,
    alive: impl Fn(u32) -> bool,
) -> Result<(), Busy> {
    let Some(c) = current else {
        return Ok(());
    };
    let stale = SignedDuration::try_from(STALE_AFTER).unwrap_or(SignedDuration::from_secs(90));
    let same_host = !c.host.is_empty() && c.host == me.host;
    if c.is(me)
        || (same_host && !alive(c.pid))
        || c.renewed.saturating_add(stale).is_ok_and(|t| t < now)
    {
        return Ok(());
    }
    Err(Busy {
        rollout: rollout.into(),
        host: if c.host.is_empty() {
            "an unknown host".into()
        } else {
            c.host.clone()
        },
        pid: c.pid,
        renewed: c.renewed,
        stale: STALE_AFTER.as_secs(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn driver(host: &str, pid: u32, renewed: i64) -> Driver {
        Driver {
            host: host.into(),
            pid,
            renewed: t(renewed),
        }
    }

    #[rstest]
    #[case::nobody(None, true, true)]
    #[case::itself(Some(driver("a", 1, 0)), true, true)]
    #[case::live_on_this_host(Some(driver("a", 2, 0)), true, false)]
    #[case::dead_on_this_host(Some(driver("a", 2, 0)), false, true)]
    #[case::fresh_elsewhere(Some(driver("b", 1, -89)), false, false)]
    #[case::stale_elsewhere(Some(driver("b", 1, -91)), false, true)]
    #[case::unknown_host_is_not_this_one(Some(driver("", 2, 0)), false, false)]
    fn taking_over(#[case] current: Option<Driver>, #[case] alive: bool, #[case] ok: bool) {
        let me = Driver {
            host: "a".into(),
            pid: 1,
            renewed: t(0),
        };
        let got = may_drive("up", current.as_ref(), &me, t(0), |_| alive);
        assert_eq!(got.is_ok(), ok, "{got:?}");
    }

    #[test]
    fn the_refusal_says_who_and_how_long() {
        let me = driver("a", 1, 0);
        let err = may_drive("up", Some(&driver("b", 7, -5)), &me, t(0), |_| true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rollout up is being run by process 7 on b (last seen 2027-01-15T07:59:55Z); wait for it to end or stop it; a process that was killed is taken over 90 s after it was last seen"
        );
    }
}
