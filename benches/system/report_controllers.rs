//! The report's sections 3 and 4: the controllers on the real control plane (hand-offs,
//! creates, Eviction API calls, each with the processes' own histograms) and the drain.

use crate::loadgen::median;
use crate::report::mib;
use crate::results::Report;

impl Report {
    pub(crate) fn controllers_md(&self) -> String {
        let mut o = String::from("## 3. Controllers on the real control plane\n\n");
        let c = match &self.controllers {
            None => return o + "Not run.\n\n",
            Some(Err(e)) => return o + &format!("**Failed**: {e}\n\n"),
            Some(Ok(c)) => c,
        };
        o += &format!(
            "kube-apiserver v1.20 + etcd on the same machine, `evictord serve` (release) with the webhook registered, flags `{}`; {} other pods in the cluster (and in evictord's cache) when the part started.\n\n| figure | median | runs |\n|---|---|---|\n",
            c.evictord_flags.join(" "),
            c.pods_in_cluster_before
        );
        if !c.evictions.is_empty() {
            let n = c.evictions[0].pods;
            o += &format!(
                "| evictions/s, {n} pods without interceptors, all requests created at once | **{:.0}/s** | {} |\n",
                median(c.evictions.iter().map(|r| r.evictions_per_second)),
                c.evictions
                    .iter()
                    .map(|r| format!(
                        "{:.0}/s ({}/{n} evicted in {:.1} s)",
                        r.evictions_per_second, r.evicted, r.total_seconds
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        if !c.handoffs.is_empty() {
            let n = c.handoffs[0].in_flight;
            let runs = |f| handoff_runs(&c.handoffs, f);
            o += &format!(
                "| interceptor hand-off p50, {n} requests in flight (completionTime written → next interceptor active) | **{:.0} ms** | {} ms |\n",
                median(c.handoffs.iter().map(|r| r.latency.p50_ms)),
                runs(|r| r.latency.p50_ms)
            );
            o += &format!(
                "| interceptor hand-off p99, same runs | **{:.0} ms** | {} ms |\n",
                median(c.handoffs.iter().map(|r| r.latency.p99_ms)),
                runs(|r| r.latency.p99_ms)
            );
            o += &handoff_phase_rows(&c.handoffs);
            if let Some(last) = c.handoffs.last() {
                let when = "last run";
                o += &histogram_rows(&last.evictord_histograms, n, "hand-off", "evictord", when);
                o += &histogram_rows(
                    &last.apiserver_histograms,
                    n,
                    "hand-off",
                    "kube-apiserver",
                    when,
                );
            }
            o += &format!(
                "| time to write all {n} completions (32 in flight) | {:.1} s | {} |\n",
                median(c.handoffs.iter().map(|r| r.completion_writes_seconds)),
                c.handoffs
                    .iter()
                    .map(|r| format!(
                        "{:.1} s, {}/{n} handed off",
                        r.completion_writes_seconds, r.handed_off
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        if let Some(rate) = c.paced_handoffs.first().and_then(|r| r.completion_rate) {
            let n = c.paced_handoffs[0].in_flight;
            o += &format!(
                "| interceptor hand-off p50 / p99, {n} requests in flight, completions paced at {rate:.0}/s (open loop) | **{:.0} / {:.0} ms** | {} ms (p99) |\n",
                median(c.paced_handoffs.iter().map(|r| r.latency.p50_ms)),
                median(c.paced_handoffs.iter().map(|r| r.latency.p99_ms)),
                handoff_runs(&c.paced_handoffs, |r| r.latency.p99_ms),
            );
            o += &handoff_phase_rows(&c.paced_handoffs);
            if let Some(last) = c.paced_handoffs.last() {
                o += &histogram_rows(
                    &last.apiserver_histograms,
                    n,
                    "hand-off",
                    "kube-apiserver",
                    "last paced run",
                );
            }
        }
        if !c.creates.is_empty() {
            let n = c.creates[0].creates;
            o += &format!(
                "| EvictionRequest create p99 with the webhook / without (ratio per round; {n} creates each, 4 in flight, `--controllers=none`) | **{:.2}** | {} |\n",
                median(c.creates.iter().map(|r| r.p99_ratio)),
                c.creates
                    .iter()
                    .map(|r| format!("{:.2}", r.p99_ratio))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            o += &format!(
                "| create p50 / p99 with the webhook | {:.1} / {:.1} ms | |\n| create p50 / p99 without the webhook | {:.1} / {:.1} ms | |\n",
                median(c.creates.iter().map(|r| r.with_webhook.p50_ms)),
                median(c.creates.iter().map(|r| r.with_webhook.p99_ms)),
                median(c.creates.iter().map(|r| r.without_webhook.p50_ms)),
                median(c.creates.iter().map(|r| r.without_webhook.p99_ms)),
            );
            if let Some(last) = c.creates.last() {
                let with = "last round with the webhook";
                let without = "last round without the webhook";
                o += &histogram_rows(
                    &last.apiserver_with_webhook,
                    n,
                    "create",
                    "kube-apiserver",
                    with,
                );
                o += &histogram_rows(
                    &last.apiserver_without_webhook,
                    n,
                    "create",
                    "kube-apiserver",
                    without,
                );
                o += &histogram_rows(&last.evictord_with_webhook, n, "create", "evictord", with);
            }
        }
        if !c.eviction_calls.is_empty() {
            let n = c.eviction_calls[0].calls;
            let runs = |f: fn(&crate::controllers::EvictionCallRun) -> f64| {
                c.eviction_calls
                    .iter()
                    .map(|r| format!("{:.2}", f(r)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            o += &format!(
                "| Eviction API call p99 for un-annotated pods, with the bridge / without (ratio per run; {n} calls each, 4 in flight) | **{:.2}** | {} |\n| p99 added by the bridge | {:.2} ms | {} |\n",
                median(c.eviction_calls.iter().map(|r| r.p99_ratio)),
                runs(|r| r.p99_ratio),
                median(c.eviction_calls.iter().map(|r| r.p99_added_ms)),
                runs(|r| r.p99_added_ms),
            );
            o += &format!(
                "| eviction call p50 / p99 with the bridge | {:.1} / {:.1} ms | |\n| eviction call p50 / p99 without the bridge | {:.1} / {:.1} ms | |\n",
                median(c.eviction_calls.iter().map(|r| r.with_webhook.p50_ms)),
                median(c.eviction_calls.iter().map(|r| r.with_webhook.p99_ms)),
                median(c.eviction_calls.iter().map(|r| r.without_webhook.p50_ms)),
                median(c.eviction_calls.iter().map(|r| r.without_webhook.p99_ms)),
            );
        }
        o + "\n"
    }

    pub(crate) fn drain_md(&self) -> String {
        let mut o = String::from("## 4. Node maintenance drain on the real control plane\n\n");
        let d = match &self.drain {
            None => return o + "Not run.\n\n",
            Some(Err(e)) => return o + &format!("**Failed**: {e}\n\n"),
            Some(Ok(d)) => d,
        };
        let pods = d.nodes * d.pods_per_node;
        o += &format!(
            "{} nodes × {} pods = **{pods} pods**, bound by `spec.nodeName`, `terminationGracePeriodSeconds: 0`, no interceptors, no PDBs; a fresh `evictord serve` per run (all controllers, webhook registered, flags `{}`) started after the pods exist; one NodeMaintenance with `stage: Drain` selecting that run's nodes by label. Time from its create to `Drained=True` in its status, polled every 500 ms (±0.5 s), given up after {} s. {} runs, each on its own nodes and namespace; the maintenance, its requests, nodes and webhook registration removed between runs.\n\n| figure | median | runs |\n|---|---|---|\n",
            d.nodes,
            d.pods_per_node,
            d.evictord_flags.join(" "),
            d.give_up_seconds,
            d.runs.len()
        );
        let each = |f: &dyn Fn(&crate::drain::DrainRun) -> String| {
            d.runs.iter().map(f).collect::<Vec<_>>().join(", ")
        };
        let all_drained = d.runs.iter().all(|r| r.drained);
        o += &format!(
            "| create → `Drained=True` | **{:.1} s**{} | {} |\n",
            d.median_drain_seconds,
            if all_drained {
                ""
            } else {
                " (some runs did not reach it)"
            },
            each(&|r| if r.drained {
                format!("{:.1} s", r.drain_seconds)
            } else {
                format!(
                    "not reached in {:.0} s ({} of {} pods left)",
                    r.drain_seconds, r.pods_remaining, r.pods
                )
            })
        );
        o += &format!(
            "| evictions/s (pods evicted ÷ that time) | **{:.0}/s** | {} |\n| evictord peak RSS (`VmHWM` at the end) | **{}** | {} |\n| pods created before the run (s) | | {} |\n| fresh evictord ready and registered (s) | | {} |\n| clean-up after the run (s) | | {} |\n| pods in the cluster (and evictord's cache) at the start | | {} |\n\n",
            d.median_evictions_per_second,
            each(&|r| format!("{:.0}/s", r.evictions_per_second)),
            mib(d.median_peak_rss_bytes),
            each(&|r| mib(r.evictord_peak_rss_bytes as f64)),
            each(&|r| format!("{:.0}", r.create_seconds)),
            each(&|r| format!("{:.1}", r.start_seconds)),
            each(&|r| format!("{:.0}", r.clean_up_seconds)),
            each(&|r| r.pods_in_cluster.to_string()),
        );
        if let Some(r) = d.runs.last() {
            let fmt = |v: &[(String, f64)]| {
                v.iter()
                    .map(|(k, n)| format!("`{k}` {n:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            o += &format!(
                "Where the control plane's work goes (last run; kube-apiserver's own counters, every client, per pod evicted): **{:.2} requests in all** ({:.2} writes; the benchmark's own {} polls taken out): {}; admission webhook calls {}.\n\n",
                r.api_requests_per_pod_total,
                r.api_writes_per_pod,
                r.benchmark_requests,
                fmt(&r.api_requests_per_pod),
                fmt(&r.webhook_calls_per_pod)
            );
            let cores = |c: Option<f64>| {
                c.map_or("not found".to_string(), |c| {
                    format!(
                        "{c:.2} cores ({:.0}% of {} CPUs)",
                        c / r.cpu_cores.machine_cpus.max(1) as f64 * 100.0,
                        r.cpu_cores.machine_cpus
                    )
                })
            };
            o += &format!(
                "CPU over the drain (last run; `/proc/PID/stat`, from the NodeMaintenance create to `Drained`): kube-apiserver {}, etcd {}, evictord {}{}.\n\n",
                cores(r.cpu_cores.kube_apiserver),
                cores(r.cpu_cores.etcd),
                cores(r.cpu_cores.evictord),
                r.cpu_cores
                    .note
                    .as_ref()
                    .map_or(String::new(), |n| format!(" ({n})"))
            );
        }
        o
    }
}

/// Each hand-off run's figure `f`, in milliseconds, comma-separated.
fn handoff_runs(
    runs: &[crate::controllers::HandoffRun],
    f: fn(&crate::controllers::HandoffRun) -> f64,
) -> String {
    runs.iter()
        .map(|r| format!("{:.0}", f(r)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The two phases of a hand-off, over `runs`: watch delivery, then evictord's share.
fn handoff_phase_rows(runs: &[crate::controllers::HandoffRun]) -> String {
    format!(
        "| — write returned → the benchmark's watch sees the completion (watch delivery), p50 / p99 | {:.0} / {:.0} ms | {} ms (p99) |\n| — the benchmark's watch sees the completion → sees the next interceptor active (evictord: its watch, queue, reconcile, status write, delivery back), p50 / p99 | {:.0} / {:.0} ms | {} ms (p99) |\n",
        median(runs.iter().map(|r| r.watch_delivery.p50_ms)),
        median(runs.iter().map(|r| r.watch_delivery.p99_ms)),
        handoff_runs(runs, |r| r.watch_delivery.p99_ms),
        median(runs.iter().map(|r| r.controller.p50_ms)),
        median(runs.iter().map(|r| r.controller.p99_ms)),
        handoff_runs(runs, |r| r.controller.p99_ms),
    )
}

/// A histogram bucket bound in milliseconds (`-` when unknown: series merged under one name).
fn le(ms: f64) -> String {
    if ms.is_nan() {
        "-".into()
    } else if ms.is_finite() {
        format!("{ms:.1}")
    } else {
        "+Inf".into()
    }
}

/// Table rows of one process's own histograms (`source`: evictord, kube-apiserver) over a run
/// of `per` operations of `unit`.
fn histogram_rows(
    histograms: &[crate::prom::Delta],
    per: usize,
    unit: &str,
    source: &str,
    when: &str,
) -> String {
    histograms
        .iter()
        .map(|d| {
            format!(
                "| — {source} `{}` over the {when}: per {unit}, mean, p50 / p99 (bucket bounds) | {:.2}, {:.3} ms, ≤ {} / ≤ {} ms | |\n",
                d.series,
                d.count / per.max(1) as f64,
                d.mean_ms,
                le(d.p50_le_ms),
                le(d.p99_le_ms)
            )
        })
        .collect()
}
