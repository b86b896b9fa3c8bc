//! `evictord node-agent` on a real control plane: the agent process against kube-apiserver and
//! evictord (webhook and controllers), a temporary directory as the kubelet's static pod
//! directory and a played kubelet that keeps a mirror pod per manifest
//! ([`support::static_kubelet`]). A NodeMaintenance in Drain reaches the Static stage, the agent
//! moves the manifest out, the mirror pod goes; Complete puts it back. SIGKILLed while a
//! manifest is held, the agent loses nothing and starts nothing early; a manifest put at the
//! original path by someone else is never overwritten.
//!
//! The manifests declare no interceptor: the eviction request controller gives the mirror pods of
//! a node whose agent announced itself `kubelet.k8s.io` (SPEC 2.3 step 5).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use evictord::api::{
    CONDITION_DRAINED, CONDITION_EVICTED, EvictionRequest, KUBELET_INTERCEPTOR,
    NODE_AGENT_ANNOTATION, NodeMaintenance,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::control_plane::{TestCluster, free_port, kill_on_exit, tail};
use support::evictord::{FAST, http_get, metric_sum, readyz_within};
use support::fixtures::{create_eviction_request, draining_maintenance, node};
use support::static_kubelet::StaticKubelet;
use support::tools::{kubectl, run};
use support::wait::until;

const TIMEOUT: Duration = Duration::from_secs(90);
const REASON: &str = "kernel upgrade";

/// A running `evictord node-agent`.
struct Agent {
    child: Option<Child>,
    probe_port: u16,
    log: PathBuf,
}

impl Agent {
    fn start(c: &TestCluster, node: &str, dir: &Path) -> Agent {
        Agent::start_as(c, node, dir, &c.kubeconfig)
    }

