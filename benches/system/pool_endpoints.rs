//! Issue 43's figure in the pool part: for every pod of the rows behind a Service (the pods that
//! may declare `endpoints.evictord.dev`) that was on a drained node when the drain began and whose
//! deletion was seen, how long before its deletion began it had left the ready addresses of its
//! Service — in the Endpoints and in the EndpointSlices, the later of the two counting — as the
//! bench process's watches saw them (one clock). Negative: still a ready address when its
//! deletion began (what `kubectl drain` alone does: the pod gets SIGTERM while it still serves).

use serde::Serialize;

use crate::pool_report::ok_modes;
use crate::pool_results::PoolResults;
use crate::support::endpoints::{Source, Timeline};
use crate::support::pool::Pool;
use crate::support::pool::workloads::{self, MIX, ROW_LABEL};

/// What one mode's pods behind a Service went through.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EndpointsFigures {
    /// The pods behind a Service on the drained nodes when the drain began.
    pub pods: usize,
    /// Of those, the ones whose deletion was seen.
    pub deleted: usize,
    /// Seconds out of the ready addresses before the deletion began: least, median, most.
    pub least: Option<f64>,
    pub median: Option<f64>,
    pub most: Option<f64>,
    /// Deleted pods out for less than the delay, and deleted pods that were still a ready
    /// address when their deletion began.
    pub under_delay: usize,
    pub still_serving: usize,
    /// The delay the pods ask for.
    pub delay_seconds: f64,
    /// The pods declared `endpoints.evictord.dev` (served in this mode).
    pub declared: bool,
}

/// The UIDs of the pods behind a Service on the pool's drained nodes now (call it right before
/// the drain).
pub fn watched(pool: &Pool) -> Vec<String> {
    let rows: Vec<&str> = MIX
        .iter()
        .filter(|r| workloads::has_service(r))
        .map(|r| r.name)
        .collect();
    let drained = pool.drained_set();
    pool.played
        .pods()
        .state()
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ROW_LABEL))
                    .is_some_and(|r| rows.contains(&r.as_str()))
                && p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| drained.contains(n))
        })
        .filter_map(|p| p.metadata.uid.clone())
        .collect()
}

/// The figures of `uids` from `timeline`, after the drain.
pub fn figures(timeline: &Timeline, uids: &[String], declared: bool) -> EndpointsFigures {
    let delay = workloads::DEREGISTRATION_DELAY_SECONDS as f64;
    let mut gaps: Vec<f64> = uids
        .iter()
        .filter_map(|u| {
            let e = timeline.out_before_deletion(u, Source::Endpoints)?;
            let s = timeline.out_before_deletion(u, Source::Slices)?;
            Some(e.min(s))
        })
        .collect();
    gaps.sort_by(f64::total_cmp);
    EndpointsFigures {
        pods: uids.len(),
        deleted: gaps.len(),
        least: gaps.first().copied(),
        median: gaps.get(gaps.len() / 2).copied(),
        most: gaps.last().copied(),
        under_delay: gaps.iter().filter(|g| **g < delay).count(),
        still_serving: gaps.iter().filter(|g| **g <= 0.0).count(),
        delay_seconds: delay,
        declared,
    }
}

fn seconds(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// `REPORT.md`'s table of issue 43's figure, one line per mode.
pub fn table(p: &PoolResults) -> String {
    let mut o = format!(
        "Pods behind a Service (row `dw`; they ask for a {} s deregistration delay) on the drained nodes at the start: how long before its deletion began each had left its Service's ready addresses, in the Endpoints and the EndpointSlices (the later counting), from the bench's own watches. Negative: still a ready address when its deletion began (by then the pod is told to stop, and still gets traffic); `+endpoints`: evictord serves `endpoints.evictord.dev` and the pods declare it (issue 43).\n\n| mode | pods there, deleted | out before deletion, s: least / median / most | deleted while a ready address | out less than the delay |\n|---|---|---|---|---|\n",
        workloads::DEREGISTRATION_DELAY_SECONDS
    );
    for m in ok_modes(p) {
        let e = &m.endpoints;
        o += &format!(
            "| `{}` | {}, {} | {} / {} / {} | {} | {} |\n",
            m.id,
            e.pods,
            e.deleted,
            seconds(e.least),
            seconds(e.median),
            seconds(e.most),
            e.still_serving,
            e.under_delay,
        );
    }
    o + "\n"
}
