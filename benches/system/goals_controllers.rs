//! Issue 17's goals of the controllers on the real control plane (hand-offs, creates) and of
//! the drain, checked against this run's figures.

use crate::goal_row::{Goal, Verdict};
use crate::goals::{not_measured, part_state, recorded, row};
use crate::loadgen::median;
use crate::results::Report;

pub(crate) fn handoff_goals(r: &Report, out: &mut Vec<Goal>) {
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

pub(crate) fn drain_goals(r: &Report, out: &mut Vec<Goal>) {
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

pub(crate) fn create_goal(r: &Report, out: &mut Vec<Goal>) {
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
