//! The pool part's rows of the goals table: issue 35's (every evictord mode: no Deployment under
//! the goal below desired, no PodDisruptionBudget floor broken, the drained nodes emptied, the
//! drain at most [`TIME_RATIO`] × `kubectl drain` alone) and issue 41's (the rollouts: never more
//! nodes unavailable than `--max-unavailable` allows, the rollout at most [`ROLL_RATIO`] × the
//! node-after-node script, with `--cordon-first` every pod moved once) and issue 43's (the
//! `+endpoints` modes: every pod that declares the interceptor out of its Services' ready
//! addresses for at least its delay before its deletion, the drain at most [`ENDPOINTS_RATIO`] ×
//! the same mode without it, plus the delay once per drain that waits for it in sequence). The
//! modes without
//! evictord get a reported row each. Issue 44's rows (kube-apiserver's requests by client) are
//! [`crate::pool_clients::goals`]'s, against the same counterpart.

use crate::goal_row::{Goal, Verdict};
use crate::pool_mode::Drainer;
use crate::pool_report::{by_row, drain_time, moves, ok_modes, unavailable};
use crate::pool_results::{ModeResult, PoolResults};
use crate::results::Report;
use crate::support::pool::workloads::{Kind, Variant};

/// The time goal of issue 35: evictord's drain at most this many times kubectl drain's alone.
pub const TIME_RATIO: f64 = 1.5;
/// The time goal of issue 41: a rollout at most this many times the node-after-node script.
pub const ROLL_RATIO: f64 = 0.6;
/// The time goal of issue 43: a `+endpoints` mode at most this many times the same mode without
/// the interceptor, plus the pods' deregistration delay for each drain that waits for it in
/// sequence ([`delays_in_sequence`]).
pub const ENDPOINTS_RATIO: f64 = 1.2;

fn goal(issue: &str, what: String, measured: String, target: &str, verdict: Verdict) -> Goal {
    Goal {
        goal: issue.into(),
        what,
        measured,
        target: target.into(),
        verdict,
    }
}

/// The issue a mode's rows belong to.
fn issue(m: &ModeResult) -> &'static str {
    if m.mode.drainer.rolls() { "41" } else { "35" }
}

/// The mode a drain's time is compared with: the same pool; `kubectl drain` alone in the same
/// form for the kubectl modes, in one call for a NodeMaintenance (every node at once), the script
/// alone for the script with evictord and for the rollouts.
fn counterpart<'a>(p: &'a PoolResults, m: &ModeResult) -> Option<&'a ModeResult> {
    let drainer = match m.mode.drainer {
        Drainer::NodeMaintenance => Drainer::KubectlAll,
        Drainer::Rollout | Drainer::RolloutCordonFirst => Drainer::ScriptEach,
        d => d,
    };
    ok_modes(p)
        .into_iter()
        .find(|o| !o.mode.evictord && o.mode.variant == m.mode.variant && o.mode.drainer == drainer)
}

/// The script with evictord on the same pool, beside which a rollout's time is also shown.
fn script_with_evictord<'a>(p: &'a PoolResults, m: &ModeResult) -> Option<&'a ModeResult> {
    ok_modes(p).into_iter().find(|o| {
        o.mode.evictord && o.mode.variant == m.mode.variant && o.mode.drainer == Drainer::ScriptEach
    })
}

/// The goals table's rows for the pool part.
pub fn goals(r: &Report, out: &mut Vec<Goal>) {
    let p = match &r.pool {
        None => return,
        Some(Err(e)) => {
            out.push(goal(
                "35",
                "pool: zero downtime, PDB floors, nodes emptied, time".into(),
                format!("part failed: {}", e.lines().next().unwrap_or_default()),
                "",
                Verdict::NotMeasured,
            ));
            return;
        }
        Some(Ok(p)) => p,
    };
    for o in &p.modes {
        match &o.result {
            Ok(m) => {
                mode_goals(p, m, out);
                crate::pool_clients::goals(m, counterpart(p, m), out);
            }
            Err(e) => out.push(goal(
                if o.id.contains("script") || o.id.contains("rollout") {
                    "41"
                } else {
                    "35"
                },
                format!("pool `{}`", o.id),
                format!("mode failed: {}", e.lines().next().unwrap_or_default()),
                "",
                Verdict::NotMeasured,
            )),
        }
    }
}

