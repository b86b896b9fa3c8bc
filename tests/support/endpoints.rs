//! The traffic-aware drain scenario (SPEC 6.4): a Deployment whose pods declare
//! `deployment.apps.k8s.io,endpoints.evictord.dev` on node `a`, a PodDisruptionBudget
//! `minAvailable` = its replicas, a Service selecting it, replacements scheduled to node `b` by the
//! played kubelet; and a [`Timeline`] that watches the Service's Endpoints and EndpointSlices and
//! the pods, recording when each pod was seen entering and leaving the ready addresses and when
//! its deletion started.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use evictord::api::EvictionRequest;

use super::fixtures::{blocking_pdb, create_eviction_request, node};
use super::kubelet::Kubelet;
pub use super::kubelet::condition;
use super::surge::POOL;
use super::wait::until;

/// The interceptors the scenario's pods declare.
pub const INTERCEPTORS: &str = "deployment.apps.k8s.io,endpoints.evictord.dev";

/// The Deployment, its Service and its budget on node `a`.
pub struct Scenario {
    pub client: Client,
    pub ns: String,
    pub a: String,
    pub b: String,
    pub name: String,
    pub replicas: i32,
    pub kubelet: Kubelet,
}

/// What the scenario's Deployment declares and what protects it.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Its replicas.
    pub replicas: i32,
    /// The PodDisruptionBudget's `minAvailable`.
    pub min_available: i32,
    /// The pods' interceptors.
    pub interceptors: &'static str,
    /// The pods' own deregistration delay, if any.
    pub delay: Option<&'static str>,
}

/// `replicas` pods with the surge and the endpoints interceptors, a budget allowing no
/// disruption: the usual case.
pub fn surged(replicas: i32, delay: Option<&'static str>) -> Shape {
    Shape {
        replicas,
        min_available: replicas,
        interceptors: INTERCEPTORS,
        delay,
    }
}

/// The scenario's Deployment: `replicas` pods labelled `app=name`, maxSurge 1 and
/// maxUnavailable 0, a grace period of 1 s (the deletion is seen before the pod goes), the
/// interceptors and, when given, the pod's own deregistration delay.
pub fn deployment(name: &str, shape: Shape) -> Deployment {
    let (replicas, delay) = (shape.replicas, shape.delay);
    let mut annotations = json!({"evictord.dev/eviction-interceptors": shape.interceptors});
    if let Some(d) = delay {
        annotations["evictord.dev/deregistration-delay"] = json!(d);
    }
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]
                }
            }
        }
    }))
    .expect("deployment")
}

impl Scenario {
    /// Nodes `a` and `b`, the Service, the Deployment on `a` with its pods Ready through the
    /// gate and ready addresses of the Service, and the budget.
    pub async fn start(client: Client, ns: &str, shape: Shape, timeline: &Timeline) -> Scenario {
        let replicas = shape.replicas;
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        node(&a).label(POOL, &a).create(&client).await;
        node(&b).create(&client).await;
        let kubelet = Kubelet::start(client.clone(), ns, &a);
        let name = "web".to_string();
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
        }))
        .expect("service");
        Api::<Service>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &service)
            .await
            .expect("create Service");
        Api::<Deployment>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &deployment(&name, shape))
            .await
            .expect("create Deployment");
        blocking_pdb(&client, ns, "web", "app", &name, shape.min_available).await;
        let s = Scenario {
            client,
            ns: ns.to_string(),
            a,
            b,
            name,
            replicas,
            kubelet,
        };
        s.wait_serving(&s.a.clone(), timeline).await;
        s.kubelet.schedule_to(&s.b);
        s
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits until the Deployment is at its replicas, all available, on `node`, each pod Ready
    /// with `evictord.dev/serving=True` and a ready address of the Service in its Endpoints and
    /// EndpointSlices; returns the pods.
    pub async fn wait_serving(&self, node: &str, timeline: &Timeline) -> Vec<Pod> {
        until(
            Duration::from_secs(120),
            &format!("the Deployment serving on node {node}"),
            || async {
                let d = self.deployments().get(&self.name).await.ok()?;
                let status = d.status?;
                let settled = d.spec.replicas == Some(self.replicas)
                    && !d
                        .metadata
                        .annotations
                        .unwrap_or_default()
                        .contains_key("evictord.dev/surge")
                    && status.replicas == Some(self.replicas)
                    && status.available_replicas == Some(self.replicas);
                let pods = self.pods().list(&ListParams::default()).await.ok()?.items;
                let serving = pods.len() == self.replicas as usize
                    && pods.iter().all(|p| {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                            && condition(p, "evictord.dev/serving") == Some("True")
                            && condition(p, "Ready") == Some("True")
                            && timeline.ready_now(&uid)
                    });
                (settled && serving).then_some(pods)
            },
        )
        .await
    }
}

