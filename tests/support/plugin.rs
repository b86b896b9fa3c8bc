//! Running the kubectl plugin through the real `kubectl` (a directory holding only
//! `kubectl-evictord` in front of PATH) against the test control plane, and the drain scenario
//! its tests share.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ListParams;
use kube::{Api, Client};

use super::fixtures::{blocking_pdb, node, pod, priority_class};
use super::tools::kubectl_command;
use super::wait::until;

/// How long a step of a plugin test may take.
pub const T: Duration = Duration::from_secs(90);
/// evictord's flags for the plugin tests: a short deadline and a fast retry.
pub const FLAGS: &[&str] = &[
    "--interceptor-deadline=60s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
];
/// The interceptor the test plays by hand.
pub const INTERCEPTOR: &str = "hold.example.com";

/// evictord with [`FLAGS`], an admin client and a fresh namespace.
pub async fn setup(prefix: &str) -> (Client, String) {
    super::evictord::shared(FLAGS).await;
    let c = super::cluster().await;
    (c.client().await, c.namespace(prefix).await)
}

/// A directory holding only the plugin, put in front of PATH: kubectl finds it there. It lives
/// in Cargo's scratch directory for integration tests (inside the target directory, so nothing
/// is left behind in /tmp) and is shared by the test processes, which all link the same binary.
pub fn plugin_path() -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-path");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl-evictord");
    let bin = env!("CARGO_BIN_EXE_kubectl-evictord");
    // A link to another binary (a target directory copied or moved from another checkout) is
    // replaced, atomically (a rename), since other test processes may be reading it.
    if std::fs::read_link(&link).is_ok_and(|t| t != std::path::Path::new(bin)) {
        let fresh = dir.join(format!("kubectl-evictord.{}", std::process::id()));
        let _ = std::fs::remove_file(&fresh);
        std::os::unix::fs::symlink(bin, &fresh).unwrap();
        std::fs::rename(&fresh, &link).unwrap();
    }
    match std::os::unix::fs::symlink(bin, &link) {
        Ok(()) => {}
        // Made by another test process (or an earlier run) for the same binary.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("{}: {e}", link.display()),
    }
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `kubectl evictord ARGS` through the real kubectl.
pub async fn plugin_command(args: &[&str]) -> Command {
    let c = super::cluster().await;
    let mut full = vec!["evictord"];
    full.extend_from_slice(args);
    let mut cmd = kubectl_command(c, &full);
    cmd.env("PATH", plugin_path());
    cmd
}

/// Runs `kubectl evictord ARGS` to the end.
pub async fn plugin(args: &[&str]) -> Output {
    plugin_command(args)
        .await
        .stdin(Stdio::null())
        .output()
        .expect("kubectl evictord")
}

/// Standard output and error of a run.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits until the log file contains `needle`.
pub async fn log_shows(log: &std::path::Path, needle: &str) {
    until(
        T,
        &format!("the plugin's output to show {needle:?}"),
        || async {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .contains(needle)
                .then_some(())
        },
    )
    .await;
}

/// The drain scenario: on `node`, `plain` (priority 100), `annotated` (200, waits for
/// [`INTERCEPTOR`]) and `guarded` (300, blocked by PodDisruptionBudget `guarded-pdb`), each of a
/// ReplicaSet (a drain refuses pods no controller recreates without `--force`).
pub async fn scenario(client: &Client, ns: &str, node_name: &str) -> String {
    node(node_name).create(client).await;
    priority_class(client, "plugin-100", 100).await;
    priority_class(client, "plugin-200", 200).await;
    priority_class(client, "plugin-300", 300).await;
    pod("plain")
        .on_node(node_name)
        .replicaset("web")
        .priority_class("plugin-100")
        .create(client, ns)
        .await;
    let annotated = pod("annotated")
        .on_node(node_name)
        .replicaset("data")
        .priority_class("plugin-200")
        .interceptors(&[INTERCEPTOR])
        .create(client, ns)
        .await;
    pod("guarded")
        .on_node(node_name)
        .replicaset("guarded")
        .label("app", "guarded")
        .priority_class("plugin-300")
        .create(client, ns)
        .await;
    blocking_pdb(client, ns, "guarded-pdb", "app", "guarded", 1).await;
    annotated.metadata.uid.unwrap()
}

/// Records the order in which EvictionRequests appear in `ns` (by target pod), until `n` did.
pub fn record_request_order(
    client: Client,
    ns: String,
    n: usize,
) -> tokio::task::JoinHandle<Vec<(String, Time)>> {
    tokio::spawn(async move {
        let api: Api<EvictionRequest> = Api::namespaced(client, &ns);
        let mut seen: Vec<(String, Time)> = Vec::new();
        // 150 s at most, 100 ms apart.
        for _ in 0..1500 {
            if let Ok(list) = api.list(&ListParams::default()).await {
                let mut new: Vec<&EvictionRequest> = list
                    .items
                    .iter()
                    .filter(|r| !seen.iter().any(|(p, _)| *p == r.spec.target.pod.name))
                    .collect();
                new.sort_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0));
                for r in new {
                    seen.push((
                        r.spec.target.pod.name.clone(),
                        r.metadata.creation_timestamp.clone().unwrap(),
                    ));
                }
            }
            if seen.len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    })
}

/// The plugin's requests (its user agent) that kube-apiserver received between `from` and `to`,
/// from the audit log of a control plane started with
/// [`super::control_plane::cluster_with_request_audit`].
pub fn plugin_requests(
    c: &super::TestCluster,
    from: std::time::SystemTime,
    to: std::time::SystemTime,
) -> Vec<super::audit::AuditedRequest> {
    let agent = format!("evictord/{} (plugin)", env!("CARGO_PKG_VERSION"));
    let log = c.request_audit.as_ref().expect("the request audit log");
    super::audit::requests(log)
        .into_iter()
        .filter(|r| r.user_agent == agent && r.received >= from && r.received <= to)
        .collect()
}