fn mode_goals(p: &PoolResults, m: &ModeResult, out: &mut Vec<Goal>) {
    let g = issue(m);
    if !m.mode.evictord {
        out.push(goal(
            g,
            format!(
                "pool `{}`: {} alone",
                m.id,
                if m.mode.drainer == Drainer::ScriptEach {
                    "the script (kubectl drain, step, kubectl uncordon, node after node)"
                } else {
                    "kubectl drain"
                }
            ),
            format!(
                "{}; Deployments {:.1} replica-s below desired ({}), min {:.2} of desired; StatefulSets {:.1}; {} PDB floors broken; {} pods left on the drained nodes; pods moved {}; at most {} nodes unavailable at once",
                drain_time(m),
                m.deployment_replica_seconds,
                by_row(m, Kind::Deployment),
                m.deployment_min_ratio,
                m.statefulset_replica_seconds,
                m.floors_broken.len(),
                m.pods_left_on_drained.len(),
                moves(m),
                m.most_unavailable.count
            ),
            "reported",
            Verdict::Reported,
        ));
        return;
    }
    let unserved: Vec<String> = m
        .rows
        .iter()
        .filter(|r| r.kind == Kind::Deployment && !r.goal)
        .map(|r| {
            let missing: Vec<&str> = r
                .declared
                .iter()
                .filter(|d| !r.carried.contains(d))
                .map(String::as_str)
                .collect();
            format!(
                "{}'s pods carry {} only: {} not served by this build",
                r.row,
                r.carried.join(","),
                missing.join(",")
            )
        })
        .collect();
    out.push(goal(
        g,
        format!(
            "pool `{}`: every Deployment (1-replica, 3-replica, HPA-scaled) below desired",
            m.id
        ),
        format!(
            "{:.1} replica-s ({}){}",
            m.deployment_replica_seconds,
            by_row(m, Kind::Deployment),
            if unserved.is_empty() {
                String::new()
            } else {
                format!("; {}", unserved.join("; "))
            }
        ),
        "0 replica-s",
        Verdict::of(m.deployment_replica_seconds == 0.0),
    ));
    out.push(goal(
        g,
        format!("pool `{}`: PodDisruptionBudget floors broken", m.id),
        if m.floors_broken.is_empty() {
            "none".into()
        } else {
            format!("{}: {}", m.floors_broken.len(), m.floors_broken.join(", "))
        },
        "none",
        Verdict::of(m.floors_broken.is_empty()),
    ));
    out.push(goal(
        g,
        format!(
            "pool `{}`: pods left on the drained nodes (DaemonSet pods apart)",
            m.id
        ),
        format!(
            "{} ({}; DaemonSet pods left: {})",
            m.pods_left_on_drained.len(),
            drain_time(m),
            m.daemonset_pods_left_on_drained
        ),
        "0, drain done",
        Verdict::of(m.completed && m.pods_left_on_drained.is_empty()),
    ));
    if m.mode.drainer.is_rollout() {
        budget_goal(m, out);
    }
    if m.mode.endpoints {
        // Its time goal is issue 43's: beside the same mode without the interceptor.
        endpoints_goals(p, m, out);
    } else {
        time_goal(p, m, out);
    }
    if m.mode.drainer == Drainer::RolloutCordonFirst {
        let once = m.pods_at_start > 0 && m.pods_evicted == m.pods_at_start;
        out.push(goal(
            "41",
            format!(
                "pool `{}`: pods moved ÷ pods on the rolled nodes at the start",
                m.id
            ),
            moves(m),
            "1.00",
            Verdict::of(once),
        ));
    }
}

/// Issue 41: never more nodes unavailable than the budget allows, sampled every 100 ms. Without
/// `--cordon-first` every node evictord takes is cordoned: the cordoned or NotReady nodes count
/// (what anyone sees), and the budget's own count besides. With it every node is cordoned from
/// the start by design (the budget does not count those): the budget's count (nodes held by an
/// admitted maintenance, or NotReady) is the figure.
fn budget_goal(m: &ModeResult, out: &mut Vec<Goal>) {
    let Some(allowed) = m.allowed_unavailable else {
        return;
    };
    let held = m.most_held.as_ref();
    let (figure, measured) = match m.mode.drainer {
        Drainer::RolloutCordonFirst => (
            held.map(|h| h.count),
            format!(
                "held by an admitted NodeMaintenance or NotReady: **{}**; cordoned or NotReady: {} (--cordon-first cordons every rolled node)",
                held.map_or("not watched".into(), unavailable),
                unavailable(&m.most_unavailable)
            ),
        ),
        _ => (
            Some(m.most_unavailable.count.max(held.map_or(0, |h| h.count))),
            format!(
                "cordoned or NotReady: **{}**; held by an admitted NodeMaintenance or NotReady: {}",
                unavailable(&m.most_unavailable),
                held.map_or("not watched".into(), unavailable)
            ),
        ),
    };
    out.push(goal(
        "41",
        format!(
            "pool `{}`: the most nodes unavailable at once (sampled every 100 ms)",
            m.id
        ),
        measured,
        &format!("≤ {allowed} (--max-unavailable)"),
        figure.map_or(Verdict::NotMeasured, |f| Verdict::of(f <= allowed)),
    ));
}