    /// With the credentials of `kubeconfig`.
    fn start_as(c: &TestCluster, node: &str, dir: &Path, kubeconfig: &Path) -> Agent {
        let probe_port = free_port();
        let log = c.dir.join(format!("node-agent-{node}-{probe_port}.log"));
        let child = Command::new(support::evictord::BIN)
            .arg("node-agent")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--node-name={node}"))
            .arg(format!("--static-pod-path={}", dir.display()))
            .arg(format!("--probe-addr=127.0.0.1:{probe_port}"))
            .args([
                "--check-interval=1s",
                "--interceptor-deadline=6s",
                "--min-heartbeat-interval=1s",
            ])
            .env("POD_NAME", format!("agent-{node}"))
            .env(
                "RUST_LOG",
                std::env::var("EVICTORD_TEST_LOG").unwrap_or_else(|_| "info,evictord=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log)
                    .expect("log"),
            )
            .spawn()
            .expect("starting evictord node-agent");
        kill_on_exit(child.id());
        Agent {
            child: Some(child),
            probe_port,
            log,
        }
    }

    async fn ready(&self) {
        if !readyz_within(self.probe_port, Duration::from_secs(30)).await {
            panic!("the node agent did not become ready:\n{}", self.logs());
        }
    }

    fn logs(&self) -> String {
        tail(&self.full_log(), 60)
    }

    fn full_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn metric(&self, series: &str) -> f64 {
        let (_, body) = http_get(self.probe_port, "/metrics")
            .await
            .expect("/metrics");
        metric_sum(&body, series)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One test's world: a namespace, a node selected by its own label, a static pod directory.
struct World {
    c: &'static TestCluster,
    client: Client,
    ns: String,
    node: String,
    dir: PathBuf,
}

async fn world(prefix: &str) -> World {
    let c = support::cluster().await;
    support::evictord::shared(FAST).await;
    let client = c.client().await;
    let ns = c.namespace(prefix).await;
    let node_name = format!("{ns}-node");
    node(&node_name)
        .label("static-agent", &ns)
        .create(&client)
        .await;
    let dir = c.dir.join(format!("static-pods-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    World {
        c,
        client,
        ns,
        node: node_name,
        dir,
    }
}

impl World {
    fn manifest(&self, name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  terminationGracePeriodSeconds: 2\n  automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: {image}\n",
            ns = self.ns
        )
    }

    fn mirror_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    fn held_copy(&self, file: &str) -> PathBuf {
        self.dir.join(".evictord-held/manifests").join(file)
    }

    async fn mirror_pod(&self, name: &str) -> Option<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .get_opt(&self.mirror_name(name))
            .await
            .unwrap()
    }

    async fn wait_mirror_pod(&self, name: &str) -> Pod {
        until(TIMEOUT, &format!("mirror pod of {name}"), || async {
            self.mirror_pod(name).await
        })
        .await
    }

    async fn wait_mirror_pod_gone(&self, name: &str) {
        until(TIMEOUT, &format!("mirror pod of {name} gone"), || async {
            self.mirror_pod(name).await.is_none().then_some(())
        })
        .await
    }

    async fn drain(&self) -> String {
        let name = format!("{}-maintenance", self.ns);
        Api::<NodeMaintenance>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &draining_maintenance(&name, "static-agent", &self.ns, REASON),
            )
            .await
            .unwrap();
        name
    }

    async fn complete(&self, maintenance: &str) {
        Api::<NodeMaintenance>::all(self.client.clone())
            .patch(
                maintenance,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"stage": "Complete"}})),
            )
            .await
            .unwrap();
    }

    /// The kubelet.k8s.io entry of the pod's request, once its message contains `text`.
    async fn wait_kubelet_message(
        &self,
        uid: &str,
        text: &str,
    ) -> evictord::api::InterceptorStatus {
        let api: Api<EvictionRequest> = Api::namespaced(self.client.clone(), &self.ns);
        until(
            TIMEOUT,
            &format!("kubelet.k8s.io saying {text:?}"),
            || async {
                let r = api.get_opt(uid).await.unwrap()?;
                let e = r.status?.interceptor(KUBELET_INTERCEPTOR)?.clone();
                e.message.as_deref()?.contains(text).then_some(e)
            },
        )
        .await
    }

    /// The reasons of the events about the node.
    async fn node_events(&self) -> Vec<(String, String)> {
        Api::<Event>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&self.node))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    async fn wait_event(&self, reason: &str) -> String {
        until(
            TIMEOUT,
            &format!("event {reason} on node {}", self.node),
            || async {
                self.node_events()
                    .await
                    .into_iter()
                    .find(|(r, _)| r == reason)
                    .map(|(_, note)| note)
            },
        )
        .await
    }

    /// Holds a manifest: maintenance in Drain, the agent moves it, the mirror pod goes.
    /// Returns the maintenance's name.
    async fn hold_etcd(&self) -> String {
        let pod = self.wait_mirror_pod("etcd").await;
        let uid = pod.metadata.uid.unwrap();
        let maintenance = self.drain().await;
        let entry = self
            .wait_kubelet_message(
                &uid,
                &format!(
                    "etcd is terminating the pod due to node maintenance {maintenance} ({REASON})"
                ),
            )
            .await;
        assert!(entry.expected_finish_time.is_some(), "{entry:?}");
        assert!(
            !self.dir.join("etcd.yaml").exists(),
            "the manifest left the kubelet's directory"
        );
        assert!(
            self.held_copy("etcd.yaml").is_file(),
            "the manifest is held"
        );
        self.wait_mirror_pod_gone("etcd").await;
        // The pod is gone: the request is Evicted.
        let api: Api<EvictionRequest> = Api::namespaced(self.client.clone(), &self.ns);
        until(TIMEOUT, "the request Evicted", || async {
            let r = api.get_opt(&uid).await.unwrap()?;
            r.status?.is_true(CONDITION_EVICTED).then_some(())
        })
        .await;
        maintenance
    }

    /// Nothing starts the static pod while the maintenance holds it (several agent checks).
    async fn stays_down(&self, kubelet: &StaticKubelet, starts: usize) {
        for _ in 0..15 {
            assert!(
                self.mirror_pod("etcd").await.is_none(),
                "the static pod started early"
            );
            assert_eq!(
                kubelet.started("etcd"),
                starts,
                "the static pod started early"
            );
            assert!(!self.dir.join("etcd.yaml").exists());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_restored(&self, content: &str) {
        until(
            TIMEOUT,
            "the manifest back in the kubelet's directory",
            || async {
                (std::fs::read_to_string(self.dir.join("etcd.yaml")).ok()? == content).then_some(())
            },
        )
        .await;
        assert!(!self.held_copy("etcd.yaml").exists());
    }
}

#[tokio::test]
async fn a_drain_holds_the_static_pod_until_complete() {
    let w = world("agent-drain").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;

    // The agent announces itself on its node.
    let nodes: Api<Node> = Api::all(w.client.clone());
    let n = nodes.get(&w.node).await.unwrap();
    assert_eq!(
        n.metadata
            .annotations
            .unwrap_or_default()
            .get(NODE_AGENT_ANNOTATION),
        Some(&format!("agent-{}", w.node))
    );

    let maintenance = w.hold_etcd().await;
    let note = w.wait_event("StaticPodManifestHeld").await;
    assert!(
        note.contains("etcd.yaml") && note.contains(&maintenance),
        "{note}"
    );
    // The maintenance counts the static pod as gone.
    until(TIMEOUT, "the maintenance Drained", || async {
        let m = Api::<NodeMaintenance>::all(w.client.clone())
            .get(&maintenance)
            .await
            .unwrap();
        let drained = m
            .status?
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_DRAINED && c.status == "True");
        drained.then_some(())
    })
    .await;
    w.stays_down(&kubelet, 1).await;

    w.complete(&maintenance).await;
    w.wait_restored(&etcd).await;
    w.wait_mirror_pod("etcd").await;
    assert_eq!(kubelet.started("etcd"), 2);
    let note = w.wait_event("StaticPodManifestRestored").await;
    assert!(note.contains("etcd.yaml"), "{note}");
    assert_eq!(
        agent
            .metric("evictord_node_agent_moves_total{result=\"held\"}")
            .await,
        1.0
    );
    until(TIMEOUT, "the restore counted", || async {
        (agent
            .metric("evictord_node_agent_moves_total{result=\"restored\"}")
            .await
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        agent.metric("evictord_node_agent_held_manifests").await,
        0.0
    );
    assert_eq!(
        agent.metric("evictord_node_agent_conflicts").await,
        0.0,
        "{}",
        agent.logs()
    );
}

#[tokio::test]
async fn a_killed_agent_loses_nothing_and_starts_nothing_early() {
    let w = world("agent-kill").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let mut agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    let maintenance = w.hold_etcd().await;

    agent.kill();
    w.stays_down(&kubelet, 1).await;
    assert_eq!(
        std::fs::read_to_string(w.held_copy("etcd.yaml")).unwrap(),
        etcd,
        "the held copy is intact"
    );

    // A new agent reads the held directory and carries on: still held while in Drain.
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    w.stays_down(&kubelet, 1).await;
    assert_eq!(
        agent.metric("evictord_node_agent_held_manifests").await,
        1.0
    );

    w.complete(&maintenance).await;
    w.wait_restored(&etcd).await;
    w.wait_mirror_pod("etcd").await;
    assert_eq!(kubelet.started("etcd"), 2, "{}", agent.logs());
}

#[tokio::test]
async fn a_manifest_put_back_by_someone_else_is_not_overwritten() {
    let w = world("agent-conflict").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    let maintenance = w.hold_etcd().await;

    // The administrator puts a new version in place during the maintenance: it runs.
    let theirs = w.manifest("etcd", "registry.invalid/etcd:2");
    std::fs::write(w.dir.join("etcd.yaml"), &theirs).unwrap();
    w.wait_mirror_pod("etcd").await;
    let note = w.wait_event("HeldStaticPodManifestConflict").await;
    assert!(
        note.contains("etcd.yaml") && note.contains("remove"),
        "{note}"
    );

    w.complete(&maintenance).await;
    until(TIMEOUT, "the conflict counted", || async {
        (agent.metric("evictord_node_agent_conflicts").await == 1.0).then_some(())
    })
    .await;
    // Several checks after Complete: theirs stays, ours stays held, nothing is restored.
    for _ in 0..10 {
        assert_eq!(
            std::fs::read_to_string(w.dir.join("etcd.yaml")).unwrap(),
            theirs
        );
        assert_eq!(
            std::fs::read_to_string(w.held_copy("etcd.yaml")).unwrap(),
            etcd
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(kubelet.started("etcd"), 2);
    assert_eq!(
        agent
            .metric("evictord_node_agent_moves_total{result=\"restored\"}")
            .await,
        0.0
    );
}

#[tokio::test]
async fn a_mirror_pod_no_maintenance_targets_is_left_running() {
    let w = world("agent-untargeted").await;
    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let _kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start(w.c, &w.node, &w.dir);
    agent.ready().await;
    let pod = w.wait_mirror_pod("etcd").await;
    let uid = pod.metadata.uid.unwrap();
    create_eviction_request(
        &w.client,
        &w.ns,
        &w.mirror_name("etcd"),
        &uid,
        &["test.example.com"],
    )
    .await;
    let entry = w
        .wait_kubelet_message(&uid, "no NodeMaintenance in stage Drain targets static pod")
        .await;
    assert!(entry.completion_time.is_some(), "{entry:?}");
    assert_eq!(
        std::fs::read_to_string(w.dir.join("etcd.yaml")).unwrap(),
        etcd
    );
    assert!(w.mirror_pod("etcd").await.is_some());
    assert_eq!(agent.metric("evictord_node_agent_moves_total").await, 0.0);
}

/// `helm template` of the chart with the node agent on; `values` is an extra values file.
fn render_agent(release: &str, ns: &str, values: Option<&str>) -> Vec<serde_norway::Value> {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/evictord");
    let mut args = vec![
        "template",
        release,
        chart,
        "--namespace",
        ns,
        "--kube-version",
        "1.20.2",
        "--set",
        "nodeAgent.enabled=true",
    ];
    if let Some(v) = values {
        args.extend(["--values", v]);
    }
    let out = run("helm", &args, None, None);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_norway::Deserializer::from_str(&text)
        .map(|d| <serde_norway::Value as serde::Deserialize>::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [serde_norway::Value], kind: &str) -> &'a serde_norway::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// The chart's DaemonSet: every node and taint, the static pod directory from the host, root
/// without any capability on a read-only root filesystem, pod labels that neither the webhook's
/// Service nor its PodDisruptionBudget select; and its arguments are accepted by the binary.
#[test]
fn the_charts_daemonset() {
    let full = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/evictord/ci/full-values.yaml"
    );
    for values in [None, Some(full)] {
        let docs = render_agent("evictord", "evictord-system", values);
        let ds = find(&docs, "DaemonSet");
        let pod = &ds["spec"]["template"];
        let c = &pod["spec"]["containers"][0];
        let path = if values.is_some() {
            "/var/lib/kubelet/static-pods"
        } else {
            "/etc/kubernetes/manifests"
        };
        assert_eq!(pod["spec"]["volumes"][0]["hostPath"]["path"], path);
        assert_eq!(c["volumeMounts"][0]["mountPath"], path);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert!(c["securityContext"]["capabilities"]["add"].is_null());
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 0);
        if values.is_none() {
            assert_eq!(pod["spec"]["tolerations"][0]["operator"], "Exists");
            assert!(pod["spec"]["tolerations"][0]["key"].is_null());
            assert_eq!(pod["spec"]["priorityClassName"], "system-node-critical");
        }
        let service = docs.iter().find(|d| d["kind"] == "Service").unwrap();
        let labels = pod["metadata"]["labels"].as_mapping().unwrap();
        let selector = service["spec"]["selector"].as_mapping().unwrap();
        assert!(
            selector.iter().any(|(k, v)| labels.get(k) != Some(v)),
            "the webhook Service selects the agent's pods"
        );
        let args: Vec<String> = c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let out = Command::new(support::evictord::BIN)
            .args(&args)
            .env("EVICTORD_KUBECONFIG", "/nonexistent/kubeconfig")
            .env("NODE_NAME", "n")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "evictord {args:?}: {stderr}");
        assert!(stderr.contains("reading kubeconfig"), "{stderr}");
    }
}

/// The agent as the chart's own ServiceAccount, with the chart's ClusterRole applied for real:
/// it announces itself, holds and restores a manifest, reports a conflict (events, series) and
/// never meets a `Forbidden`.
#[tokio::test]
async fn the_charts_rbac_is_enough_for_the_agent() {
    let w = world("agent-rbac").await;
    let docs = render_agent(&w.ns, &w.ns, None);
    let rbac: String = docs
        .iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("ServiceAccount" | "ClusterRole" | "ClusterRoleBinding")
            )
        })
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("node-agent"))
        })
        .map(|d| format!("---\n{}", serde_norway::to_string(d).unwrap()))
        .collect();
    assert_eq!(rbac.matches("\nkind: ").count(), 3, "{rbac}");
    let out = kubectl(w.c, &["apply", "-f", "-"], Some(&rbac));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sa = find(&docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig =
        w.c.kubeconfig_as(&format!("system:serviceaccount:{}:{sa}", w.ns));

    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let _kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start_as(w.c, &w.node, &w.dir, &kubeconfig);
    agent.ready().await;
    let maintenance = w.hold_etcd().await;
    w.wait_event("StaticPodManifestHeld").await;
    // A conflict, told as a Warning event; resolved, and back: the same event again (a series,
    // patched).
    for _ in 0..2 {
        std::fs::write(w.held_copy("etcd.yaml"), "edited").unwrap();
        w.wait_event("HeldStaticPodManifestConflict").await;
        until(TIMEOUT, "the conflict counted", || async {
            (agent.metric("evictord_node_agent_conflicts").await == 1.0).then_some(())
        })
        .await;
        std::fs::write(w.held_copy("etcd.yaml"), &etcd).unwrap();
        until(TIMEOUT, "the conflict resolved", || async {
            (agent.metric("evictord_node_agent_conflicts").await == 0.0).then_some(())
        })
        .await;
    }
    until(TIMEOUT, "the conflict event repeated", || async {
        Api::<Event>::all(w.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("HeldStaticPodManifestConflict")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&w.node)
            })?
            .series
            .filter(|s| s.count >= 2)
            .map(drop)
    })
    .await;
    w.complete(&maintenance).await;
    w.wait_restored(&etcd).await;
    w.wait_event("StaticPodManifestRestored").await;
    let log = agent.full_log();
    for denied in ["Forbidden", "forbidden", "403"] {
        assert!(
            !log.contains(denied),
            "the agent met {denied}:\n{}",
            agent.logs()
        );
    }
}
