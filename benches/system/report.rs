//! The report, written from [`Report`] (`results.rs`): `report.json` (every raw number) and
//! `REPORT.md` (medians of the runs, ratios measured in the same run), with the machine and the
//! exact commands.

use std::path::Path;

use serde_json::Value;

use crate::loadgen::median;
use crate::loadgen::{FixedRate, Protocol};
use crate::memory::ReplayResults;
use crate::results::Report;
use crate::webhook::{BodyResult, ServerRun, WebhookResults};

pub(crate) fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / 1048576.0)
}

impl Report {
    /// Writes both files (also after each part, so a failure later keeps what was measured).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let goals = crate::goals::evaluate(self);
        let mut json = serde_json::to_value(self)?;
        if let Value::Object(map) = &mut json {
            map.insert("goals".into(), serde_json::to_value(&goals)?);
        }
        std::fs::write(
            dir.join("report.json"),
            serde_json::to_string_pretty(&json)? + "\n",
        )?;
        std::fs::write(dir.join("REPORT.md"), self.markdown(&goals))?;
        Ok(())
    }

    fn markdown(&self, goals: &[crate::goal_row::Goal]) -> String {
        let m = &self.meta;
        let mut o = String::new();
        o += "# evictord benchmark report\n\n";
        o += &format!(
            "- **Date**: {} (finished {})\n- **Machine**: {} CPUs ({}), {} RAM, {}\n- **Load average** (1/5/15 min) at start: {}; at end: {}\n- **Commit**: {}\n\n",
            m.date_utc,
            m.finished_utc.as_deref().unwrap_or("-"),
            m.cpus,
            m.cpu_model,
            m.memory_total,
            m.kernel,
            m.load_average_start,
            m.load_average_end.as_deref().unwrap_or("-"),
            m.git_commit,
        );
        if !m.part_seconds.is_empty() {
            o += &format!(
                "- **Wall-clock time of the system benchmarks**: {:.0} s ({})\n\n",
                m.part_seconds.iter().map(|(_, t)| t).sum::<f64>(),
                m.part_seconds
                    .iter()
                    .map(|(p, t)| format!("{p} {t:.0} s"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        o += "Every figure is the **median of the runs** listed in `report.json` next to this file; ratios are computed per run (both sides measured minutes apart at most, same processes) and the median ratio is quoted. The machine is shared (other builds and tests may run): treat differences under ~20% as noise.\n\n";
        o += "Commands:\n\n```sh\n";
        for c in &m.commands {
            o += c;
            o += "\n";
        }
        o += "```\n\n";
        if !m.overrides.is_empty() {
            o += "Environment overrides: ";
            o += &m
                .overrides
                .iter()
                .map(|(k, v)| format!("`{k}={v}`"))
                .collect::<Vec<_>>()
                .join(", ");
            o += "\n\n";
        }
        o += &crate::goals::markdown(goals);
        o += &self.webhook_md();
        o += &self.memory_md();
        o += &self.controllers_md();
        o += &self.drain_md();
        o += &crate::pool_report::markdown(self.pool.as_ref());
        if !self.micro.is_empty() {
            o += "## Micro-benchmarks (criterion, `benches/review.rs`: decode + review, no HTTP)\n\n| benchmark | median | mean |\n|---|---|---|\n";
            for b in &self.micro {
                o += &format!(
                    "| {} | {:.1} µs | {:.1} µs |\n",
                    b.name,
                    b.median_ns / 1000.0,
                    b.mean_ns / 1000.0
                );
            }
            o += "\n";
        }
        if !self.skipped.is_empty() {
            o += "## Skipped\n\n";
            for s in &self.skipped {
                o += &format!("- {s}\n");
            }
        }
        o
    }

    fn webhook_md(&self) -> String {
        let mut o = String::from("## 1. Webhook under load over TLS\n\n");
        let w = match &self.webhook {
            None => return o + "Not run.\n\n",
            Some(Err(e)) => return o + &format!("**Failed**: {e}\n\n"),
            Some(Ok(w)) => w,
        };
        o += &format!(
            "`evictord serve` in offline mode (release build) and the limit server (`benches/system/limit_server.rs`: axum + rustls, same TLS configuration — ALPN `h2`, `http/1.1` — and certificate, TCP_NODELAY; it parses each body as JSON into a struct holding only `request.uid`, serde skipping the rest, and answers allowed with that uid) on loopback, TLS 1.3. Pinning: {}. Protocols: {}. HTTP/1.1: keep-alive, {} connections at saturation, a pool of {} for the fixed rates. HTTP/1.1 is what kube-apiserver speaks to admission webhooks (its webhook client offers only `http/1.1`). HTTP/2: ALPN `h2` (checked on every connection), {} connections × {} concurrent streams, at saturation and for the fixed rates. Saturation: closed loop per connection (HTTP/1.1) or stream (HTTP/2), {} s warm-up + {} s measured. Fixed rates: open loop, scheduled sends, {} s each, latency from the scheduled send time to the end of the response. Every answer must be 200, allowed, and echo its request's `request.uid` ({} distinct uids per body kind, sent in turn); anything else counts as an error. {} runs, the servers' order rotated each run. Two comparisons: the throughput fraction (server req/s ÷ limit req/s at saturation) and, because on two cores the one-core load generator can be the bottleneck before a server is (then the limit server uses less than its core and the fraction flatters evictord), the server CPU per request of each (read from `/proc/PID/stat` over the measured window; 10 ms tick).\n\n",
            w.pinning,
            w.protocols
                .iter()
                .map(|p| p.label())
                .collect::<Vec<_>>()
                .join(", "),
            w.connections_saturation,
            w.connections_fixed_rate,
            w.h2_connections,
            w.h2_streams,
            w.warmup_s,
            w.saturation_s,
            w.fixed_rate_s,
            w.uid_variants,
            w.runs
        );
        if let Some(b) = &w.baseline {
            o += &format!(
                "**Baseline**: `{b}` (`EVICTORD_BENCH_BASELINE`), started and measured exactly like evictord, in the same rotation.{}\n\n",
                if w.baseline_errors.is_empty() {
                    String::new()
                } else {
                    format!(
                        " Not measured everywhere: {}.",
                        w.baseline_errors.join("; ")
                    )
                }
            );
        }
        match (&w.create_targets, &w.create_skipped) {
            (Some(n), _) => {
                o += &format!(
                    "EvictionRequest creates (`evictionrequest_create_cached_pod`) go to a second `evictord serve` connected to kube-apiserver v1.20 (`--controllers=none`: webhook and caches only), with {n} real pods in its cache; each review targets another of those pods in turn, by a user in `system:masters`: E7 finds the pod in the cache, E8 asks kube-apiserver a SubjectAccessReview whenever its 5 s verdict cache has no answer for that user and pod (so about {n} every 5 s at any rate above {:.0} req/s). kube-apiserver and etcd are not pinned: they share both CPUs with the load.\n\n",
                    *n as f64 / 5.0
                );
            }
            (None, Some(why)) => o += &format!("Not measured: {why}.\n\n"),
            (None, None) => {}
        }
        let mut names: Vec<&str> = Vec::new();
        for b in &w.bodies {
            if !names.contains(&b.body) {
                names.push(b.body);
            }
        }
        for name in names {
            let group: Vec<&BodyResult> = w.bodies.iter().filter(|b| b.body == name).collect();
            o += &format!(
                "### {} ({} bytes, `POST {}`)\n\n",
                name, group[0].bytes, group[0].path
            );
            for b in group {
                o += &body_table(w, b);
            }
        }
        if !w.profiles.is_empty() {
            o += "### Where evictord's time goes (`perf`)\n\nOne more saturation run of evictord per body under `perf record -F 999 -g -p PID` (self time per shared object and symbol; the load generator runs on the other CPU):\n\n";
            for p in &w.profiles {
                o += &match (&p.file, &p.error) {
                    (Some(f), _) => format!(
                        "- {} over {}: [{f}]({f}) ({:.0} req/s while profiled)\n",
                        p.body,
                        p.protocol.label(),
                        p.requests_per_second.unwrap_or(f64::NAN)
                    ),
                    (None, Some(e)) => {
                        format!(
                            "- {} over {}: no profile: {e}\n",
                            p.body,
                            p.protocol.label()
                        )
                    }
                    (None, None) => String::new(),
                };
            }
            o += "\n";
        }
        o
    }

    fn memory_md(&self) -> String {
        let mut o = String::from(
            "## 2. Memory (RSS of `evictord serve`, caches fed by kube-apiserver v1.20)\n\n",
        );
        let mem = match &self.memory {
            None => return o + "Not run.\n\n",
            Some(Err(e)) => return o + &format!("**Failed**: {e}\n\n"),
            Some(Ok(m)) => m,
        };
        o += &format!(
            "Pods created through the API ({} in {:.0} s, {:.0}/s, 32 in flight); each level: a fresh `evictord serve` (all controllers), ready (every watch cache listed), 3 s settle, `VmRSS`. Pods are Deployment-like (labels, owner, node, one container with env/ports/resources/probe; one in ten annotated).\n\n| pods cached | median RSS | runs | (RSS − idle) / pods | median peak RSS (VmHWM) |\n|---|---|---|---|---|\n",
            mem.pods_created, mem.create_seconds, mem.create_per_second
        );
        for l in &mem.levels {
            let [pods, median, runs, per_pod, peak] = level_cells(l);
            o += &format!("| {pods} | {median} | {runs} | {per_pod} | {peak} |\n");
        }
        if let Some(s) = mem.bytes_per_pod_slope {
            o += &format!(
                "\n**Bytes per cached pod** (least-squares slope over the levels): **{s:.0} B**; between the two largest levels: {}. Idle: **{}**.\n",
                mem.bytes_per_pod_marginal
                    .map_or("-".into(), |b| format!("{b:.0} B")),
                mib(mem.idle_rss_bytes as f64)
            );
        }
        if !mem.extrapolated.is_empty() {
            o += "\n**Extrapolated, not measured** (idle + slope × N):";
            for (n, b) in &mem.extrapolated {
                o += &format!(" {n} pods ≈ {};", mib(*b as f64));
            }
            o += "\n";
        }
        if let Some(n) = &mem.note {
            o += &format!("\nNote: {n}\n");
        }
        match &mem.idle_vs_baseline {
            Some(Ok(p)) => {
                o += &format!(
                    "\nIdle RSS, this build vs the baseline binary (`EVICTORD_BENCH_BASELINE`), both started the same way and alternated: **{}** vs **{}** (runs: {} vs {}).\n",
                    mib(p.median_evictord_rss_bytes as f64),
                    mib(p.median_baseline_rss_bytes as f64),
                    p.evictord_rss_bytes
                        .iter()
                        .map(|b| mib(*b as f64))
                        .collect::<Vec<_>>()
                        .join(", "),
                    p.baseline_rss_bytes
                        .iter()
                        .map(|b| mib(*b as f64))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            Some(Err(e)) => o += &format!("\nIdle RSS of the baseline binary: {e}\n"),
            None => {}
        }
        o += &replay_md(mem.replay.as_ref());
        o + "\n"
    }
}

/// The cells of a memory level's row: pods, median RSS, each run's RSS, bytes per pod, peak.
fn level_cells(l: &crate::memory::Level) -> [String; 5] {
    [
        l.pods.to_string(),
        mib(l.median_rss_bytes as f64),
        l.rss_bytes
            .iter()
            .map(|b| mib(*b as f64))
            .collect::<Vec<_>>()
            .join(", "),
        l.bytes_per_pod.map_or("-".into(), |b| format!("{b:.0} B")),
        mib(l.median_peak_rss_bytes as f64),
    ]
}

/// The replayed levels of the memory part.
fn replay_md(replay: Option<&Result<ReplayResults, String>>) -> String {
    let r = match replay {
        None => return String::new(),
        Some(Err(e)) => return format!("\n### Replayed pods\n\n**Failed**: {e}\n"),
        Some(Ok(r)) => r,
    };
    let mut o = format!(
        "\n### Replayed pods (beyond what the control plane holds)\n\n{} real pods recorded from this control plane ({} bytes of list response, `{}`); a plain-HTTP proxy in front of kube-apiserver answers the cluster-wide pod list with N copies of them (renamed, own uid and resourceVersion; `resourceVersion=0` answered whole, as the v1.20 watch cache does) and an idle watch, and forwards every other request. Each level: a fresh `evictord serve` (all controllers) with a kubeconfig pointing at the proxy, ready, 3 s settle, `VmRSS`.\n\n| pods cached (replayed) | median RSS | runs | (RSS − idle) / pods | median peak RSS (VmHWM) | start → ready |\n|---|---|---|---|---|---|\n",
        r.recorded_pods, r.recording_bytes, r.recording_path
    );
    for l in &r.levels {
        let ready = r
            .median_ready_seconds
            .iter()
            .find(|(n, _)| *n == l.pods)
            .map_or("-".into(), |(_, t)| format!("{t:.1} s"));
        let [pods, median, runs, per_pod, peak] = level_cells(l);
        o += &format!("| {pods} | **{median}** | {runs} | {per_pod} | {peak} | {ready} |\n");
    }
    if let Some((n, ratio)) = r.replay_vs_real {
        o += &format!(
            "\nReplayed vs real feed at {n} pods: median RSS ratio **{ratio:.2}** (1.00 = the replay costs evictord what the real control plane does).\n"
        );
    }
    o
}

/// The table of one body over one protocol: limit, evictord and (when measured) the baseline.
fn body_table(w: &WebhookResults, b: &BodyResult) -> String {
    let base = !b.baseline.is_empty();
    let workers = match b.protocol {
        Protocol::Http1 => format!(
            "{} connections at saturation, a pool of {} for the fixed rates",
            w.connections_saturation, w.connections_fixed_rate
        ),
        Protocol::H2 => format!(
            "{} connections × {} streams",
            w.h2_connections, w.h2_streams
        ),
        Protocol::Http1NewConnection => format!(
            "{} workers at saturation, each request on a new connection: TCP and a full TLS 1.3 handshake, no resumption; no fixed rates",
            w.connections_saturation
        ),
    };
    let mut o = format!("#### {} ({workers})\n\n", b.protocol.label());
    o += "| | limit server | evictord | evictord / limit |";
    if base {
        o += " baseline | baseline / limit |";
    }
    o += "\n|---|---|---|---|";
    if base {
        o += "---|---|";
    }
    o += "\n";
    let row = |label: &str, l: String, e: String, er: String, bl: String, br: String| {
        let mut r = format!("| {label} | {l} | {e} | {er} |");
        if base {
            r += &format!(" {bl} | {br} |");
        }
        r + "\n"
    };
    let sat = |runs: &[ServerRun]| median(runs.iter().map(|r| r.saturation.requests_per_second));
    o += &row(
        "requests/s at saturation",
        format!("{:.0}", sat(&b.limit)),
        format!("{:.0}", sat(&b.evictord)),
        format!("**{:.2}**", median(b.throughput_ratio.iter().copied())),
        format!("{:.0}", sat(&b.baseline)),
        format!("{:.2}", median(b.baseline_throughput_ratio.iter().copied())),
    );
    let cores =
        |runs: &[ServerRun]| median(runs.iter().filter_map(|r| r.saturation.server_cpu_cores));
    let per_req = |runs: &[ServerRun]| {
        median(
            runs.iter()
                .filter_map(|r| r.saturation.server_cpu_us_per_request),
        )
    };
    o += &row(
        "server CPU at saturation (cores)",
        format!("{:.2}", cores(&b.limit)),
        format!("{:.2}", cores(&b.evictord)),
        String::new(),
        format!("{:.2}", cores(&b.baseline)),
        String::new(),
    );
    o += &row(
        "server CPU per request",
        format!("{:.1} µs", per_req(&b.limit)),
        format!("{:.1} µs", per_req(&b.evictord)),
        format!(
            "**{:.2}** (limit µs / evictord µs)",
            median(b.cpu_efficiency_ratio.iter().copied())
        ),
        format!("{:.1} µs", per_req(&b.baseline)),
        format!(
            "{:.2}",
            median(b.baseline_cpu_efficiency_ratio.iter().copied())
        ),
    );
    for (i, rate) in w.rates.iter().enumerate() {
        let pick = |runs: &[ServerRun], f: fn(&FixedRate) -> f64| {
            median(runs.iter().filter_map(|r| r.fixed.get(i)).map(f))
        };
        for (label, f) in [
            ("p50", (|r: &FixedRate| r.p50_ms) as fn(&FixedRate) -> f64),
            ("p99", |r| r.p99_ms),
            ("p99.9", |r| r.p999_ms),
        ] {
            let (l, e, bl) = (
                pick(&b.limit, f),
                pick(&b.evictord, f),
                pick(&b.baseline, f),
            );
            o += &row(
                &format!("{label} at {rate} req/s"),
                format!("{l:.2} ms"),
                format!("{e:.2} ms"),
                format!("{:.2}", e / l),
                format!("{bl:.2} ms"),
                format!("{:.2}", bl / l),
            );
        }
        let lost = |runs: &[ServerRun]| -> String {
            let (mut n, mut uid) = (0, 0);
            for r in runs.iter().filter_map(|r| r.fixed.get(i)) {
                n += r.errors + r.not_sent;
                uid += r.uid_mismatches;
            }
            if uid > 0 {
                format!("{n} ({uid} wrong uid)")
            } else {
                n.to_string()
            }
        };
        o += &row(
            &format!("errors + not sent at {rate} req/s (all runs)"),
            lost(&b.limit),
            lost(&b.evictord),
            String::new(),
            lost(&b.baseline),
            String::new(),
        );
    }
    let errs = |runs: &[ServerRun]| -> String {
        let n: u64 = runs.iter().map(|r| r.saturation.errors).sum();
        let uid: u64 = runs.iter().map(|r| r.saturation.uid_mismatches).sum();
        if uid > 0 {
            format!("{n} ({uid} wrong uid)")
        } else {
            n.to_string()
        }
    };
    o += &row(
        "errors at saturation (all runs)",
        errs(&b.limit),
        errs(&b.evictord),
        String::new(),
        errs(&b.baseline),
        String::new(),
    );
    o + "\n"
}