fn time_goal(p: &PoolResults, m: &ModeResult, out: &mut Vec<Goal>) {
    let (target, judged) = match m.mode.drainer {
        Drainer::Rollout | Drainer::RolloutCordonFirst => (ROLL_RATIO, true),
        Drainer::ScriptEach => (f64::NAN, false),
        _ => (TIME_RATIO, true),
    };
    let beside = script_with_evictord(p, m)
        .filter(|s| m.mode.drainer.is_rollout() && s.completed)
        .map_or(String::new(), |s| {
            format!(
                "; ÷ `{}` ({:.0} s): {:.2}",
                s.id,
                s.completion_seconds,
                m.completion_seconds / s.completion_seconds.max(1e-9)
            )
        });
    match counterpart(p, m) {
        Some(k) if k.completed => {
            let ratio = m.completion_seconds / k.completion_seconds.max(1e-9);
            out.push(goal(
                issue(m),
                format!("pool `{}`: drain time ÷ `{}`", m.id, k.id),
                format!(
                    "{:.0} s ÷ {:.0} s = **{ratio:.2}**{}{beside}",
                    m.completion_seconds,
                    k.completion_seconds,
                    if m.completed {
                        ""
                    } else {
                        " (evictord's drain not done)"
                    }
                ),
                &if judged {
                    format!("≤ {target}")
                } else {
                    "reported".into()
                },
                if judged {
                    Verdict::of(m.completed && ratio <= target)
                } else {
                    Verdict::Reported
                },
            ));
        }
        Some(k) if m.mode.variant == Variant::Full => out.push(goal(
            issue(m),
            format!("pool `{}`: drain time", m.id),
            format!(
                "{}; `{}` {}: no time to compare{beside}",
                drain_time(m),
                k.id,
                drain_time(k)
            ),
            "reported",
            Verdict::Reported,
        )),
        None if m.mode.drainer.is_rollout() => {
            // On the full pool the script alone never finishes (the 1-replica budgets): there
            // is no time of its to compare with, by design.
            let full = m.mode.variant == Variant::Full;
            out.push(goal(
                "41",
                format!("pool `{}`: rollout time ÷ the script alone", m.id),
                format!(
                    "{}; no `{}/script-each` in this run to compare with{beside}",
                    drain_time(m),
                    m.mode.variant.label()
                ),
                &if full {
                    "reported".into()
                } else {
                    format!("≤ {target}")
                },
                if full {
                    Verdict::Reported
                } else {
                    Verdict::NotMeasured
                },
            ))
        }
        _ => {}
    }
}

/// Issue 43's rows for a `+endpoints` mode.
fn endpoints_goals(p: &PoolResults, m: &ModeResult, out: &mut Vec<Goal>) {
    let e = &m.endpoints;
    out.push(goal(
        "43",
        format!(
            "pool `{}`: pods declaring endpoints.evictord.dev, out of every ready endpoint before their deletion",
            m.id
        ),
        format!(
            "least {} s (median {} s) over {} deleted of {} on the drained nodes; {} out for less than the delay, {} deleted while still a ready address",
            e.least.map_or("-".into(), |v| format!("{v:.1}")),
            e.median.map_or("-".into(), |v| format!("{v:.1}")),
            e.deleted,
            e.pods,
            e.under_delay,
            e.still_serving
        ),
        &format!("≥ {:.0} s each", e.delay_seconds),
        if e.deleted == 0 {
            Verdict::NotMeasured
        } else {
            Verdict::of(e.declared && e.under_delay == 0)
        },
    ));
    let base = ok_modes(p).into_iter().find(|o| {
        !o.mode.endpoints
            && o.mode.evictord
            && o.mode.variant == m.mode.variant
            && o.mode.drainer == m.mode.drainer
    });
    let waits = delays_in_sequence(p, m);
    let target = format!(
        "≤ {ENDPOINTS_RATIO} × without + the delay × the drains one after the other ({waits} × {:.0} s)",
        e.delay_seconds
    );
    match base {
        Some(b) if b.completed => {
            let allowed = ENDPOINTS_RATIO * b.completion_seconds + waits as f64 * e.delay_seconds;
            out.push(goal(
                "43",
                format!("pool `{}`: drain time beside `{}`", m.id, b.id),
                format!(
                    "{:.0} s; without: {:.0} s, so at most {allowed:.0} s{}",
                    m.completion_seconds,
                    b.completion_seconds,
                    if m.completed { "" } else { " (not completed)" }
                ),
                &target,
                Verdict::of(m.completed && m.completion_seconds <= allowed),
            ));
        }
        _ => out.push(goal(
            "43",
            format!(
                "pool `{}`: drain time beside the same mode without the interceptor",
                m.id
            ),
            "that mode did not run (or did not complete) in this run".into(),
            &target,
            Verdict::NotMeasured,
        )),
    }
}

/// How many drains of a mode wait for the delay one after the other: a pod's delay runs while
/// the others of its drain wait too, so one drain pays it once; a node-after-node drain pays it
/// once per node — `kubectl drain` given every node too: it cordons them all, then drains one
/// node after the other ("node/… drained" before the next node's first eviction) —, a rollout
/// once per batch of nodes it takes at once, a NodeMaintenance of every node once.
fn delays_in_sequence(p: &PoolResults, m: &ModeResult) -> usize {
    match m.mode.drainer {
        Drainer::NodeMaintenance => 1,
        Drainer::KubectlAll | Drainer::KubectlEach | Drainer::ScriptEach => p.drained,
        Drainer::Rollout | Drainer::RolloutCordonFirst => p
            .drained
            .div_ceil(m.allowed_unavailable.unwrap_or(1).max(1)),
    }
}