/// Samples the Deployment's `status.availableReplicas` every 100 ms until [`Available::stop`].
pub struct Available {
    least: Arc<Mutex<(i32, usize)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Available {
    /// Starts sampling Deployment `name`.
    pub fn sample(api: Api<Deployment>, name: &str) -> Available {
        let least = Arc::new(Mutex::new((i32::MAX, 0)));
        let (l, name) = (least.clone(), name.to_string());
        let task = tokio::spawn(async move {
            // Bounded: at most 10 minutes of samples.
            for _ in 0..6000 {
                if let Ok(d) = api.get(&name).await {
                    let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                    let mut l = l.lock().expect("lock");
                    *l = (l.0.min(available), l.1 + 1);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Available { least, task }
    }

    /// Stops; returns (the fewest available replicas seen, the number of samples).
    pub fn stop(self) -> (i32, usize) {
        self.task.abort();
        *self.least.lock().expect("lock")
    }
}

/// Where pods are listed as ready addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The Service's Endpoints.
    Endpoints,
    /// Its EndpointSlices.
    Slices,
}

#[derive(Default)]
struct Seen {
    /// Per source, the ready pod UIDs now, and per slice name its own.
    ready: BTreeMap<Source, BTreeSet<String>>,
    endpoints: BTreeMap<String, BTreeSet<String>>,
    slices: BTreeMap<String, BTreeSet<String>>,
    /// (when, source, uid, entered): every change of a pod's membership.
    changes: Vec<(Instant, Source, String, bool)>,
    /// uid → when its deletion was first seen (deletionTimestamp set, or gone).
    deleted: BTreeMap<String, Instant>,
}

/// Watches of one namespace's Endpoints, EndpointSlices and pods, from the test process (one
/// clock for all of them).
#[derive(Clone)]
pub struct Timeline {
    seen: Arc<Mutex<Seen>>,
    tasks: Arc<Vec<tokio::task::JoinHandle<()>>>,
}

fn ready_uids(targets: impl Iterator<Item = serde_json::Value>) -> BTreeSet<String> {
    targets
        .filter_map(|t| t["uid"].as_str().map(str::to_string))
        .collect()
}

impl Seen {
    fn set(&mut self, source: Source, now: BTreeSet<String>) {
        let at = Instant::now();
        let before = self.ready.entry(source).or_default();
        for uid in now.difference(before) {
            self.changes.push((at, source, uid.clone(), true));
        }
        for uid in before.difference(&now) {
            self.changes.push((at, source, uid.clone(), false));
        }
        *before = now;
    }

    /// Endpoints `name` now (`None`: deleted).
    fn endpoints(&mut self, name: String, e: Option<&Endpoints>) {
        let ready = e
            .map(|e| {
                ready_uids(
                    e.subsets
                        .iter()
                        .flatten()
                        .flat_map(|s| s.addresses.iter().flatten())
                        .filter_map(|a| serde_json::to_value(a.target_ref.as_ref()?).ok()),
                )
            })
            .unwrap_or_default();
        self.endpoints.insert(name, ready);
        let all = self.endpoints.values().flatten().cloned().collect();
        self.set(Source::Endpoints, all);
    }

    fn slice(&mut self, name: String, slice: Option<&serde_json::Value>) {
        let ready = slice
            .map(|s| {
                ready_uids(
                    s["endpoints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
                        .map(|e| e["targetRef"].clone()),
                )
            })
            .unwrap_or_default();
        self.slices.insert(name, ready);
        let all = self.slices.values().flatten().cloned().collect();
        self.set(Source::Slices, all);
    }
}

impl Timeline {
    /// Starts watching the Endpoints and EndpointSlices of Service `service` and the pods of
    /// `ns`.
    pub async fn start(client: &Client, ns: &str, service: &str) -> Timeline {
        Self::start_with(client, ns, Some(service)).await
    }

    /// Starts watching the Endpoints and EndpointSlices of every Service of `ns` and its pods
    /// (a pod's membership is its membership in any of them).
    pub async fn start_namespace(client: &Client, ns: &str) -> Timeline {
        Self::start_with(client, ns, None).await
    }

    async fn start_with(client: &Client, ns: &str, service: Option<&str>) -> Timeline {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let groups = client.list_api_groups().await.expect("discovery");
        let version = evictord::interceptor::endpoints::discovery::slice_version_in(&groups)
            .expect("EndpointSlices served");
        let resource = evictord::interceptor::endpoints::discovery::slice_resource(version);
        let (mut endpoints_config, mut slices_config) =
            (watcher::Config::default(), watcher::Config::default());
        if let Some(service) = service {
            endpoints_config = endpoints_config.fields(&format!("metadata.name={service}"));
            slices_config = slices_config.labels(&format!("kubernetes.io/service-name={service}"));
        }
        let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), ns);
        let slices: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let s = seen.clone();
        let t1 = tokio::spawn(async move {
            let stream = watcher(endpoints, endpoints_config);
            futures::pin_mut!(stream);
            while let Some(e) = stream.next().await {
                match e {
                    Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => {
                        s.lock().expect("lock").endpoints(e.name_any(), Some(&e))
                    }
                    Ok(watcher::Event::Delete(e)) => {
                        s.lock().expect("lock").endpoints(e.name_any(), None)
                    }
                    _ => {}
                }
            }
        });
        let s = seen.clone();
        let t2 = tokio::spawn(async move {
            let stream = watcher(slices, slices_config);
            futures::pin_mut!(stream);
            while let Some(e) = stream.next().await {
                match e {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        let v = serde_json::to_value(&o).unwrap_or_default();
                        s.lock().expect("lock").slice(o.name_any(), Some(&v))
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        s.lock().expect("lock").slice(o.name_any(), None)
                    }
                    _ => {}
                }
            }
        });
        let s = seen.clone();
        let t3 = tokio::spawn(async move {
            let stream = watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(e) = stream.next().await {
                let (p, gone) = match e {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                if gone || p.metadata.deletion_timestamp.is_some() {
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    s.lock()
                        .expect("lock")
                        .deleted
                        .entry(uid)
                        .or_insert_with(Instant::now);
                }
            }
        });
        Timeline {
            seen,
            tasks: Arc::new(vec![t1, t2, t3]),
        }
    }

    /// True when pod `uid` is a ready address in both the Endpoints and the EndpointSlices now.
    pub fn ready_now(&self, uid: &str) -> bool {
        let seen = self.seen.lock().expect("lock");
        [Source::Endpoints, Source::Slices]
            .iter()
            .all(|s| seen.ready.get(s).is_some_and(|r| r.contains(uid)))
    }

    /// True when pod `uid` is a ready address in neither now.
    pub fn out_now(&self, uid: &str) -> bool {
        let seen = self.seen.lock().expect("lock");
        [Source::Endpoints, Source::Slices]
            .iter()
            .all(|s| !seen.ready.get(s).is_some_and(|r| r.contains(uid)))
    }

    /// For pod `uid` in `source`: how long before its deletion started it was last seen leaving
    /// the ready addresses; negative when it was still a ready address then: minus how long
    /// after its deletion started it left, or -1 if it was not seen leaving (yet); `None` while
    /// its deletion has not been seen.
    pub fn out_before_deletion(&self, uid: &str, source: Source) -> Option<f64> {
        let seen = self.seen.lock().expect("lock");
        let deleted = *seen.deleted.get(uid)?;
        let mine = |(_, s, u, _): &&(Instant, Source, String, bool)| *s == source && u == uid;
        let last = seen
            .changes
            .iter()
            .filter(mine)
            .rfind(|(at, ..)| *at <= deleted);
        if let Some((at, _, _, false)) = last {
            return Some(deleted.duration_since(*at).as_secs_f64());
        }
        let left_after = seen
            .changes
            .iter()
            .filter(mine)
            .find(|(at, _, _, entered)| *at > deleted && !*entered);
        Some(left_after.map_or(-1.0, |(at, ..)| -at.duration_since(deleted).as_secs_f64()))
    }

    /// When pod `uid` was last seen entering the ready addresses of `source`, if it was.
    pub fn entered(&self, uid: &str, source: Source) -> Option<Instant> {
        let seen = self.seen.lock().expect("lock");
        seen.changes
            .iter()
            .filter(|(_, s, u, entered)| *s == source && u == uid && *entered)
            .map(|(at, ..)| *at)
            .next_back()
    }

    /// When pod `uid` was last seen leaving the ready addresses of `source`, if it was.
    pub fn left(&self, uid: &str, source: Source) -> Option<Instant> {
        let seen = self.seen.lock().expect("lock");
        seen.changes
            .iter()
            .filter(|(_, s, u, entered)| *s == source && u == uid && !*entered)
            .map(|(at, ..)| *at)
            .next_back()
    }

    /// When the deletion of pod `uid` was first seen, if it was.
    pub fn deletion(&self, uid: &str) -> Option<Instant> {
        self.seen.lock().expect("lock").deleted.get(uid).copied()
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        if Arc::strong_count(&self.tasks) == 1 {
            for t in self.tasks.iter() {
                t.abort();
            }
        }
    }
}

/// The pods of the scenario now.
pub async fn pods(s: &Scenario) -> Vec<Pod> {
    s.pods().list(&ListParams::default()).await.unwrap().items
}

/// A pod's UID (the name of its EvictionRequest).
pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap()
}

/// Every evicted pod was out of the Service's ready addresses, in the Endpoints and in the
/// EndpointSlices, for at least `delay` seconds before its deletion started.
pub async fn assert_out_for_the_delay(timeline: &Timeline, evicted: &[Pod], delay: f64) {
    for p in evicted {
        let u = uid(p);
        for source in [Source::Endpoints, Source::Slices] {
            let gap = until(
                Duration::from_secs(60),
                &format!("the deletion of pod {} seen", p.name_any()),
                || async { timeline.out_before_deletion(&u, source) },
            )
            .await;
            eprintln!(
                "pod {}: out of its {source:?} {gap:.2} s before its deletion",
                p.name_any()
            );
            assert!(
                gap >= 0.0,
                "pod {} was a ready address of its {source:?} when its deletion started",
                p.name_any()
            );
            assert!(
                gap >= delay,
                "pod {} left the ready addresses of its {source:?} only {gap:.2} s before its \
                 deletion started (want at least the delay, {delay} s)",
                p.name_any()
            );
        }
    }
}

/// Two pods with only the endpoints interceptor under a budget that allows one disruption: no
/// surge, so the request reaches the interceptor at once.
pub fn unsurged(delay: Option<&'static str>) -> Shape {
    Shape {
        replicas: 2,
        min_available: 1,
        interceptors: "endpoints.evictord.dev",
        delay,
    }
}

/// The request of pod `p`, created with requester `test.example.com`.
pub async fn request(s: &Scenario, p: &Pod) -> Api<EvictionRequest> {
    create_eviction_request(
        &s.client,
        &s.ns,
        &p.name_any(),
        &uid(p),
        &["test.example.com"],
    )
    .await
}

/// The interceptor's entry message, once it contains `text`.
pub async fn message_containing(api: &Api<EvictionRequest>, uid: &str, text: &str) -> String {
    until(
        Duration::from_secs(60),
        &format!("the interceptor's message to contain {text:?}"),
        || async {
            let s = api.get(uid).await.ok()?.status?;
            let m = s.interceptor("endpoints.evictord.dev")?.message.clone()?;
            m.contains(text).then_some(m)
        },
    )
    .await
}

/// The pod's condition and Ready as the test reads them now, and whether it is going (deleting
/// or gone).
pub async fn conditions(s: &Scenario, name: &str) -> (Option<String>, Option<String>, bool) {
    let Some(p) = s.pods().get_opt(name).await.unwrap() else {
        return (None, None, true);
    };
    (
        condition(&p, "evictord.dev/serving").map(str::to_string),
        condition(&p, "Ready").map(str::to_string),
        p.metadata.deletion_timestamp.is_some(),
    )
}
