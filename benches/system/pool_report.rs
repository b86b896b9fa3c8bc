//! The pool part in `REPORT.md` (a table per mode, where the time and the availability went)
//! and its rows of the goals table (issue 35).

use crate::goal_row::{Goal, Verdict};
use crate::pool_mode::Drainer;
use crate::pool_results::{ModeResult, PoolResults};
use crate::results::Report;
use crate::support::pool::workloads::{self, Kind, Variant};

/// The time goal: evictord's drain at most this many times kubectl drain's alone.
pub const TIME_RATIO: f64 = 1.5;

fn ok_modes(p: &PoolResults) -> Vec<&ModeResult> {
    p.modes
        .iter()
        .filter_map(|m| m.result.as_ref().ok())
        .collect()
}

/// The kubectl-alone mode an evictord mode is compared with: the same pool, the same kubectl
/// form; a NodeMaintenance (every node at once) against the one-call form.
fn counterpart<'a>(p: &'a PoolResults, m: &ModeResult) -> Option<&'a ModeResult> {
    let drainer = match m.mode.drainer {
        Drainer::NodeMaintenance => Drainer::KubectlAll,
        d => d,
    };
    ok_modes(p)
        .into_iter()
        .find(|o| !o.mode.evictord && o.mode.variant == m.mode.variant && o.mode.drainer == drainer)
}

fn by_row(m: &ModeResult, kind: Kind) -> String {
    m.rows
        .iter()
        .filter(|r| r.kind == kind)
        .map(|r| format!("{} {:.1}", r.row, r.replica_seconds))
        .collect::<Vec<_>>()
        .join(", ")
}

fn drain_time(m: &ModeResult) -> String {
    if m.completed {
        format!("{:.0} s", m.completion_seconds)
    } else if m.stopped_at_timeout {
        format!("not done at the {:.0} s timeout", m.completion_seconds)
    } else {
        format!("failed after {:.0} s", m.completion_seconds)
    }
}

