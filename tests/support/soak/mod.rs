//! The soak (`make soak`, `tests/soak.rs`): the pool of [`super::pool`] drained over and over —
//! part of it by NodeMaintenances under a MaintenanceBudget (a rolling maintenance, a few nodes
//! at a time), part by the real `kubectl drain` through the Eviction API bridge at the same
//! time — while a seeded schedule of faults ([`schedule`]) hits evictord's two replicas
//! ([`replicas`]) and the control plane, and a checker ([`checker`]) watches the invariants the
//! whole time. This module holds the pieces between them: the fault timeline, the faults'
//! effects, the drain rounds and the end's leftovers check.

pub mod agents;
pub mod checker;
pub mod evidence;
pub mod faults;
pub mod leftovers;
pub mod replicas;
pub mod rounds;
pub mod schedule;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::TestCluster;

/// Label of the nodes the rolling maintenance drains (value: the pool's id); the
/// MaintenanceBudget selects them by it.
pub const MAINTAINED_LABEL: &str = "soak.evictord.dev/maintained";
/// Label of every NodeMaintenance of the soak (value: the round).
pub const ROUND_LABEL: &str = "soak.evictord.dev/round";

/// What happened when: the faults and the drain rounds, for every failure message.
#[derive(Clone, Default)]
pub struct Timeline {
    start: Arc<Mutex<Option<Instant>>>,
    events: Arc<Mutex<Vec<(f64, String)>>>,
}

impl Timeline {
    pub fn new(start: Instant) -> Self {
        Self {
            start: Arc::new(Mutex::new(Some(start))),
            events: Arc::default(),
        }
    }

    pub fn note(&self, what: impl Into<String>) {
        let t = self
            .start
            .lock()
            .unwrap()
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        let what = what.into();
        eprintln!("soak {t:7.1} s: {what}");
        self.events.lock().unwrap().push((t, what));
    }

    pub fn render(&self) -> String {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(t, w)| format!("  {t:7.1} s  {w}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Where the earlier build's binary and CRDs are (`SOAK_OLD_BUILD`, the directory
/// `tests/tools/soak-old-build.sh` prints).
pub struct OldBuild {
    pub bin: std::path::PathBuf,
    pub crds: std::path::PathBuf,
    /// Set while the zero-downtime goal is suspended (shared with the checker): when this build
    /// has no `--shutdown-delay` (before 0a2fe35) it closes its webhook's connections at once on
    /// SIGTERM, so a bridge call cut then fails open and a drainer's eviction may go past the
    /// pod's interceptors while the upgrade stops its replicas.
    pub goal_suspended: Option<Arc<AtomicBool>>,
}

impl OldBuild {
    /// The build in `dir` (`evictord`, `crds/`); the goal is suspended during its replicas'
    /// stops when its `serve --help` has no `--shutdown-delay`.
    pub fn at(dir: &std::path::Path) -> OldBuild {
        let bin = dir.join("evictord");
        let help = std::process::Command::new(&bin)
            .args(["serve", "--help"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        OldBuild {
            bin,
            crds: dir.join("crds"),
            goal_suspended: (!help.contains("--shutdown-delay"))
                .then(|| Arc::new(AtomicBool::new(false))),
        }
    }
}

/// How long after an upgrade's roll the goal stays suspended: a drainer's call cut by the last
/// stop is answered within the webhook's timeout, and its pod leaves then.
const GOAL_SUSPENDED_AFTER_ROLL: Duration = Duration::from_secs(10);

/// The CRD files of this build (the chart's).
pub fn current_crds() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/evictord/crds")
}

/// Applies the CRD files in `dir` as the book's upgrade section says
/// (`kubectl apply --server-side -f <dir>`), then waits until every one is Established.
pub fn apply_crds(c: &TestCluster, dir: &std::path::Path) -> anyhow::Result<()> {
    let dir = dir.to_string_lossy().to_string();
    let out = super::tools::kubectl(c, &["apply", "--server-side", "-f", &dir], None);
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply --server-side -f {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = super::tools::kubectl(
        c,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &dir,
        ],
        None,
    );
    anyhow::ensure!(
        out.status.success(),
        "CRDs of {dir} not Established: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Labels `nodes` with [`MAINTAINED_LABEL`]` = id` and creates a MaintenanceBudget `name` over
/// them allowing `max_unavailable` at once.
pub async fn rolling_budget(
    client: &Client,
    name: &str,
    id: &str,
    nodes: &[String],
    max_unavailable: i32,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    for n in nodes {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {MAINTAINED_LABEL: id}}})),
        )
        .await?;
    }
    let b: evictord::api::MaintenanceBudget = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "MaintenanceBudget",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": MAINTAINED_LABEL, "operator": "In", "values": [id]}
            ]}]},
            "maxUnavailable": max_unavailable,
        }
    }))?;
    Api::<evictord::api::MaintenanceBudget>::all(client.clone())
        .create(&PostParams::default(), &b)
        .await?;
    Ok(())
}
