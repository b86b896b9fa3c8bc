//! A node pool on the real control plane, shared by the pool benchmark (`benches/system/pool.rs`)
//! and its real-cluster test (`tests/pool.rs`): Ready Node objects, a workload mix from
//! [`workloads::MIX`] (Deployments behind PodDisruptionBudgets, HPA-scaled Deployments,
//! StatefulSets, a DaemonSet, bare pods) created through kube-controller-manager's controllers,
//! a played scheduler and kubelet for thousands of pods ([`played`], decisions in [`schedule`]),
//! and the availability sampler ([`measure`]).
//!
//! Every node carries [`POOL_LABEL`]` = id`; the nodes to drain also [`DRAIN_LABEL`]` = id` (a
//! NodeMaintenance selects them by it). The workloads live in one namespace of their own.

pub mod measure;
pub mod nodes;
pub mod played;
pub mod schedule;
pub mod workloads;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::api::{GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use evictord::api::NodeMaintenance;

use measure::Tracked;
use played::Played;
use schedule::Timing;
use workloads::{Kind, Variant, Workload};

/// Label of every node of a pool (value: the pool's id).
pub const POOL_LABEL: &str = "pool.evictord.dev/pool";
/// Label of the nodes to drain (value: the pool's id).
pub const DRAIN_LABEL: &str = "pool.evictord.dev/drain";

/// The flags of `kubectl drain` as an administrator drains a pool with it:
/// `--ignore-daemonsets` (drain refuses nodes with DaemonSet pods otherwise; they stay),
/// `--delete-emptydir-data` (drain refuses pods with emptyDir volumes otherwise, and pools hold
/// them), `--force` (drain refuses pods without a controller — the bare pods — otherwise).
/// Callers add `--timeout`.
pub const KUBECTL_DRAIN_FLAGS: &[&str] =
    &["--ignore-daemonsets", "--delete-emptydir-data", "--force"];

/// Objects created at once while building a pool.
const CREATING: usize = 16;

/// What pool to build.
#[derive(Clone, Debug)]
pub struct Spec {
    pub nodes: usize,
    /// The first `drained` nodes (by name) are the ones to drain.
    pub drained: usize,
    /// About this many pods (see [`workloads::plan`]).
    pub pods: usize,
    pub variant: Variant,
    pub timing: Timing,
    /// The interceptors the evictord under test serves (see [`workloads::SERVED`]).
    pub served: Vec<String>,
    /// Every row has at least one workload (small pools).
    pub at_least_one: bool,
}

/// A pool on the control plane, with its played scheduler and kubelet.
pub struct Pool {
    pub client: Client,
    pub id: String,
    pub ns: String,
    pub nodes: Vec<String>,
    pub drained: Vec<String>,
    pub workloads: Vec<Workload>,
    pub played: Played,
}

/// The API of a manifest's kind.
fn api_for(client: &Client, ns: &str, manifest: &Value) -> anyhow::Result<Api<DynamicObject>> {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let kind = manifest["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "DaemonSet" => "daemonsets",
        "Pod" => "pods",
        "HorizontalPodAutoscaler" => "horizontalpodautoscalers",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "Service" => "services",
        other => anyhow::bail!("no API known for kind {other}"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Ok(Api::namespaced_with(client.clone(), ns, &ar))
}

impl Pool {
    /// Creates the nodes, starts the played scheduler and kubelet (with clients of their own
    /// from `c`, named [`played::SCHEDULER_USER_AGENT`] and [`played::KUBELET_USER_AGENT`]), and
    /// creates the workloads with `client` (it does not wait for them: see
    /// [`Pool::wait_settled`]).
    pub async fn create(
        c: &super::TestCluster,
        client: &Client,
        ns: &str,
        id: &str,
        spec: &Spec,
    ) -> anyhow::Result<Pool> {
        let nodes: Vec<String> = (0..spec.nodes).map(|i| format!("{id}-{i:03}")).collect();
        let drained: Vec<String> = nodes.iter().take(spec.drained).cloned().collect();
        let node_api: Api<Node> = Api::all(client.clone());
        let created: Vec<anyhow::Result<()>> = futures::stream::iter(nodes.iter().enumerate())
            .map(|(i, name)| {
                let api = node_api.clone();
                let drain = i < spec.drained;
                async move { create_node(&api, name, id, drain).await }
            })
            .buffer_unordered(CREATING)
            .collect()
            .await;
        created.into_iter().collect::<anyhow::Result<()>>()?;
        let played = Played::start(
            c.client_named(played::SCHEDULER_USER_AGENT).await,
            c.client_named(played::KUBELET_USER_AGENT).await,
            ns,
            &format!("{POOL_LABEL}={id}"),
            spec.timing,
        );
        let mut workloads = Vec::new();
        for (row, count) in workloads::plan(
            workloads::MIX,
            spec.pods,
            spec.nodes,
            spec.variant,
            spec.at_least_one,
        ) {
            for i in 0..count {
                workloads.push(Workload {
                    name: format!("{}-{i:03}", row.name),
                    row,
                    interceptors: workloads::declared(&row, &spec.served),
                });
            }
        }
        let manifests: Vec<Value> = workloads
            .iter()
            .flat_map(|w| workloads::objects(w, id))
            .collect();
        let created: Vec<anyhow::Result<()>> = futures::stream::iter(manifests)
            .map(|m| async move {
                let api = api_for(client, ns, &m)?;
                let obj: DynamicObject = serde_json::from_value(m.clone())?;
                api.create(&PostParams::default(), &obj)
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        anyhow::anyhow!("creating {} {}: {e}", m["kind"], m["metadata"]["name"])
                    })
            })
            .buffer_unordered(CREATING)
            .collect()
            .await;
        created.into_iter().collect::<anyhow::Result<()>>()?;
        Ok(Pool {
            client: client.clone(),
            id: id.to_string(),
            ns: ns.to_string(),
            nodes,
            drained,
            workloads,
            played,
        })
    }

    /// The pods the pool holds when settled.
    pub fn pod_count(&self) -> usize {
        self.workloads
            .iter()
            .map(|w| self.expected(w) as usize)
            .sum()
    }

    /// A workload's pods when settled.
    fn expected(&self, w: &Workload) -> i32 {
        match w.row.kind {
            Kind::DaemonSet => self.nodes.len() as i32,
            Kind::BarePod => 1,
            Kind::Deployment | Kind::StatefulSet => w.row.replicas,
        }
    }

    /// Waits until every workload has its pods available and the controllers say so (each
    /// Deployment's available replicas, each StatefulSet's ready replicas, the DaemonSet's
    /// available pods, each PodDisruptionBudget's healthy pods); returns how long that took.
    pub async fn wait_settled(&self, within: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.played.synced().await;
        let pods = self.played.pods();
        loop {
            let mut counts: BTreeMap<&str, i32> = BTreeMap::new();
            for p in pods.state() {
                if measure::available(&p)
                    && let Some(w) = p
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(workloads::WORKLOAD_LABEL))
                    && let Some(w) = self.workloads.iter().find(|x| &x.name == w)
                {
                    *counts.entry(w.name.as_str()).or_insert(0) += 1;
                }
            }
            let short: Vec<&str> = self
                .workloads
                .iter()
                .filter(|w| counts.get(w.name.as_str()).copied().unwrap_or(0) < self.expected(w))
                .map(|w| w.name.as_str())
                .collect();
            let waiting = if short.is_empty() {
                self.controllers_waiting().await?
            } else {
                format!("{} workloads short of pods, e.g. {}", short.len(), short[0])
            };
            if waiting.is_empty() {
                return Ok(t.elapsed());
            }
            if t.elapsed() >= within {
                anyhow::bail!(
                    "the pool did not settle within {within:?}: {waiting}; played scheduler and kubelet: {}",
                    self.played.stats.summary()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// What the controllers' statuses still lack (empty: nothing).
    async fn controllers_waiting(&self) -> anyhow::Result<String> {
        let lp = ListParams::default();
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), &self.ns)
            .list(&lp)
            .await?;
        for d in &deployments.items {
            let s = d.status.clone().unwrap_or_default();
            if s.observed_generation != d.metadata.generation
                || s.available_replicas.unwrap_or(0) < d.spec.replicas.unwrap_or(1)
            {
                return Ok(format!("Deployment {:?} status", d.metadata.name));
            }
        }
        let sets = Api::<StatefulSet>::namespaced(self.client.clone(), &self.ns)
            .list(&lp)
            .await?;
        for s in &sets.items {
            let st = s.status.clone().unwrap_or_default();
            if st.ready_replicas.unwrap_or(0) < s.spec.replicas.unwrap_or(1) {
                return Ok(format!("StatefulSet {:?} status", s.metadata.name));
            }
        }
        let daemonsets = Api::<DaemonSet>::namespaced(self.client.clone(), &self.ns)
            .list(&lp)
            .await?;
        for d in &daemonsets.items {
            let st = d.status.clone().unwrap_or_default();
            if st.number_available.unwrap_or(0) < self.nodes.len() as i32 {
                return Ok(format!("DaemonSet {:?} status", d.metadata.name));
            }
        }
        let pdbs = super::fixtures::pdb_api(&self.client, &self.ns)
            .list(&lp)
            .await?;
        for p in &pdbs.items {
            let st = &p.data["status"];
            let observed = st["observedGeneration"].as_i64() == p.metadata.generation;
            if !observed
                || st["currentHealthy"].as_i64().unwrap_or(0)
                    < st["desiredHealthy"].as_i64().unwrap_or(i64::MAX)
            {
                return Ok(format!("PodDisruptionBudget {:?} status", p.metadata.name));
            }
        }
        Ok(String::new())
    }

    /// After a drain: waits until every Deployment and StatefulSet has its pods available again,
    /// every Deployment not autoscaled is back at its replicas without a surge record (evictord's
    /// `evictord.dev/surge`) and every autoscaler is back at its `minReplicas` without one
    /// (`evictord.dev/hpa-surge`); returns how long that took.
    pub async fn wait_restored(&self, within: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let pods = self.played.pods();
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        let autoscalers: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &self.ns);
        loop {
            let mut counts: BTreeMap<String, i32> = BTreeMap::new();
            for p in pods.state() {
                if measure::available(&p)
                    && let Some(w) = p
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(workloads::WORKLOAD_LABEL))
                {
                    *counts.entry(w.clone()).or_insert(0) += 1;
                }
            }
            let short = self.workloads.iter().find(|w| {
                matches!(w.row.kind, Kind::Deployment | Kind::StatefulSet)
                    && counts.get(&w.name).copied().unwrap_or(0) < w.row.replicas
            });
            let waiting = match short {
                Some(w) => format!(
                    "{} has fewer than {} pods available",
                    w.name, w.row.replicas
                ),
                None => deployments
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .find(|d| {
                        let row = self
                            .workloads
                            .iter()
                            .find(|w| w.name == d.metadata.name.clone().unwrap_or_default());
                        let surged = d
                            .metadata
                            .annotations
                            .as_ref()
                            .is_some_and(|a| a.contains_key("evictord.dev/surge"));
                        // An autoscaled Deployment's replicas are its autoscaler's: it scales
                        // the surge down after its downscale stabilization window (5 minutes by
                        // default), long after evictord put the autoscaler's floor back.
                        surged
                            || row.is_some_and(|w| {
                                !w.row.hpa && d.spec.replicas != Some(w.row.replicas)
                            })
                    })
                    .map(|d| format!("Deployment {:?} not back at its replicas", d.metadata.name))
                    .unwrap_or_default(),
            };
            let waiting = if waiting.is_empty() {
                autoscalers
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .find(|h| {
                        let row = self
                            .workloads
                            .iter()
                            .find(|w| w.name == h.spec.scale_target_ref.name);
                        let raised = h
                            .metadata
                            .annotations
                            .as_ref()
                            .is_some_and(|a| a.contains_key("evictord.dev/hpa-surge"));
                        raised || row.is_some_and(|w| h.spec.min_replicas != Some(w.row.replicas))
                    })
                    .map(|h| {
                        format!(
                            "HorizontalPodAutoscaler {:?} not back at its minReplicas",
                            h.metadata.name
                        )
                    })
                    .unwrap_or_default()
            } else {
                waiting
            };
            if waiting.is_empty() {
                return Ok(t.elapsed());
            }
            if t.elapsed() >= within {
                anyhow::bail!("not restored within {within:?}: {waiting}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The workloads to follow, with their replica counts read from the objects now (call it
    /// right before the drain).
    pub async fn tracked(&self) -> anyhow::Result<Vec<Tracked>> {
        let lp = ListParams::default();
        let mut desired: BTreeMap<String, i32> = BTreeMap::new();
        for d in Api::<Deployment>::namespaced(self.client.clone(), &self.ns)
            .list(&lp)
            .await?
        {
            let r = d.spec.replicas.unwrap_or(1);
            desired.insert(d.metadata.name.unwrap_or_default(), r);
        }
        for s in Api::<StatefulSet>::namespaced(self.client.clone(), &self.ns)
            .list(&lp)
            .await?
        {
            let r = s.spec.replicas.unwrap_or(1);
            desired.insert(s.metadata.name.unwrap_or_default(), r);
        }
        for d in Api::<DaemonSet>::namespaced(self.client.clone(), &self.ns)
            .list(&lp)
            .await?
        {
            let r = d.status.map_or(0, |s| s.desired_number_scheduled);
            desired.insert(d.metadata.name.unwrap_or_default(), r);
        }
        Ok(self
            .workloads
            .iter()
            .map(|w| Tracked {
                name: w.name.clone(),
                row: w.row.name.to_string(),
                kind: w.row.kind,
                desired: desired.get(&w.name).copied().unwrap_or(1),
                budget: w.row.budget,
                goal: workloads::under_goal(&w.row, &w.interceptors),
            })
            .collect())
    }

    /// The drained nodes, as a set.
    pub fn drained_set(&self) -> BTreeSet<String> {
        self.drained.iter().cloned().collect()
    }

    /// Starts sampling the pool every 100 ms (for at most `bound`): its pods, its nodes, and the
    /// NodeMaintenances (a watch of their own, which needs evictord's CRDs installed; until it
    /// has its first list no node counts as held).
    pub async fn sample(&self, bound: Duration) -> anyhow::Result<measure::Sampler> {
        let (maintenances, writer) = reflector::store::<NodeMaintenance>();
        let watch = watcher(
            Api::<NodeMaintenance>::all(self.client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .reflect(writer);
        let feed = tokio::spawn(async move {
            futures::pin_mut!(watch);
            while watch.next().await.is_some() {}
        });
        let sources = measure::Sources {
            pods: self.played.pods(),
            nodes: self.played.nodes(),
            maintenances: Some(maintenances.clone()),
        };
        // The held count starts from the maintenances as they are, not from an empty store.
        let _ =
            tokio::time::timeout(Duration::from_secs(10), maintenances.wait_until_ready()).await;
        Ok(measure::sample(
            sources,
            self.tracked().await?,
            self.drained_set(),
            Duration::from_millis(100),
            bound,
            vec![feed],
        ))
    }

    /// Removes the pool: its workloads and their controllers' objects, its pods (at once), its
    /// nodes; the played scheduler and kubelet stop. (Without a garbage collector on the test
    /// control plane, ReplicaSets and ControllerRevisions are deleted explicitly.)
    pub async fn remove(self) -> anyhow::Result<()> {
        let dp = DeleteParams::default();
        let lp = ListParams::default();
        let c = &self.client;
        let ns = &self.ns;
        Api::<Deployment>::namespaced(c.clone(), ns)
            .delete_collection(&dp, &lp)
            .await?;
        Api::<StatefulSet>::namespaced(c.clone(), ns)
            .delete_collection(&dp, &lp)
            .await?;
        Api::<DaemonSet>::namespaced(c.clone(), ns)
            .delete_collection(&dp, &lp)
            .await?;
        Api::<ReplicaSet>::namespaced(c.clone(), ns)
            .delete_collection(&dp, &lp)
            .await?;
        for kind in [
            ("autoscaling/v1", "HorizontalPodAutoscaler"),
            ("policy/v1beta1", "PodDisruptionBudget"),
        ] {
            let api = api_for(c, ns, &json!({"apiVersion": kind.0, "kind": kind.1}))?;
            api.delete_collection(&dp, &lp).await?;
        }
        // Services have no DELETECOLLECTION before Kubernetes 1.23: one by one.
        let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(c.clone(), ns);
        for s in services.list_metadata(&lp).await?.items {
            let _ = services.delete(&s.name_any(), &dp).await;
        }
        let revisions = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "ControllerRevision"),
            "controllerrevisions",
        );
        Api::<DynamicObject>::namespaced_with(c.clone(), ns, &revisions)
            .delete_collection(&dp, &lp)
            .await?;
        let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        // A controller may still create a pod just before its object goes: bounded retries.
        for _ in 0..60 {
            pods.delete_collection(&now, &lp).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            if pods
                .list_metadata(&lp.clone().limit(1))
                .await?
                .items
                .is_empty()
            {
                break;
            }
        }
        Api::<Node>::all(c.clone())
            .delete_collection(
                &dp,
                &ListParams::default().labels(&format!("{POOL_LABEL}={}", self.id)),
            )
            .await?;
        Ok(())
    }
}

/// Creates a Ready node of the pool.
async fn create_node(api: &Api<Node>, name: &str, pool: &str, drain: bool) -> anyhow::Result<()> {
    let mut labels = json!({POOL_LABEL: pool, "kubernetes.io/hostname": name});
    if drain {
        labels[DRAIN_LABEL] = json!(pool);
    }
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
    }))?;
    api.create(&PostParams::default(), &node)
        .await
        .map_err(|e| anyhow::anyhow!("creating node {name}: {e}"))?;
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "played kubelet", "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "capacity": {"pods": "250", "cpu": "16", "memory": "64Gi"},
        "allocatable": {"pods": "250", "cpu": "16", "memory": "64Gi"},
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| anyhow::anyhow!("marking node {name} Ready: {e}"))?;
    // kube-apiserver's TaintNodesByCondition admission taints a new node
    // `node.kubernetes.io/not-ready:NoSchedule`; the node lifecycle controller (not run here)
    // removes it once the node is Ready.
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"taints": null}})),
    )
    .await
    .map_err(|e| anyhow::anyhow!("untainting node {name}: {e}"))?;
    Ok(())
}
