//! Issue 17's goals, checked against this run's figures: one row per goal and body/protocol,
//! with the measured figure, the target and a verdict. `REPORT.md` shows them first,
//! `report.json` holds them as `goals`.

use crate::goal_row::{Goal, Verdict};
use crate::goals_controllers::{create_goal, drain_goals, handoff_goals};
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

pub(crate) fn row(
    goal: &str,
    what: String,
    measured: String,
    target: &str,
    verdict: Verdict,
) -> Goal {
    Goal {
        goal: goal.into(),
        what,
        measured,
        target: target.into(),
        verdict,
    }
}

pub(crate) fn not_measured(goal: &str, what: &str, why: String, target: &str) -> Goal {
    row(goal, what.into(), why, target, Verdict::NotMeasured)
}

pub(crate) fn part_state<T>(part: &Option<Result<T, String>>) -> Result<&T, String> {
    match part {
        None => Err("part not run".into()),
        Some(Err(e)) => Err(format!("part failed: {}", first_line(e))),
        Some(Ok(t)) => Ok(t),
    }
}

pub(crate) fn first_line(e: &str) -> String {
    let line = e.lines().next().unwrap_or_default();
    if line.chars().count() > 160 {
        line.chars().take(160).collect::<String>() + "…"
    } else {
        line.to_string()
    }
}

pub(crate) fn mib(bytes: f64) -> f64 {
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
