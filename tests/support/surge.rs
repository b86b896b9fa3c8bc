//! The zero-downtime drain scenario of the Deployment interceptor, shared by its test binaries:
//! a Deployment on node `a` protected by a PodDisruptionBudget, a NodeMaintenance draining `a`,
//! new pods scheduled to `b` by the fake kubelet, and a sampler of the available replicas.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use evictord::api::{CONDITION_DRAINED, NodeMaintenance};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use super::fixtures::{blocking_pdb, deployment, draining_maintenance, node};
use super::kubelet::Kubelet;
use super::wait::until;

pub const POOL: &str = "surge.evictord.dev/pool";
pub const INTERCEPTOR: &str = "deployment.apps.k8s.io";
/// Flags for the surge tests: a deadline long enough that a loaded machine never times the
/// interceptor out (a timeout would evict without a surge), 1 s heartbeats, fast retries.
pub const FLAGS: &[&str] = &[
    "--interceptor-deadline=40s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
];

/// A Deployment running on node `a` of its own, with node `b` for the replacements.
pub struct Scenario {
    pub client: Client,
    pub ns: String,
    pub a: String,
    pub b: String,
    pub name: String,
    pub replicas: i32,
    pub kubelet: Kubelet,
}

impl Scenario {
    /// Nodes `a` and `b`, the Deployment (`replicas`, `max_surge`, maxUnavailable 0) on `a`,
    /// available, and a PDB `minAvailable: replicas`.
    pub async fn start(client: Client, ns: &str, replicas: i32, max_surge: i32) -> Scenario {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        node(&a).label(POOL, &a).create(&client).await;
        node(&b).create(&client).await;
        let kubelet = Kubelet::start(client.clone(), ns, &a);
        let name = "web".to_string();
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        api.create(
            &PostParams::default(),
            &deployment(&name, replicas, max_surge, 0, &[INTERCEPTOR]),
        )
        .await
        .expect("create Deployment");
        blocking_pdb(&client, ns, "web", "app", &name, replicas).await;
        let s = Scenario {
            client,
            ns: ns.to_string(),
            a,
            b,
            name,
            replicas,
            kubelet,
        };
        s.wait_settled_on(&s.a.clone(), "the Deployment available on node a")
            .await;
        s.kubelet.schedule_to(&s.b);
        s
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Starts draining node `a`.
    pub async fn drain(&self) {
        let nm = draining_maintenance(&self.ns, POOL, &self.a, "surge test");
        Api::<NodeMaintenance>::all(self.client.clone())
            .create(&PostParams::default(), &nm)
            .await
            .expect("create NodeMaintenance");
    }

    /// Waits for the NodeMaintenance's `Drained=True`.
    pub async fn wait_drained(&self, timeout: Duration) {
        let api: Api<NodeMaintenance> = Api::all(self.client.clone());
        until(timeout, "the NodeMaintenance Drained", || async {
            let nm = api.get(&self.ns).await.ok()?;
            nm.status?
                .conditions
                .iter()
                .any(|c| c.type_ == CONDITION_DRAINED && c.status == "True")
                .then_some(())
        })
        .await;
    }

    /// Waits until the Deployment is back at its replicas, without a surge record, every pod
    /// available and on `node`.
    pub async fn wait_settled_on(&self, node: &str, what: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        until(Duration::from_secs(120), what, || async {
            let d = self.deployments().get(&self.name).await.ok()?;
            let status = d.status.clone()?;
            let settled = d.spec.replicas == Some(self.replicas)
                && !d.annotations().contains_key("evictord.dev/surge")
                && status.replicas == Some(self.replicas)
                && status.available_replicas == Some(self.replicas);
            let list = pods.list(&ListParams::default()).await.ok()?;
            let on_node = list
                .items
                .iter()
                .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
            (settled && on_node && list.items.len() == self.replicas as usize).then_some(())
        })
        .await;
    }

    /// Drains node `a` while sampling: the NodeMaintenance `Drained`, then the Deployment back
    /// at its replicas on node `b`; returns the sampler's `((least available, samples), most
    /// spec.replicas)`, sampled before, through and after the drain.
    pub async fn drain_sampled(&self) -> ((i32, usize), i32) {
        let sampler = self.sample();
        self.drain().await;
        self.wait_drained(Duration::from_secs(180)).await;
        self.wait_settled_on(&self.b, "the Deployment back at its replicas on node b")
            .await;
        sampler.stop_all().await
    }

    /// The reasons of the events on the namespace's Deployments (repeated events are folded
    /// into one with a count).
    pub async fn deployment_event_reasons(&self) -> Vec<String> {
        super::fixtures::event_reasons(&self.client, Some(&self.ns), "Deployment").await
    }

    /// Samples `status.availableReplicas` every 100 ms until [`Sampler::stop`].
    pub fn sample(&self) -> Sampler {
        let min = Arc::new(AtomicI32::new(i32::MAX));
        let max_replicas = Arc::new(AtomicI32::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, n, s) = (min.clone(), samples.clone(), stop.clone());
        let top = max_replicas.clone();
        let api = self.deployments();
        let name = self.name.clone();
        let task = tokio::spawn(async move {
            // Bounded: at most 10 minutes of samples.
            for _ in 0..6000 {
                if s.load(Ordering::Acquire) {
                    return;
                }
                if let Ok(d) = api.get(&name).await {
                    top.fetch_max(d.spec.replicas.unwrap_or(0), Ordering::AcqRel);
                    let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                    m.fetch_min(available, Ordering::AcqRel);
                    n.fetch_add(1, Ordering::AcqRel);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Sampler {
            min,
            max_replicas,
            samples,
            stop,
            task,
        }
    }
}

/// A running sample of the available replicas.
pub struct Sampler {
    min: Arc<AtomicI32>,
    max_replicas: Arc<AtomicI32>,
    samples: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Stops sampling; returns (fewest available replicas seen, number of samples).
    pub async fn stop(self) -> (i32, usize) {
        self.stop_all().await.0
    }

    /// Stops sampling; returns ((fewest available replicas, samples), most `spec.replicas`).
    pub async fn stop_all(self) -> ((i32, usize), i32) {
        self.stop.store(true, Ordering::Release);
        let _ = self.task.await;
        (
            (
                self.min.load(Ordering::Acquire),
                self.samples.load(Ordering::Acquire),
            ),
            self.max_replicas.load(Ordering::Acquire),
        )
    }
}
