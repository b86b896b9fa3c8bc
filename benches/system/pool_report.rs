//! The pool part in `REPORT.md` (a table per mode, where the time and the availability went;
//! issues 35 and 41). Its rows of the goals table are [`crate::pool_goals`]'s.

use crate::pool_results::{Call, ModeResult, PoolResults};
use crate::support::pool::nodes::Peak;
use crate::support::pool::workloads::{self, Kind, Variant};

pub fn ok_modes(p: &PoolResults) -> Vec<&ModeResult> {
    p.modes
        .iter()
        .filter_map(|m| m.result.as_ref().ok())
        .collect()
}

pub fn by_row(m: &ModeResult, kind: Kind) -> String {
    m.rows
        .iter()
        .filter(|r| r.kind == kind)
        .map(|r| format!("{} {:.1}", r.row, r.replica_seconds))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn drain_time(m: &ModeResult) -> String {
    if m.completed {
        format!("{:.0} s", m.completion_seconds)
    } else if m.stopped_at_timeout {
        format!("not done at the {:.0} s timeout", m.completion_seconds)
    } else {
        format!("failed after {:.0} s", m.completion_seconds)
    }
}

/// Pods moved off the drained nodes ÷ the pods there at the start.
pub fn moves(m: &ModeResult) -> String {
    match m.moves_per_pod {
        Some(r) => format!("{} ÷ {} = **{r:.2}**", m.pods_evicted, m.pods_at_start),
        None => format!("{} (no pod there at the start)", m.pods_evicted),
    }
}

/// The most nodes at once, when and which.
pub fn unavailable(p: &Peak) -> String {
    if p.count == 0 {
        return "0".into();
    }
    format!(
        "{} at {:.1} s ({}{})",
        p.count,
        p.at,
        p.nodes
            .iter()
            .take(4)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        if p.nodes.len() > 4 { ", …" } else { "" }
    )
}

/// The pool section of `REPORT.md`.
pub fn markdown(part: Option<&Result<PoolResults, String>>) -> String {
    let mut o = String::from(
        "## 5. A node pool drained and rolled side by side with `kubectl drain` (issues 35 and 41)\n\n",
    );
    let p = match part {
        None => return o + "Not run.\n\n",
        Some(Err(e)) => return o + &format!("**Failed**: {e}\n\n"),
        Some(Ok(p)) => p,
    };
    let step = format!("sleep {}", p.step_seconds);
    o += &format!(
        "kube-apiserver v1.20 + etcd + kube-controller-manager (deployment, replicaset, statefulset, daemonset, disruption, horizontal-pod-autoscaler controllers{}; its default client rate of 20 requests/s; the autoscalers synced every {:.0} s; and, in a process of its own, the endpoint controllers) on this machine; a played scheduler and kubelet (`tests/support/pool/`: watch-driven; least-loaded node honouring `spec.unschedulable`, taints, tolerations and node affinity; a pod Running and Ready {:.0} s after binding; a deleted pod gone {:.0} s later, or its own shorter grace period). **{} nodes, {} drained**, each mode on a fresh pool of about {} pods (*full*), or the same without the 1-replica Deployments behind `minAvailable: 1` (*finishable*: `kubectl drain` alone waits forever on those). `kubectl drain` (v1.35, the real binary) with `{}` (DaemonSet pods stay; bare pods need `--force`) and `--timeout={:.0}s` per call: *each* = one call per node, the loop going on when a call fails; *all* = one call for every drained node. `evictord+`: `evictord serve` (release) started on the settled pool with {}, webhooks registered (the Eviction API bridge among them); without it, none. *script-each*: the script users write to roll a pool, node after node `kubectl drain NODE` (same flags), the per-node step `sh -c '{}'` (standing in for a reboot), `kubectl uncordon NODE`. *rollout*: `kubectl evictord rollout` (this build's plugin, through the real kubectl) of the drained nodes with `--max-unavailable {}` (**{}** of them at once), `--exec '{}'` and kubectl drain's overrides `--force --delete-emptydir-data`; *rollout-cordon-first*: the same with `--cordon-first`. A mode is stopped after {:.0} s ({:.0} s with a per-node step: the steps' time on top).\n\n",
        if p.garbage_collector {
            " and the garbage collector, which deletes an EvictionRequest once its pod is gone, all in one process sharing one discovery cache, as in any cluster"
        } else {
            "; no garbage collector (`EVICTORD_BENCH_POOL_GC=0`): evictord deletes the requests of a completed maintenance"
        },
        p.hpa_sync_seconds,
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
        step,
        p.max_unavailable,
        ok_modes(p)
            .iter()
            .find_map(|m| m.allowed_unavailable)
            .map_or("?".into(), |a| a.to_string()),
        step,
        p.timeout_seconds,
        p.timeout_seconds + p.step_seconds * p.drained as f64
    );
    o += "Sampled every 100 ms from the played kubelet's watch cache, from the drain's start until every Deployment and StatefulSet is back (at most 120 s after the drain): a pod is *available* when Running, Ready and not terminating; *desired* is the workload's replica count before the drain; *unavailability* is Σ max(0, desired − available) × time, in replica-seconds; a PDB *floor is broken* when available < `minAvailable` or desired − available > `maxUnavailable`. kube-apiserver's requests are its own counters over the same window (every client: the controllers, the played kubelet, kubectl, evictord), per pod that left a drained node; the table after the modes' splits them by client from kube-apiserver's audit log (issue 44; the audit log itself costs kube-apiserver some time in every mode alike). *Pods moved*: the pods that left a drained node (a pod moved from one drained node to another not drained yet and on again counts twice; DaemonSet pods apart; pods that land on a node once it was given back — uncordoned after its cordon — are not counted) ÷ the pods on the drained nodes at the start: 1.00 when every pod moved once. *Nodes unavailable*: the most of the pool's nodes at once cordoned or not Ready and, where NodeMaintenances ran, held by an admitted one (not given back yet) or not Ready, as a MaintenanceBudget counts (a node cordoned by hand, as `--cordon-first` does, is not counted there).\n\n";
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
    o += "\n| mode | drain (rollout) time | Deployments below desired, replica-s (by row) | Deployments' min available ÷ desired | StatefulSets, replica-s | PDB floors broken | pods left on drained nodes (+ DaemonSet) | pods moved ÷ pods there at the start | most nodes unavailable at once: cordoned or NotReady (held) | kube-apiserver requests per evicted pod | evictord CPU, peak RSS | plot |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for outcome in &p.modes {
        let m = match &outcome.result {
            Ok(m) => m,
            Err(e) => {
                o += &format!(
                    "| `{}` | **failed**: {} ||||||||||\n",
                    outcome.id,
                    e.lines().next().unwrap_or_default()
                );
                continue;
            }
        };
        o += &format!(
            "| `{}` | {} | **{:.1}** ({}) | {:.2} | {:.1} | {} | {} (+{}) | {} | {}{} | {:.1} | {} | {} |\n",
            m.id,
            drain_time(m),
            m.deployment_replica_seconds,
            by_row(m, Kind::Deployment),
            m.deployment_min_ratio,
            m.statefulset_replica_seconds,
            m.floors_broken.len(),
            m.pods_left_on_drained.len(),
            m.daemonset_pods_left_on_drained,
            moves(m),
            m.most_unavailable.count,
            m.most_held
                .as_ref()
                .filter(|_| m.mode.drainer.needs_evictord())
                .map_or(String::new(), |h| format!(" ({})", h.count)),
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
    o += &crate::pool_endpoints::table(p);
    o += &crate::pool_clients::table(p);
    o += &crate::pool_controllers::table(p);
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
    o += &calls(&m.calls);
    o += &rolls(m);
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
    o += &crate::pool_clients::details(m);
    o += &crate::pool_controllers::details(m);
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

/// The processes a mode ran, by kind: how many, how long each, the first that failed.
fn calls(calls: &[Call]) -> String {
    let mut kinds: Vec<&str> = calls.iter().map(|c| c.what.as_str()).collect();
    kinds.dedup();
    kinds.sort_unstable();
    kinds.dedup();
    let mut o = String::new();
    for what in kinds {
        let of: Vec<&Call> = calls.iter().filter(|c| c.what == what).collect();
        let failed: Vec<&&Call> = of.iter().filter(|c| c.exit_code != Some(0)).collect();
        let secs: Vec<String> = of.iter().map(|c| format!("{:.0}", c.seconds)).collect();
        o += &format!(
            "- {}: {} {} ({} s each){}.\n",
            match what {
                "drain" | "uncordon" => format!("kubectl {what}"),
                "step" => "the per-node step".into(),
                other => format!("kubectl {other}"),
            },
            of.len(),
            if of.len() == 1 { "call" } else { "calls" },
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
    o
}

/// The drained nodes: the most unavailable at once, and where a roll's time went node by node.
fn rolls(m: &ModeResult) -> String {
    let s = &m.roll_summary;
    let mut o = format!(
        "- Nodes: at most {} cordoned or NotReady at once{}",
        unavailable(&m.most_unavailable),
        m.most_held
            .as_ref()
            .filter(|_| m.mode.drainer.needs_evictord())
            .map_or(String::new(), |h| format!(
                ", at most {} held by an admitted NodeMaintenance or NotReady",
                unavailable(h)
            ))
    );
    if s.nodes > 0 {
        o += &format!(
            "; {} drained nodes taken (the first at {:.1} s), {}; per node, taken → its last pod gone median {:.1} s (max {:.1} s){}; {:.2} nodes out at once on average",
            s.nodes,
            s.first_taken,
            if s.back > 0 {
                format!("{} given back (the last at {:.1} s)", s.back, s.last_back)
            } else {
                "none given back".into()
            },
            s.drain_median,
            s.drain_max,
            if s.back > 0 {
                format!(
                    ", last pod gone → given back median {:.1} s (max {:.1} s){}",
                    s.after_median,
                    s.after_max,
                    m.step_seconds
                        .map_or(String::new(), |st| format!(", the step being {st:.0} s"))
                )
            } else {
                String::new()
            },
            s.mean_out
        );
    }
    o + ".\n"
}