/// The goals table's rows for the pool part.
pub fn goals(r: &Report, out: &mut Vec<Goal>) {
    let p = match &r.pool {
        None => return,
        Some(Err(e)) => {
            out.push(Goal {
                goal: "35".into(),
                what: "pool: zero downtime, PDB floors, nodes emptied, time".into(),
                measured: format!("part failed: {}", e.lines().next().unwrap_or_default()),
                target: "".into(),
                verdict: Verdict::NotMeasured,
            });
            return;
        }
        Some(Ok(p)) => p,
    };
    for o in &p.modes {
        let m = match &o.result {
            Ok(m) => m,
            Err(e) => {
                out.push(Goal {
                    goal: "35".into(),
                    what: format!("pool `{}`", o.id),
                    measured: format!("mode failed: {}", e.lines().next().unwrap_or_default()),
                    target: "".into(),
                    verdict: Verdict::NotMeasured,
                });
                continue;
            }
        };
        if !m.mode.evictord {
            out.push(Goal {
                goal: "35".into(),
                what: format!("pool `{}`: kubectl drain alone", m.id),
                measured: format!(
                    "{}; Deployments {:.1} replica-s below desired ({}), min {:.2} of desired; StatefulSets {:.1}; {} PDB floors broken; {} pods left on the drained nodes",
                    drain_time(m),
                    m.deployment_replica_seconds,
                    by_row(m, Kind::Deployment),
                    m.deployment_min_ratio,
                    m.statefulset_replica_seconds,
                    m.floors_broken.len(),
                    m.pods_left_on_drained.len()
                ),
                target: "reported".into(),
                verdict: Verdict::Reported,
            });
            continue;
        }
        let unserved: Vec<String> = m
            .rows
            .iter()
            .filter(|r| r.kind == Kind::Deployment && !r.goal)
            .map(|r| {
                let missing: Vec<&String> = r
                    .declared
                    .iter()
                    .filter(|d| !r.carried.contains(d))
                    .collect();
                format!(
                    "{}'s pods carry {} only: {} not served by this build",
                    r.row,
                    r.carried.join(","),
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect();
        out.push(Goal {
            goal: "35".into(),
            what: format!(
                "pool `{}`: every Deployment (1-replica, 3-replica, HPA-scaled) below desired",
                m.id
            ),
            measured: format!(
                "{:.1} replica-s ({}){}",
                m.deployment_replica_seconds,
                by_row(m, Kind::Deployment),
                if unserved.is_empty() {
                    String::new()
                } else {
                    format!("; {}", unserved.join("; "))
                }
            ),
            target: "0 replica-s".into(),
            verdict: Verdict::of(m.deployment_replica_seconds == 0.0),
        });
        out.push(Goal {
            goal: "35".into(),
            what: format!("pool `{}`: PodDisruptionBudget floors broken", m.id),
            measured: if m.floors_broken.is_empty() {
                "none".into()
            } else {
                format!("{}: {}", m.floors_broken.len(), m.floors_broken.join(", "))
            },
            target: "none".into(),
            verdict: Verdict::of(m.floors_broken.is_empty()),
        });
        out.push(Goal {
            goal: "35".into(),
            what: format!(
                "pool `{}`: pods left on the drained nodes (DaemonSet pods apart)",
                m.id
            ),
            measured: format!(
                "{} ({}; DaemonSet pods left: {})",
                m.pods_left_on_drained.len(),
                drain_time(m),
                m.daemonset_pods_left_on_drained
            ),
            target: "0, drain done".into(),
            verdict: Verdict::of(m.completed && m.pods_left_on_drained.is_empty()),
        });
        match counterpart(p, m) {
            Some(k) if k.completed => {
                let ratio = m.completion_seconds / k.completion_seconds.max(1e-9);
                out.push(Goal {
                    goal: "35".into(),
                    what: format!("pool `{}`: drain time ÷ `{}`", m.id, k.id),
                    measured: format!(
                        "{:.0} s ÷ {:.0} s = **{ratio:.2}**{}",
                        m.completion_seconds,
                        k.completion_seconds,
                        if m.completed {
                            ""
                        } else {
                            " (evictord's drain not done)"
                        }
                    ),
                    target: format!("≤ {TIME_RATIO}"),
                    verdict: Verdict::of(m.completed && ratio <= TIME_RATIO),
                });
            }
            Some(k) if m.mode.variant == Variant::Full => out.push(Goal {
                goal: "35".into(),
                what: format!("pool `{}`: drain time", m.id),
                measured: format!(
                    "{}; `{}` {}: no time to compare",
                    drain_time(m),
                    k.id,
                    drain_time(k)
                ),
                target: "reported".into(),
                verdict: Verdict::Reported,
            }),
            _ => {}
        }
    }
}

/// The pool section of `REPORT.md`.
pub fn markdown(part: Option<&Result<PoolResults, String>>) -> String {
    let mut o =
        String::from("## 5. A node pool drained side by side with `kubectl drain` (issue 35)\n\n");
    let p = match part {
        None => return o + "Not run.\n\n",
        Some(Err(e)) => return o + &format!("**Failed**: {e}\n\n"),
        Some(Ok(p)) => p,
    };
    o += &format!(
        "kube-apiserver v1.20 + etcd + kube-controller-manager (deployment, replicaset, statefulset, daemonset, disruption, horizontal-pod-autoscaler controllers; its default client rate of 20 requests/s) on this machine; a played scheduler and kubelet (`tests/support/pool/`: watch-driven; least-loaded node honouring `spec.unschedulable`, taints, tolerations and node affinity; a pod Running and Ready {:.0} s after binding; a deleted pod gone {:.0} s later, or its own shorter grace period). **{} nodes, {} drained**, each mode on a fresh pool of about {} pods (*full*), or the same without the 1-replica Deployments behind `minAvailable: 1` (*finishable*: `kubectl drain` alone waits forever on those). `kubectl drain` (v1.35, the real binary) with `{}` (DaemonSet pods stay; bare pods need `--force`) and `--timeout={:.0}s` per call: *each* = one call per node, the loop going on when a call fails; *all* = one call for every drained node. `evictord+`: `evictord serve` (release) started on the settled pool with {}, webhooks registered (the Eviction API bridge among them); without it, none. A mode is stopped after {:.0} s.\n\n",
        p.start_delay_seconds,
        p.grace_seconds,
        p.nodes,
        p.drained,
        p.pods,
        p.kubectl_flags.join(" "),
        p.node_timeout_seconds,
        if p.evictord_flags.is_empty() {
            "its default flags".to_string()
        } else {
            format!("`{}`", p.evictord_flags.join(" "))
        },
        p.timeout_seconds
    );
    o += "Sampled every 100 ms from the played kubelet's watch cache, from the drain's start until every Deployment and StatefulSet is back (at most 120 s after the drain): a pod is *available* when Running, Ready and not terminating; *desired* is the workload's replica count before the drain; *unavailability* is Σ max(0, desired − available) × time, in replica-seconds; a PDB *floor is broken* when available < `minAvailable` or desired − available > `maxUnavailable`. kube-apiserver's requests are its own counters over the same window (every client: the controllers, the played kubelet, kubectl, evictord), per pod that left a drained node.\n\n";
    o += "| row | workloads | declared interceptors | carried (served by this build) |\n|---|---|---|---|\n";
    let first = ok_modes(p)
        .into_iter()
        .find(|m| m.mode.variant == Variant::Full)
        .or_else(|| ok_modes(p).into_iter().next());
    for row in &p.mix {
        let found = first.and_then(|m| m.rows.iter().find(|r| r.row == row.name));
        let carried = workloads::declared(row, &p.served);
        o += &format!(
            "| `{}`: {} | {} | {} | {} |\n",
            row.name,
            row.what,
            found.map_or("-".into(), |r| r.workloads.to_string()),
            if row.interceptors.is_empty() {
                "-".into()
            } else {
                row.interceptors.join(", ")
            },
            if carried.is_empty() {
                "-".into()
            } else {
                carried.join(", ")
            },
        );
    }
    o += "\n| mode | drain | Deployments below desired, replica-s (by row) | Deployments' min available ÷ desired | StatefulSets, replica-s | PDB floors broken | pods left on drained nodes (+ DaemonSet) | pods evicted | kube-apiserver requests per evicted pod | evictord CPU, peak RSS | plot |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for outcome in &p.modes {
        let m = match &outcome.result {
            Ok(m) => m,
            Err(e) => {
                o += &format!(
                    "| `{}` | **failed**: {} |||||||||\n",
                    outcome.id,
                    e.lines().next().unwrap_or_default()
                );
                continue;
            }
        };
        o += &format!(
            "| `{}` | {} | **{:.1}** ({}) | {:.2} | {:.1} | {} | {} (+{}) | {} | {:.1} | {} | {} |\n",
            m.id,
            drain_time(m),
            m.deployment_replica_seconds,
            by_row(m, Kind::Deployment),
            m.deployment_min_ratio,
            m.statefulset_replica_seconds,
            m.floors_broken.len(),
            m.pods_left_on_drained.len(),
            m.daemonset_pods_left_on_drained,
            m.pods_evicted,
            m.api_requests_per_evicted_pod,
            match (m.evictord_cpu_seconds, m.evictord_peak_rss_bytes) {
                (Some(c), Some(r)) => format!(
                    "{c:.1} s ({:.2} cores), {:.0} MiB",
                    m.evictord_cpu_cores.unwrap_or(0.0),
                    r as f64 / 1048576.0
                ),
                _ => "-".into(),
            },
            m.files
                .iter()
                .find(|f| f.ends_with(".svg"))
                .map_or("-".into(), |f| format!("[svg]({f})")),
        );
    }
    o += "\n";
    for m in ok_modes(p) {
        o += &details(m);
    }
    o
}

/// Where one mode's time and availability went.
fn details(m: &ModeResult) -> String {
    let mut o = format!(
        "### `{}`\n\n- Pool: {} pods created in {:.0} s, settled in {:.0} s{}; drain {}; Deployments and StatefulSets back {:.0} s later{}; {} samples over {:.0} s; played scheduler and kubelet: {}.\n",
        m.id,
        m.pods,
        m.create_seconds,
        m.settle_seconds,
        m.evictord_start_seconds.map_or(String::new(), |s| format!(
            "; evictord ready and registered in {s:.1} s"
        )),
        drain_time(m),
        m.restore_seconds,
        if m.restored {
            ""
        } else {
            " (not all: the restore wait gave up)"
        },
        m.samples,
        m.sampled_seconds,
        m.played
    );
    if !m.calls.is_empty() {
        let failed: Vec<_> = m.calls.iter().filter(|c| c.exit_code != Some(0)).collect();
        let secs: Vec<String> = m
            .calls
            .iter()
            .map(|c| format!("{:.0}", c.seconds))
            .collect();
        o += &format!(
            "- kubectl drain: {} calls ({} s each){}.\n",
            m.calls.len(),
            secs.join(", "),
            failed.first().map_or(String::new(), |c| format!(
                "; {} failed or were stopped, the first on {}: `{}`",
                failed.len(),
                c.nodes.first().map(String::as_str).unwrap_or_default(),
                c.last_line
                    .replace('|', "\\|")
                    .chars()
                    .take(300)
                    .collect::<String>()
            ))
        );
    }
    for r in m
        .rows
        .iter()
        .filter(|r| r.with_loss > 0 || r.floors_broken > 0)
    {
        o += &format!(
            "- `{}` ({}): {} of {} workloads lost availability ({} had pods on the drained nodes), {:.1} replica-s in all, the worst `{}` (min {:.2} of desired){}.\n",
            r.row,
            r.what,
            r.with_loss,
            r.workloads,
            r.moved,
            r.replica_seconds,
            r.worst,
            r.min_ratio,
            if r.floors_broken > 0 {
                format!("; {} PDB floors broken", r.floors_broken)
            } else {
                String::new()
            }
        );
    }
    let mut plotted = vec![("Worst workload", m.worst.as_ref())];
    if m.worst_deployment.as_ref().map(|w| &w.workload) != m.worst.as_ref().map(|w| &w.workload) {
        plotted.push((
            "Worst Deployment under the goal",
            m.worst_deployment.as_ref(),
        ));
    }
    for (what, w) in plotted {
        let Some(w) = w else { continue };
        o += &format!(
            "- {what} (plotted): `{}` ({}), {:.1} replica-s, min {}/{}{}.\n",
            w.workload,
            w.row,
            w.replica_seconds,
            w.min_available,
            w.desired,
            if w.messages.is_empty() {
                String::new()
            } else {
                format!(
                    "; its EvictionRequests said: {}",
                    w.messages
                        .iter()
                        .map(|s| format!(
                            "`{}`",
                            s.replace('|', "\\|").chars().take(200).collect::<String>()
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        );
    }
    if let Some(r) = &m.requests {
        o += &format!(
            "- EvictionRequests: {} ({} Evicted), creation → Evicted median {:.1} s, max {:.1} s; {} had an Eviction API call refused (PDB), {} refusals in all. Active time per interceptor (median / max): {}.\n",
            r.requests,
            r.evicted,
            r.median_seconds,
            r.max_seconds,
            r.with_refused_evictions,
            r.refused_evictions,
            r.interceptors
                .iter()
                .map(|i| format!(
                    "`{}` {} × {:.1} / {:.1} s",
                    i.name, i.activations, i.median_active_seconds, i.max_active_seconds
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !m.last_departures.is_empty() {
        o += &format!(
            "- Last pods to leave the drained nodes: {}.\n",
            m.last_departures
                .iter()
                .map(|d| format!("`{}` ({}) at {:.1} s", d.pod, d.row, d.t))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !m.pods_left_on_drained.is_empty() {
        o += &format!(
            "- Left on the drained nodes: {}{}.\n",
            m.pods_left_on_drained
                .iter()
                .take(8)
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if m.pods_left_on_drained.len() > 8 {
                format!(" and {} more", m.pods_left_on_drained.len() - 8)
            } else {
                String::new()
            }
        );
    }
    o += &format!(
        "- kube-apiserver: {:.1} requests ({:.1} writes) per evicted pod; the most: {}; webhook calls per evicted pod: {}. CPU over the window: kube-apiserver {}, etcd {} cores.\n",
        m.api_requests_per_evicted_pod,
        m.api_writes_per_evicted_pod,
        m.api_requests_top
            .iter()
            .take(6)
            .map(|(k, v)| format!("`{k}` {v:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        if m.webhook_calls_per_evicted_pod.is_empty() {
            "none".into()
        } else {
            m.webhook_calls_per_evicted_pod
                .iter()
                .map(|(k, v)| format!("`{k}` {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        m.kube_apiserver_cpu_cores
            .map_or("?".into(), |c| format!("{c:.2}")),
        m.etcd_cpu_cores.map_or("?".into(), |c| format!("{c:.2}")),
    );
    if !m.apiserver_histograms.is_empty() {
        o += &format!(
            "- kube-apiserver's own histograms, the series that took the most time (calls, mean, p99 bucket bound): {}.\n",
            m.apiserver_histograms
                .iter()
                .map(|d| format!(
                    "`{}` {:.0} × {:.1} ms (≤ {} ms)",
                    d.series,
                    d.count,
                    d.mean_ms,
                    if d.p99_le_ms.is_finite() {
                        format!("{:.0}", d.p99_le_ms)
                    } else {
                        "+Inf".into()
                    }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    o + &format!(
        "- Files: {}.\n\n",
        m.files
            .iter()
            .map(|f| format!("[{f}]({f})"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}
