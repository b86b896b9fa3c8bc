//! Issue 17's goals, checked against this run's figures: one row per goal and body/protocol,
//! with the measured figure, the target and a verdict. `REPORT.md` shows them first,
//! `report.json` holds them as `goals`.

use crate::goal_row::{Goal, Verdict};
use crate::loadgen::median;
use crate::results::Report;
use crate::webhook::{BodyResult, ServerRun};

/// Figures of the build before issue 17's changes (`benches/HISTORY.md`: that build measured on
/// 2026-11-23 on the two-core AMD EPYC machine, with `EVICTORD_BIN` and as the
/// `EVICTORD_BENCH_BASELINE` of the same run), for the goals that say "unchanged" or "up" when no
/// baseline binary is measured in the run. Another machine needs its own baseline run.
pub mod recorded {
    /// Idle RSS of `evictord serve` (connected, empty caches), MiB.
    pub const IDLE_RSS_MIB: f64 = 18.3;
    /// Drain of 100 nodes × 110 pods, evictions/s (one run).
    pub const DRAIN_EVICTIONS_PER_SECOND: f64 = 59.0;
    /// The drain size those evictions/s were measured at.
    pub const DRAIN_PODS: usize = 100 * 110;
    pub const DATE: &str = "2026-11-23";
}

/// How far idle RSS may move and still count as unchanged (machine noise is about this).
const IDLE_TOLERANCE: f64 = 0.10;

/// Goal 1's fixed rate.
const GOAL_RATE: u64 = 5000;

fn row(goal: &str, what: String, measured: String, target: &str, verdict: Verdict) -> Goal {
    Goal {
        goal: goal.into(),
        what,
        measured,
        target: target.into(),
        verdict,
    }
}

fn not_measured(goal: &str, what: &str, why: String, target: &str) -> Goal {
    row(goal, what.into(), why, target, Verdict::NotMeasured)
}

fn part_state<T>(part: &Option<Result<T, String>>) -> Result<&T, String> {
    match part {
        None => Err("part not run".into()),
        Some(Err(e)) => Err(format!("part failed: {}", first_line(e))),
        Some(Ok(t)) => Ok(t),
    }
}

