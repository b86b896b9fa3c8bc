//! What the benchmark measured: every part's results (a part that failed holds its error
//! message), criterion's estimates of the micro-benchmarks, and the machine and invocation
//! ([`Report`], what `report.json` holds besides the goals). `report.rs` writes it out
//! (`Report::write` and the rendering of `REPORT.md` are implemented there).

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::controllers::ControllerResults;
use crate::drain::DrainResults;
use crate::machine::cpus;
use crate::memory::MemoryResults;
use crate::pool_results::PoolResults;
use crate::settings::Settings;
use crate::webhook::WebhookResults;

/// Machine and invocation.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    pub date_utc: String,
    pub finished_utc: Option<String>,
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_total: String,
    pub kernel: String,
    pub load_average_start: String,
    pub load_average_end: Option<String>,
    pub commands: Vec<String>,
    pub overrides: Vec<(String, String)>,
    pub git_commit: String,
    /// Wall-clock seconds of each part of this process, in order.
    pub part_seconds: Vec<(String, f64)>,
}

/// The whole report; a part that failed holds its error message.
#[derive(Debug, Serialize)]
pub struct Report {
    pub meta: Meta,
    pub webhook: Option<Result<WebhookResults, String>>,
    pub memory: Option<Result<MemoryResults, String>>,
    pub controllers: Option<Result<ControllerResults, String>>,
    pub drain: Option<Result<DrainResults, String>>,
    pub pool: Option<Result<PoolResults, String>>,
    /// Criterion's estimates of `benches/review.rs`, when it ran before (`make bench`).
    pub micro: Vec<Micro>,
    pub skipped: Vec<String>,
}

/// One criterion benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct Micro {
    pub name: String,
    pub median_ns: f64,
    pub mean_ns: f64,
}

fn first_line(path: &str, prefix: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
        .unwrap_or_default()
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn now_utc() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Reads criterion's estimates of the review micro-benchmarks.
fn micro() -> Vec<Micro> {
    let root = target_dir().join("criterion");
    let mut out = Vec::new();
    for name in [
        "review_pod/annotated_10KiB",
        "review_pod/unannotated_10KiB",
        "review_eviction_request/status_heartbeat",
        "review_eviction_request/status_heartbeat_decode_only",
        "review_eviction_request/status_heartbeat_uid_only",
        "review_eviction_request/status_heartbeat_floor_envelope",
        "review_eviction_request/status_heartbeat_floor_statuses",
        "review_eviction_request/status_heartbeat_floor_everything",
    ] {
        let path = root.join(name).join("new/estimates.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let get = |k: &str| {
            v.pointer(&format!("/{k}/point_estimate"))
                .and_then(Value::as_f64)
        };
        if let (Some(median), Some(mean)) = (get("median"), get("mean")) {
            out.push(Micro {
                name: name.into(),
                median_ns: median,
                mean_ns: mean,
            });
        }
    }
    out
}

impl Report {
    pub fn new(s: &Settings) -> Self {
        let cmd = std::env::args().collect::<Vec<_>>().join(" ");
        Self {
            meta: Meta {
                date_utc: now_utc(),
                finished_utc: None,
                cpus: cpus(),
                cpu_model: first_line("/proc/cpuinfo", "model name"),
                memory_total: first_line("/proc/meminfo", "MemTotal"),
                kernel: sh("uname", &["-sr"]),
                load_average_start: loadavg(),
                load_average_end: None,
                commands: vec![
                    "make bench".into(),
                    "  = export KUBEBUILDER_ASSETS=\"$(tests/tools/envtest.sh)\" EVICTORD_TEST_LOG=warn".into(),
                    "    export EVICTORD_TOOLS=\"$(tests/tools/helm-kubectl.sh)\"".into(),
                    "    cargo bench --locked --no-run --bench review --bench system".into(),
                    "    cargo bench --locked --bench review -- --warm-up-time 1 --measurement-time 3".into(),
                    "    cargo bench --locked --bench system".into(),
                    format!("this process: {cmd}"),
                ],
                overrides: s.overrides.clone(),
                git_commit: sh("git", &["rev-parse", "--short", "HEAD"]),
                part_seconds: Vec::new(),
            },
            webhook: None,
            memory: None,
            controllers: None,
            drain: None,
            pool: None,
            micro: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Records the end time and load, and reads the criterion estimates.
    pub fn finish(&mut self) {
        self.meta.finished_utc = Some(now_utc());
        self.meta.load_average_end = Some(loadavg());
        self.micro = micro();
    }
}
