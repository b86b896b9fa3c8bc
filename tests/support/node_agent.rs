//! The node agent on the test control plane ([`Agent`]: `evictord node-agent` as a process) and
//! one test's world for it ([`World`]: a namespace, a node of its own selected by a label, a
//! static pod directory in the scratch directory, and what a test does with them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use evictord::api::{CONDITION_EVICTED, EvictionRequest, KUBELET_INTERCEPTOR, NodeMaintenance};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::control_plane::{TestCluster, free_port, kill_on_exit, tail};
use super::evictord::{FAST, http_get, metric_sum, readyz_within};
use super::fixtures::{draining_maintenance, node};
use super::static_kubelet::StaticKubelet;
use super::wait::until;

pub const TIMEOUT: Duration = Duration::from_secs(90);
pub const REASON: &str = "kernel upgrade";

/// A running `evictord node-agent`.
pub struct Agent {
    child: Option<Child>,
    pub probe_port: u16,
    log: PathBuf,
}

impl Agent {
    pub fn start(c: &TestCluster, node: &str, dir: &Path) -> Agent {
        Agent::start_as(c, node, dir, &c.kubeconfig)
    }

    /// With the credentials of `kubeconfig`.
    pub fn start_as(c: &TestCluster, node: &str, dir: &Path, kubeconfig: &Path) -> Agent {
        Agent::start_with(
            c,
            node,
            dir,
            kubeconfig,
            &[
                "--check-interval=1s",
                "--interceptor-deadline=6s",
                "--min-heartbeat-interval=1s",
            ],
        )
    }

    /// With the credentials of `kubeconfig` and the flags `args` (besides the node, the
    /// directory and the probe address).
    pub fn start_with(
        c: &TestCluster,
        node: &str,
        dir: &Path,
        kubeconfig: &Path,
        args: &[&str],
    ) -> Agent {
        let probe_port = free_port();
        let log = c.dir.join(format!("node-agent-{node}-{probe_port}.log"));
        let child = Command::new(super::evictord::BIN)
            .arg("node-agent")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--node-name={node}"))
            .arg(format!("--static-pod-path={}", dir.display()))
            .arg(format!("--probe-addr=127.0.0.1:{probe_port}"))
            .args(args)
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

    pub async fn ready(&self) {
        if !readyz_within(self.probe_port, Duration::from_secs(30)).await {
            panic!("the node agent did not become ready:\n{}", self.logs());
        }
    }

    pub fn logs(&self) -> String {
        tail(&self.full_log(), 60)
    }

    pub fn full_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn metric(&self, series: &str) -> f64 {
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
pub struct World {
    pub c: &'static TestCluster,
    pub client: Client,
    pub ns: String,
    pub node: String,
    pub dir: PathBuf,
}

pub async fn world(prefix: &str) -> World {
    let c = super::cluster().await;
    super::evictord::shared(FAST).await;
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
    pub fn manifest(&self, name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  terminationGracePeriodSeconds: 2\n  automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: {image}\n",
            ns = self.ns
        )
    }

    pub fn mirror_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    pub fn held_copy(&self, file: &str) -> PathBuf {
        self.dir.join(".evictord-held/manifests").join(file)
    }

    pub async fn mirror_pod(&self, name: &str) -> Option<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .get_opt(&self.mirror_name(name))
            .await
            .unwrap()
    }

    pub async fn wait_mirror_pod(&self, name: &str) -> Pod {
        until(TIMEOUT, &format!("mirror pod of {name}"), || async {
            self.mirror_pod(name).await
        })
        .await
    }

    pub async fn wait_mirror_pod_gone(&self, name: &str) {
        until(TIMEOUT, &format!("mirror pod of {name} gone"), || async {
            self.mirror_pod(name).await.is_none().then_some(())
        })
        .await
    }

    pub async fn drain(&self) -> String {
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

    pub async fn complete(&self, maintenance: &str) {
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
    pub async fn wait_kubelet_message(
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
    pub async fn node_events(&self) -> Vec<(String, String)> {
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

    pub async fn wait_event(&self, reason: &str) -> String {
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
    pub async fn hold_etcd(&self) -> String {
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
    pub async fn stays_down(&self, kubelet: &StaticKubelet, starts: usize) {
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

    pub async fn wait_restored(&self, content: &str) {
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
