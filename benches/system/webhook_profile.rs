//! Part 1's profiles: one more HTTP/1.1 saturation run of evictord under
//! `perf record -F 999 -g -p PID`, its self-time summary written to `profile-<body>.txt` next to
//! `REPORT.md`; what kept `perf` from working is recorded instead.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::loadgen::{self, Protocol, ReviewBody, Target};
use crate::settings::Settings;
use crate::webhook::saturation_workers;
use crate::webhook_bodies::Body;

/// A `perf` profile of evictord saturated with one body.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub body: &'static str,
    pub protocol: Protocol,
    /// The summary's file name, next to `REPORT.md`.
    pub file: Option<String>,
    /// Why there is no profile.
    pub error: Option<String>,
    /// evictord's throughput during the profiled run (perf costs a little).
    pub requests_per_second: Option<f64>,
    pub seconds: f64,
}

/// Lines of a profile summary section at most (the hottest symbols first).
const PROFILE_LINES: usize = 40;
/// Characters of a profile line at most (Rust symbols are long).
const PROFILE_WIDTH: usize = 180;

fn perf_available() -> Result<(), String> {
    match Command::new("perf").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`perf --version` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!(
            "no `perf` on PATH ({e}; Debian: apt-get install linux-perf)"
        )),
    }
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `perf report` of `data` with the columns `fields`, rows over `limit` percent, comment and
/// blank lines dropped, at most `lines`.
fn perf_report(data: &Path, fields: &str, limit: &str, lines: usize) -> Result<String, String> {
    perf_report_with(data, &["--no-children", "-F", fields], limit, lines)
}

/// `perf report` of `data` with `view` (e.g. `--children` and columns), as [`perf_report`].
fn perf_report_with(
    data: &Path,
    view: &[&str],
    limit: &str,
    lines: usize,
) -> Result<String, String> {
    // `-F` alone (no `--sort`) keeps the rows ordered by overhead.
    let out = Command::new("perf")
        .arg("report")
        .arg("-i")
        .arg(data)
        .args(["--stdio", "-g", "none", "--percent-limit", limit])
        .args(view)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("perf report: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "perf report failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(lines)
        .map(|l| {
            l.chars()
                .take(PROFILE_WIDTH)
                .collect::<String>()
                .trim_end()
                .to_string()
                + "\n"
        })
        .collect())
}

/// One more saturation run of evictord (pid `pid`) with `body`, under
/// `perf record -F 999 -g -p PID` for the measured window; writes `profile-<body>.txt` into
/// `report_dir` (the shared objects, then the hottest symbols, self time). Never fails the
/// benchmark: what went wrong is recorded instead.
pub(crate) async fn profile(
    target: &Target,
    pid: u32,
    body: Body,
    creates: &[ReviewBody],
    s: &Settings,
    scratch: &Path,
    report_dir: &Path,
) -> Profile {
    let mut p = Profile {
        body: body.name(),
        protocol: target.protocol,
        file: None,
        error: None,
        requests_per_second: None,
        seconds: s.saturation_time.as_secs_f64(),
    };
    if let Err(e) = perf_available() {
        p.error = Some(e);
        return p;
    }
    let data = if s.profile_keep {
        report_dir.join(format!("perf-{}.data", body.name()))
    } else {
        scratch.join(format!("perf-{}.data", body.name()))
    };
    let call_graph = if s.profile_keep {
        ["--call-graph", "dwarf,16384"]
    } else {
        ["--call-graph", "fp"]
    };
    let run = {
        let (target, bodies) = (target.clone(), body.bodies(creates));
        let (workers, warmup, time) = (
            saturation_workers(s, target.protocol),
            s.warmup,
            s.saturation_time,
        );
        tokio::spawn(async move {
            loadgen::saturate(&target, bodies, workers, warmup, time, Some(pid)).await
        })
    };
    // The load generator opens its connections, then warms up; perf covers the measured window.
    tokio::time::sleep(s.warmup).await;
    let record = tokio::process::Command::new("perf")
        .args(["record", "-F", "999"])
        .args(call_graph)
        .args(["-p", &pid.to_string(), "-o"])
        .arg(&data)
        .args([
            "--",
            "sleep",
            &format!("{:.1}", s.saturation_time.as_secs_f64()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await;
    match run.await {
        Ok(Ok(sat)) => p.requests_per_second = Some(sat.requests_per_second),
        Ok(Err(e)) => p.error = Some(format!("the profiled saturation run failed: {e:#}")),
        Err(e) => p.error = Some(format!("the profiled saturation run panicked: {e}")),
    }
    let why = |stderr: &[u8]| {
        let text = String::from_utf8_lossy(stderr);
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        format!(
            "{} (kernel.perf_event_paranoid = {}, running as uid {})",
            tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
            paranoid(),
            uid()
        )
    };
    match record {
        Err(e) => {
            p.error = Some(format!("perf record: {e}"));
            return p;
        }
        Ok(o) if !o.status.success() || !data.exists() => {
            p.error = Some(format!("perf record failed: {}", why(&o.stderr)));
            return p;
        }
        Ok(_) => {}
    }
    let by_dso = perf_report(&data, "overhead,dso", "1.5", 15);
    let by_symbol = perf_report(&data, "overhead,dso,sym", "0.5", PROFILE_LINES);
    let inclusive = if s.profile_keep {
        let view = ["--children", "--dsos", "evictord", "--sort", "sym"];
        match perf_report_with(&data, &view, "1", 80) {
            Ok(t) => format!(
                "\n== evictord's functions with their callees (children), kept data: {} ==\n{t}",
                data.display()
            ),
            Err(e) => format!("\n== inclusive view failed: {e} ==\n"),
        }
    } else {
        let _ = std::fs::remove_file(&data);
        String::new()
    };
    let (by_dso, by_symbol) = match (by_dso, by_symbol) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            p.error = Some(e);
            return p;
        }
    };
    let file = format!("profile-{}.txt", body.name());
    let text = format!(
        "perf profile of evictord (pid {pid}) saturated with {} over {}: {} connections x {} streams, closed loop, {:.0} req/s during the profile\n\
         perf record -F 999 --call-graph {} -p {pid} -- sleep {:.1}   (after {:.0} s of warm-up; self time, samples of every thread)\n\
         perf report --stdio --no-children -g none -F overhead,dso[,sym] --percent-limit 1.5 (objects) / 0.5 (symbols)   (lines over {PROFILE_WIDTH} characters cut)\n\n\
         == by shared object ==\n{by_dso}\n== hottest symbols (at most {PROFILE_LINES}) ==\n{by_symbol}{inclusive}",
        body.name(),
        target.protocol.label(),
        saturation_workers(s, target.protocol).0,
        saturation_workers(s, target.protocol).1,
        p.requests_per_second.unwrap_or(f64::NAN),
        call_graph[1],
        s.saturation_time.as_secs_f64(),
        s.warmup.as_secs_f64(),
    );
    match std::fs::write(report_dir.join(&file), text) {
        Ok(()) => p.file = Some(file),
        Err(e) => p.error = Some(format!("writing {file}: {e}")),
    }
    p
}

fn uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}