fn first_line(e: &str) -> String {
    let line = e.lines().next().unwrap_or_default();
    if line.chars().count() > 160 {
        line.chars().take(160).collect::<String>() + "…"
    } else {
        line.to_string()
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / 1048576.0
}

/// Every goal row for `r`.
pub fn evaluate(r: &Report) -> Vec<Goal> {
    let mut out = Vec::new();
    webhook_goals(r, &mut out);
    memory_goals(r, &mut out);
    handoff_goals(r, &mut out);
    drain_goals(r, &mut out);
    create_goal(r, &mut out);
    profile_goals(r, &mut out);
    crate::pool_goals::goals(r, &mut out);
    out
}

/// The median requests/s at saturation of a server's runs.
fn sat(runs: &[ServerRun]) -> f64 {
    median(runs.iter().map(|r| r.saturation.requests_per_second))
}

/// A body over HTTP/1.1 with a new connection per request: what a call costs when kube-apiserver
/// opens a connection for it (beyond its 25 idle ones). Reported beside goal 1, not judged: the
/// TLS handshake is the same configuration in both servers.
fn new_connection_row(b: &BodyResult) -> Goal {
    let cpu = |runs: &[ServerRun]| {
        median(
            runs.iter()
                .filter_map(|r| r.saturation.server_cpu_us_per_request),
        )
    };
    let errors: u64 = b.evictord.iter().map(|r| r.saturation.errors).sum();
    let mut measured = format!(
        "evictord ÷ limit **{:.3}** ({:.0} vs {:.0} req/s); server CPU per request: evictord {:.0} µs, limit {:.0} µs",
        median(b.throughput_ratio.iter().copied()),
        sat(&b.evictord),
        sat(&b.limit),
        cpu(&b.evictord),
        cpu(&b.limit)
    );
    if !b.baseline.is_empty() {
        measured += &format!(", baseline {:.0} µs", cpu(&b.baseline));
    }
    if errors > 0 {
        measured += &format!("; {errors} errors");
    }
    row(
        "1",
        format!("{} over {}", b.body, b.protocol.label()),
        measured,
        "reported",
        Verdict::Reported,
    )
}

fn webhook_goals(r: &Report, out: &mut Vec<Goal>) {
    let w = match part_state(&r.webhook) {
        Ok(w) => w,
        Err(why) => {
            out.push(not_measured(
                "1",
                "webhook throughput and p99",
                why.clone(),
                "≥ 0.80 × limit; p99 ≤ 1 ms at 5k req/s",
            ));
            out.push(not_measured(
                "2",
                "HTTP/2 load generator",
                why,
                "HTTP/1.1 and HTTP/2, each against the limit server speaking it",
            ));
            return;
        }
    };
    let rate = w.rates.iter().position(|&r| r == GOAL_RATE);
    for b in &w.bodies {
        if !b.protocol.keeps_connections() {
            out.push(new_connection_row(b));
            continue;
        }
        let what = format!("{} over {}", b.body, b.protocol.label());
        let ratio = median(b.throughput_ratio.iter().copied());
        let errors: u64 = b.evictord.iter().map(|r| r.saturation.errors).sum();
        // The CPU-per-request ratio stays meaningful when the one-core load generator, not
        // the server, is the bottleneck (the limit server then uses less than its core).
        let mut measured = format!(
            "**{ratio:.3}** ({:.0} vs {:.0} req/s; server CPU per request, limit ÷ evictord: {:.2})",
            sat(&b.evictord),
            sat(&b.limit),
            median(b.cpu_efficiency_ratio.iter().copied())
        );
        if !b.baseline_throughput_ratio.is_empty() {
            measured += &format!(
                "; baseline {:.2}",
                median(b.baseline_throughput_ratio.iter().copied())
            );
        }
        if errors > 0 {
            measured += &format!("; {errors} errors at saturation");
        }
        out.push(row(
            "1",
            format!("throughput, {what}: evictord ÷ limit server"),
            measured,
            "≥ 0.80",
            Verdict::of(ratio >= 0.8 && errors == 0),
        ));
        let what_p99 = format!("p99 at {GOAL_RATE} req/s, {what}");
        match rate {
            None => out.push(not_measured(
                "1",
                &what_p99,
                format!("{GOAL_RATE} is not in EVICTORD_BENCH_RATES"),
                "≤ 1 ms",
            )),
            Some(i) => {
                let p99 = |runs: &[ServerRun]| {
                    median(runs.iter().filter_map(|r| r.fixed.get(i)).map(|f| f.p99_ms))
                };
                let lost: u64 = b
                    .evictord
                    .iter()
                    .filter_map(|r| r.fixed.get(i))
                    .map(|f| f.errors + f.not_sent)
                    .sum();
                let e = p99(&b.evictord);
                let mut measured = format!("**{e:.2} ms** (limit {:.2} ms", p99(&b.limit));
                if !b.baseline.is_empty() {
                    measured += &format!(", baseline {:.2} ms", p99(&b.baseline));
                }
                measured += ")";
                if lost > 0 {
                    measured += &format!("; {lost} requests lost");
                }
                out.push(row(
                    "1",
                    what_p99,
                    measured,
                    "≤ 1 ms",
                    Verdict::of(e <= 1.0 && lost == 0),
                ));
            }
        }
    }
    if let Some(why) = &w.create_skipped {
        out.push(not_measured(
            "1",
            "evictionrequest_create_cached_pod",
            why.clone(),
            "≥ 0.80; ≤ 1 ms",
        ));
    }
    let h2 = w
        .bodies
        .iter()
        .filter(|b| b.protocol == crate::loadgen::Protocol::H2)
        .count();
    out.push(if h2 > 0 {
        row(
            "2",
            "load generator speaks HTTP/2 (ALPN `h2` checked on every connection), against the limit server over HTTP/2".into(),
            format!(
                "{h2} bodies over HTTP/2, {} connections × {} streams (rows above); protocols measured: {}",
                w.h2_connections,
                w.h2_streams,
                w.protocols
                    .iter()
                    .map(|p| p.label())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "HTTP/1.1 and HTTP/2 both reported",
            Verdict::of(w.protocols.len() >= 2),
        )
    } else {
        not_measured(
            "2",
            "HTTP/2 load generator",
            "EVICTORD_BENCH_PROTOCOLS has no h2".into(),
            "HTTP/1.1 and HTTP/2 both reported",
        )
    });
}

fn memory_goals(r: &Report, out: &mut Vec<Goal>) {
    let m = match part_state(&r.memory) {
        Ok(m) => m,
        Err(why) => {
            out.push(not_measured(
                "3",
                "bytes per cached pod",
                why.clone(),
                "≤ 2 KiB",
            ));
            out.push(not_measured(
                "3",
                "RSS with 150 000 pods cached",
                why.clone(),
                "≤ 300 MiB",
            ));
            out.push(not_measured("3", "idle RSS", why, "unchanged"));
            return;
        }
    };
    match m.bytes_per_pod_slope {
        Some(b) => out.push(row(
            "3",
            "bytes per cached pod (slope of RSS over the real levels)".into(),
            format!(
                "**{:.2} KiB** ({b:.0} B; between the two largest levels: {})",
                b / 1024.0,
                m.bytes_per_pod_marginal
                    .map_or("-".into(), |x| format!("{x:.0} B"))
            ),
            "≤ 2 KiB",
            Verdict::of(b <= 2048.0),
        )),
        None => out.push(not_measured(
            "3",
            "bytes per cached pod",
            "fewer than two levels".into(),
            "≤ 2 KiB",
        )),
    }
    const BIG: usize = 150_000;
    let replayed = match &m.replay {
        Some(Ok(rp)) => rp.levels.iter().find(|l| l.pods == BIG),
        _ => None,
    };
    let real = m.levels.iter().find(|l| l.pods == BIG);
    match (
        real.or(replayed),
        m.extrapolated.iter().find(|(n, _)| *n == BIG),
    ) {
        (Some(l), _) => {
            let rss = mib(l.median_rss_bytes as f64);
            out.push(row(
                "3",
                format!(
                    "RSS with {BIG} pods cached ({})",
                    if real.is_some() {
                        "real control plane"
                    } else {
                        "replayed recording"
                    }
                ),
                format!(
                    "**{rss:.1} MiB** ({:.0} B per pod above idle)",
                    (l.median_rss_bytes as f64 - m.idle_rss_bytes as f64) / BIG as f64
                ),
                "≤ 300 MiB",
                Verdict::of(rss <= 300.0),
            ));
        }
        (None, Some((_, b))) => out.push(row(
            "3",
            format!("RSS with {BIG} pods cached"),
            format!(
                "{:.1} MiB, **extrapolated** from the slope, not measured ({})",
                mib(*b as f64),
                if mib(*b as f64) <= 300.0 {
                    "would meet"
                } else {
                    "would miss"
                }
            ),
            "≤ 300 MiB",
            Verdict::NotMeasured,
        )),
        (None, None) => out.push(not_measured(
            "3",
            &format!("RSS with {BIG} pods cached"),
            match &m.replay {
                Some(Err(e)) => format!("replay failed: {}", first_line(e)),
                _ => "not in EVICTORD_BENCH_REPLAY_PODS".into(),
            },
            "≤ 300 MiB",
        )),
    }
    let idle = mib(m.idle_rss_bytes as f64);
    let target = format!("unchanged (within {:.0}%)", IDLE_TOLERANCE * 100.0);
    match &m.idle_vs_baseline {
        Some(Ok(pair)) => {
            let (mine, theirs) = (
                mib(pair.median_evictord_rss_bytes as f64),
                mib(pair.median_baseline_rss_bytes as f64),
            );
            out.push(row(
                "3",
                "idle RSS (connected, empty caches), this build vs the baseline binary, same run"
                    .into(),
                format!(
                    "**{mine:.1} MiB** vs {theirs:.1} MiB ({:+.0}%)",
                    (mine / theirs - 1.0) * 100.0
                ),
                &target,
                Verdict::of(mine <= theirs * (1.0 + IDLE_TOLERANCE)),
            ));
        }
        other => {
            let note = match other {
                Some(Err(e)) => format!("; baseline not measured: {}", first_line(e)),
                _ => String::new(),
            };
            let has_idle = m.levels.iter().any(|l| l.pods == 0);
            if has_idle {
                out.push(row(
                    "3",
                    format!(
                        "idle RSS (connected, empty caches) vs the recorded {} MiB ({}, before issue 17)",
                        recorded::IDLE_RSS_MIB,
                        recorded::DATE
                    ),
                    format!(
                        "**{idle:.1} MiB** ({:+.0}%){note}",
                        (idle / recorded::IDLE_RSS_MIB - 1.0) * 100.0
                    ),
                    &target,
                    Verdict::of(idle <= recorded::IDLE_RSS_MIB * (1.0 + IDLE_TOLERANCE)),
                ));
            } else {
                out.push(not_measured(
                    "3",
                    "idle RSS",
                    format!("no 0-pod level in EVICTORD_BENCH_PODS{note}"),
                    &target,
                ));
            }
        }
    }
}

fn handoff_goals(r: &Report, out: &mut Vec<Goal>) {
    let c = match part_state(&r.controllers) {
        Ok(c) if !c.handoffs.is_empty() => c,
        Ok(_) => {
            out.push(not_measured(
                "4",
                "hand-off p99",
                "no hand-off run".into(),
                "≤ 150 ms",
            ));
            return;
        }
        Err(why) => {
            out.push(not_measured("4", "hand-off p99", why, "≤ 150 ms"));
            return;
        }
    };
    let n = c.handoffs[0].in_flight;
    let p99 = median(c.handoffs.iter().map(|h| h.latency.p99_ms));
    out.push(row(
        "4",
        format!("interceptor hand-off p99, {n} requests in flight (completion written → next interceptor active)"),
        format!(
            "**{p99:.0} ms** (p50 {:.0} ms; runs {})",
            median(c.handoffs.iter().map(|h| h.latency.p50_ms)),
            c.handoffs
                .iter()
                .map(|h| format!("{:.0}", h.latency.p99_ms))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "≤ 150 ms",
        Verdict::of(p99 <= 150.0 && c.handoffs.iter().all(|h| h.handed_off == h.in_flight)),
    ));
    let m = |f: fn(&crate::controllers::HandoffRun) -> f64| median(c.handoffs.iter().map(f));
    let mut phases = format!(
        "watch delivery p50/p99 {:.0}/{:.0} ms; then evictord (its watch, queue, reconcile, status write, delivery back) p50/p99 {:.0}/{:.0} ms",
        m(|h| h.watch_delivery.p50_ms),
        m(|h| h.watch_delivery.p99_ms),
        m(|h| h.controller.p50_ms),
        m(|h| h.controller.p99_ms),
    );
    // evictord's own histograms, from the last run (a run's count per hand-off says how many
    // reconciles or calls each hand-off took).
    if let Some(last) = c.handoffs.last() {
        for d in &last.evictord_histograms {
            phases += &format!(
                "; `{}` {:.1} per hand-off, mean {:.1} ms, p99 ≤ {} ms",
                d.series,
                d.count / n.max(1) as f64,
                d.mean_ms,
                fmt_le(d.p99_le_ms)
            );
        }
    }
    if let Some(last) = c.handoffs.last() {
        phases += &apiserver_phases(&last.apiserver_histograms, n, "hand-off");
    }
    out.push(row(
        "4",
        "where the hand-off time goes (medians of the runs; evictord's and kube-apiserver's histograms from the last run)".into(),
        phases,
        "said in the report",
        Verdict::Reported,
    ));
    if let Some(rate) = c.paced_handoffs.first().and_then(|h| h.completion_rate) {
        let p =
            |f: fn(&crate::controllers::HandoffRun) -> f64| median(c.paced_handoffs.iter().map(f));
        let mut text = format!(
            "p50 / p99 **{:.0} / {:.0} ms** (runs {}); watch delivery p50/p99 {:.0}/{:.0} ms",
            p(|h| h.latency.p50_ms),
            p(|h| h.latency.p99_ms),
            c.paced_handoffs
                .iter()
                .map(|h| format!("{:.0}", h.latency.p99_ms))
                .collect::<Vec<_>>()
                .join(", "),
            p(|h| h.watch_delivery.p50_ms),
            p(|h| h.watch_delivery.p99_ms),
        );
        if let Some(last) = c.paced_handoffs.last() {
            text += &apiserver_phases(&last.apiserver_histograms, n, "hand-off");
        }
        out.push(row(
            "4",
            format!(
                "interceptor hand-off with the completions paced at {rate:.0}/s, {n} requests in flight (the goal's runs write them all at once, 32 in flight)"
            ),
            text,
            "reported beside the goal",
            Verdict::Reported,
        ));
    }
}

/// kube-apiserver's own histograms of a run, as a clause of a goal row ("; kube-apiserver's own:
/// `PATCH evictionrequests/status` 1.0 per hand-off, mean 12.3 ms, …"); empty without any.
fn apiserver_phases(histograms: &[crate::prom::Delta], per: usize, unit: &str) -> String {
    if histograms.is_empty() {
        return String::new();
    }
    let items: Vec<String> = histograms
        .iter()
        .map(|d| {
            format!(
                "`{}` {:.1} per {unit}, mean {:.1} ms",
                d.series,
                d.count / per.max(1) as f64,
                d.mean_ms
            )
        })
        .collect();
    format!("; kube-apiserver's own: {}", items.join(", "))
}

fn fmt_le(ms: f64) -> String {
    if ms.is_finite() {
        format!("{ms:.1}")
    } else {
        "+Inf".into()
    }
}

fn drain_goals(r: &Report, out: &mut Vec<Goal>) {
    let d = match part_state(&r.drain) {
        Ok(d) => d,
        Err(why) => {
            out.push(not_measured(
                "5",
                "API requests per evicted pod",
                why.clone(),
                "≤ 4",
            ));
            out.push(not_measured(
                "5",
                "kube-apiserver CPU during the drain",
                why,
                "reported",
            ));
            return;
        }
    };
    let per_pod = median(d.runs.iter().map(|r| r.api_requests_per_pod_total));
    let writes = median(d.runs.iter().map(|r| r.api_writes_per_pod));
    out.push(row(
        "5",
        "kube-apiserver requests per evicted pod, drain of pods without interceptors (evictord's imperative eviction only), no PDB, all clients minus the benchmark's polls".into(),
        format!(
            "**{per_pod:.2}** ({writes:.2} writes; runs {})",
            d.runs
                .iter()
                .map(|r| format!("{:.2}", r.api_requests_per_pod_total))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "≤ 4",
        Verdict::of(per_pod <= 4.0),
    ));
    let pods = d.nodes * d.pods_per_node;
    let eps = d.median_evictions_per_second;
    out.push(if pods == recorded::DRAIN_PODS {
        row(
            "5",
            format!(
                "drain evictions/s ({} nodes × {} pods), vs {:.0}/s recorded {} before issue 17",
                d.nodes,
                d.pods_per_node,
                recorded::DRAIN_EVICTIONS_PER_SECOND,
                recorded::DATE
            ),
            format!("**{eps:.0}/s**"),
            "up",
            Verdict::of(eps > recorded::DRAIN_EVICTIONS_PER_SECOND),
        )
    } else {
        row(
            "5",
            format!(
                "drain evictions/s ({} nodes × {} pods)",
                d.nodes, d.pods_per_node
            ),
            format!(
                "**{eps:.0}/s** (not comparable with the {:.0}/s recorded at {} pods)",
                recorded::DRAIN_EVICTIONS_PER_SECOND,
                recorded::DRAIN_PODS
            ),
            "up",
            Verdict::Reported,
        )
    });
    let cores = |f: fn(&crate::drain::CpuShare) -> Option<f64>| {
        let v: Vec<f64> = d.runs.iter().filter_map(|r| f(&r.cpu_cores)).collect();
        (!v.is_empty()).then(|| median(v))
    };
    let cpus = d
        .runs
        .first()
        .map_or(1, |r| r.cpu_cores.machine_cpus)
        .max(1) as f64;
    let share = |c: Option<f64>| {
        c.map_or("not found".into(), |c| {
            format!("{c:.2} cores ({:.0}% of {cpus:.0} CPUs)", c / cpus * 100.0)
        })
    };
    let note = d
        .runs
        .iter()
        .find_map(|r| r.cpu_cores.note.clone())
        .map_or(String::new(), |n| format!(" ({n})"));
    out.push(row(
        "5",
        "CPU over the drain (medians of the runs): kube-apiserver, etcd, evictord".into(),
        format!(
            "kube-apiserver **{}**; etcd {}; evictord {}{note}",
            share(cores(|c| c.kube_apiserver)),
            share(cores(|c| c.etcd)),
            share(cores(|c| c.evictord)),
        ),
        "reported",
        Verdict::Reported,
    ));
}

fn create_goal(r: &Report, out: &mut Vec<Goal>) {
    let what =
        "EvictionRequest create p99, webhook registered ÷ not registered (median of the rounds)";
    let c = match part_state(&r.controllers) {
        Ok(c) if !c.creates.is_empty() => c,
        Ok(_) => {
            out.push(not_measured("6", what, "no create round".into(), "≤ 1.10"));
            return;
        }
        Err(why) => {
            out.push(not_measured("6", what, why, "≤ 1.10"));
            return;
        }
    };
    let ratio = median(c.creates.iter().map(|r| r.p99_ratio));
    out.push(row(
        "6",
        format!(
            "{what}, {} rounds of {} creates",
            c.creates.len(),
            c.creates[0].creates
        ),
        format!(
            "**{ratio:.3}** ({:.1} vs {:.1} ms; rounds {})",
            median(c.creates.iter().map(|r| r.with_webhook.p99_ms)),
            median(c.creates.iter().map(|r| r.without_webhook.p99_ms)),
            c.creates
                .iter()
                .map(|r| format!("{:.2}", r.p99_ratio))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "≤ 1.10",
        Verdict::of(ratio <= 1.10),
    ));
    // Where the webhook's share of a create goes: kube-apiserver's own time per create with and
    // without the webhook, its time calling it, and evictord's time answering (medians of the
    // rounds' means).
    type Side = fn(&crate::controllers::CreateRun) -> &Vec<crate::prom::Delta>;
    let mean_of = |side: Side, pick: fn(&str) -> bool| {
        median(
            c.creates
                .iter()
                .filter_map(|r| side(r).iter().find(|d| pick(&d.series)).map(|d| d.mean_ms)),
        )
    };
    let post = |s: &str| s == "POST evictionrequests";
    let served_with = mean_of(|r| &r.apiserver_with_webhook, post);
    let served_without = mean_of(|r| &r.apiserver_without_webhook, post);
    let calling = mean_of(
        |r| &r.apiserver_with_webhook,
        |s| s.starts_with("webhook ") && s.ends_with(" CREATE"),
    );
    let answering = mean_of(|r| &r.evictord_with_webhook, |s| s.contains("CREATE"));
    if served_with.is_finite() || calling.is_finite() {
        out.push(row(
            "6",
            "where a create's added time goes (kube-apiserver's and evictord's own histograms, means, medians of the rounds)".into(),
            format!(
                "kube-apiserver serves a create in {served_with:.2} ms with the webhook, {served_without:.2} ms without; it spends {calling:.2} ms calling the webhook, evictord {answering:.3} ms answering"
            ),
            "reported",
            Verdict::Reported,
        ));
    }
}

fn profile_goals(r: &Report, out: &mut Vec<Goal>) {
    let w = match part_state(&r.webhook) {
        Ok(w) => w,
        Err(why) => {
            out.push(not_measured(
                "profile",
                "profile of the webhook in the bench output",
                why,
                "a profile per body",
            ));
            return;
        }
    };
    if w.profiles.is_empty() {
        out.push(not_measured(
            "profile",
            "profile of the webhook",
            "EVICTORD_BENCH_PROFILE=0".into(),
            "a profile per body",
        ));
    }
    for p in &w.profiles {
        let what = format!(
            "profile of evictord, {} over {}",
            p.body,
            p.protocol.label()
        );
        out.push(match (&p.file, &p.error) {
            (Some(f), _) => row(
                "profile",
                what,
                format!("[{f}]({f})"),
                "in the bench output",
                Verdict::Met,
            ),
            (None, e) => row(
                "profile",
                what,
                format!("none: {}", e.as_deref().map(first_line).unwrap_or_default()),
                "in the bench output",
                Verdict::Missed,
            ),
        });
    }
}

/// The goals table.
pub fn markdown(goals: &[Goal]) -> String {
    let mut o = String::from(
        "## Goals (issues 17, 35 and 41)\n\nEach figure from this run (medians of its runs; details in the sections below and in `report.json`), beside its target.\n\n| goal | what | this run | target | |\n|---|---|---|---|---|\n",
    );
    for g in goals {
        o += &format!(
            "| {} | {} | {} | {} | {} |\n",
            g.goal,
            g.what,
            g.measured.replace('|', "\\|"),
            g.target,
            g.verdict.mark()
        );
    }
    let missed = goals
        .iter()
        .filter(|g| g.verdict == Verdict::Missed)
        .count();
    let unmeasured = goals
        .iter()
        .filter(|g| g.verdict == Verdict::NotMeasured)
        .count();
    o += &format!(
        "\n**{missed} missed**, {unmeasured} not measured, {} met.\n\n",
        goals.iter().filter(|g| g.verdict == Verdict::Met).count()
    );
    o
}
