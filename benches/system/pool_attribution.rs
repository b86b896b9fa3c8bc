//! Issue 44's bill per pod: evictord's requests in a mode's window (from kube-apiserver's audit
//! log, [`crate::support::audit::requests_with_objects`]) charged to the pods they served, by the
//! class of pod ([`PodClass`]: intercepted, without interceptors and never refused, refused by a
//! PodDisruptionBudget at least once), and the rest — nodes, NodeMaintenances, MaintenanceBudgets,
//! leases, lists and watches, SubjectAccessReviews, anything that names no pod — shared
//! ([`attribute`]). A pod's share of the shared requests goes with its class's pod count
//! ([`Attribution::per_pod`]).
//!
//! How a request finds its pod, from its audit event's `objectRef` (any verb: a list or watch of
//! one object by name names it too; those of many objects name none and are shared):
//! - `evictionrequests` with a name: the request is named after its pod's UID (SPEC);
//! - `pods` with a name (`pods/eviction` included): the pod of that name in the request's
//!   namespace, through the EvictionRequests' `spec.target.pod` (a StatefulSet's pod keeps its
//!   name across moves: the pod whose EvictionRequest was created last before the request);
//! - `events` with a name: an event is named `<its object's name>.<hex suffix>`; the prefix as
//!   a pod's UID, a pod's name, or a workload evictord wrote (below);
//! - `deployments` (`/scale` too), `horizontalpodautoscalers`, `replicasets` with a name: the
//!   intercepted pods' (only their surges write them);
//! - the interceptors' lists and watches of one namespace's pods: the intercepted pods' (the
//!   readiness watches of surged workloads; evictord's caches of pods are cluster-wide);
//! - an `evictionrequests` create whose event names no object (kube-apiserver names it from
//!   the body even at the Metadata level; kept for a log that does not): one per
//!   EvictionRequest of each class, the rest shared.
//!
//! Its table tests are `tests/pool_attribution.rs` (the benchmark's target runs without the test
//! harness).

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use evictord::api::{EvictionRequest, IMPERATIVE_INTERCEPTOR};
use serde::Serialize;

use crate::support::audit::{AuditedRequest, ObjectRef, client_of, evictord_component};

/// What issue 44 charges a pod's requests to, by its EvictionRequest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodClass {
    /// An interceptor besides `imperative-eviction.k8s.io` (goal ≤ 16 requests per pod).
    Intercepted,
    /// No other interceptor, and no Eviction API call refused (`failedAPIEvictionCounter` 0;
    /// goal ≤ 6).
    Plain,
    /// No other interceptor, and at least one Eviction API call refused (each refusal adds its
    /// retry; reported apart).
    Refused,
}

impl PodClass {
    /// Every class, in the report's order.
    pub const ALL: [PodClass; 3] = [PodClass::Intercepted, PodClass::Plain, PodClass::Refused];

    /// The class of `r`'s pod.
    pub fn of(r: &EvictionRequest) -> PodClass {
        if is_intercepted(r) {
            return PodClass::Intercepted;
        }
        let refused = r
            .status
            .as_ref()
            .and_then(|s| s.pod_eviction_status.as_ref())
            .is_some_and(|p| p.failed_api_eviction_counter > 0);
        if refused {
            PodClass::Refused
        } else {
            PodClass::Plain
        }
    }

    /// Two requests' classes for one pod (a request deleted and made again): intercepted once is
    /// intercepted, refused once is refused.
    fn merge(self, other: PodClass) -> PodClass {
        use PodClass::*;
        match (self, other) {
            (Intercepted, _) | (_, Intercepted) => Intercepted,
            (Refused, _) | (_, Refused) => Refused,
            _ => Plain,
        }
    }
}

/// Issue 44's *intercepted* pod: its EvictionRequest had an interceptor besides
/// `imperative-eviction.k8s.io`.
pub fn is_intercepted(r: &EvictionRequest) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.target_interceptors
            .iter()
            .any(|i| i.name != IMPERATIVE_INTERCEPTOR)
    })
}

/// A count per [`PodClass`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PerClass {
    pub intercepted: usize,
    pub plain: usize,
    pub refused: usize,
}

impl PerClass {
    pub fn get(&self, class: PodClass) -> usize {
        match class {
            PodClass::Intercepted => self.intercepted,
            PodClass::Plain => self.plain,
            PodClass::Refused => self.refused,
        }
    }

    fn add(&mut self, class: PodClass, n: usize) {
        match class {
            PodClass::Intercepted => self.intercepted += n,
            PodClass::Plain => self.plain += n,
            PodClass::Refused => self.refused += n,
        }
    }

    pub fn total(&self) -> usize {
        self.intercepted + self.plain + self.refused
    }
}

/// The mode's EvictionRequests, as the attribution looks their pods up.
#[derive(Clone, Debug, Default)]
pub struct PodClasses {
    /// By pod UID (the request's name, and its `spec.target.pod.uid`).
    by_uid: BTreeMap<String, PodClass>,
    /// By (namespace, pod name): (when the request was created, its class), oldest first.
    by_name: BTreeMap<(String, String), Vec<(SystemTime, PodClass)>>,
    /// Pods per class (each pod once).
    pub pods: PerClass,
    /// EvictionRequests per class (a request deleted and made again for the same pod twice).
    pub requests: PerClass,
}

impl PodClasses {
    /// From the EvictionRequests as they were last seen.
    pub fn of(items: &[EvictionRequest]) -> PodClasses {
        let mut out = PodClasses::default();
        let mut pods: BTreeMap<&str, PodClass> = BTreeMap::new();
        for r in items {
            let class = PodClass::of(r);
            out.requests.add(class, 1);
            let pod = &r.spec.target.pod;
            pods.entry(&pod.uid)
                .and_modify(|c| *c = c.merge(class))
                .or_insert(class);
            let names = [r.metadata.name.as_deref(), Some(pod.uid.as_str())];
            for uid in names.into_iter().flatten().filter(|n| !n.is_empty()) {
                out.by_uid
                    .entry(uid.to_string())
                    .and_modify(|c| *c = c.merge(class))
                    .or_insert(class);
            }
            let created = r
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0));
            let ns = r.metadata.namespace.clone().unwrap_or_default();
            out.by_name
                .entry((ns, pod.name.clone()))
                .or_default()
                .push((created, class));
        }
        for created in out.by_name.values_mut() {
            created.sort_by_key(|(t, _)| *t);
        }
        for class in pods.into_values() {
            out.pods.add(class, 1);
        }
        out
    }

    fn by_uid(&self, uid: &str) -> Option<PodClass> {
        self.by_uid.get(uid).copied()
    }

    /// The pod named `name` in `ns` when a request for it was received `at`: the one whose
    /// EvictionRequest was created last before, else the first.
    fn by_name(&self, ns: &str, name: &str, at: SystemTime) -> Option<PodClass> {
        let pods = self.by_name.get(&(ns.to_string(), name.to_string()))?;
        pods.iter()
            .rev()
            .find(|(created, _)| *created <= at)
            .or(pods.first())
            .map(|(_, class)| *class)
    }
}

/// Where one of evictord's requests is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    Pod(PodClass),
    Shared,
    /// An EvictionRequest create whose audit event names no object.
    UnnamedCreate,
}

/// The workloads evictord wrote to (`deployments`, `horizontalpodautoscalers`, `replicasets`):
/// their surges are the intercepted pods'.
const WORKLOADS: [&str; 3] = ["deployments", "horizontalpodautoscalers", "replicasets"];

/// Where `request` (about `object`) is charged; `workloads`: the (namespace, name) of the
/// workloads evictord wrote to, which an event's name may name.
pub fn charge(
    request: &AuditedRequest,
    object: &ObjectRef,
    classes: &PodClasses,
    workloads: &BTreeSet<(String, String)>,
) -> Charge {
    let (ns, name) = (object.namespace.as_str(), object.name.as_str());
    let pod = |class: Option<PodClass>| class.map_or(Charge::Shared, Charge::Pod);
    match object.resource.as_str() {
        "evictionrequests" if name.is_empty() && request.verb == "create" => Charge::UnnamedCreate,
        "evictionrequests" if !name.is_empty() => pod(classes.by_uid(name)),
        "pods" if !name.is_empty() => pod(classes.by_name(ns, name, request.received)),
        // The interceptors' lists and watches of one namespace's pods are the readiness watches
        // of surged workloads (their caches of the drained nodes' pods are cluster-wide).
        "pods"
            if !ns.is_empty() && evictord_component(&request.user_agent) == Some("interceptor") =>
        {
            Charge::Pod(PodClass::Intercepted)
        }
        "events" if !name.is_empty() => {
            let Some((prefix, _suffix)) = name.rsplit_once('.') else {
                return Charge::Shared;
            };
            let workload = workloads
                .contains(&(ns.to_string(), prefix.to_string()))
                .then_some(PodClass::Intercepted);
            pod(classes
                .by_uid(prefix)
                .or_else(|| classes.by_name(ns, prefix, request.received))
                .or(workload))
        }
        r if WORKLOADS.contains(&r) && !name.is_empty() => Charge::Pod(PodClass::Intercepted),
        _ => Charge::Shared,
    }
}

/// evictord's requests in a window, charged to the pods they served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Attribution {
    /// evictord's requests in the window.
    pub requests: usize,
    /// Charged to the pods of each class (the unnamed creates included).
    pub charged: PerClass,
    /// Charged to no pod.
    pub shared: usize,
    /// EvictionRequest creates whose audit event named no object: charged one per
    /// EvictionRequest of each class, the rest shared.
    pub unnamed_creates: usize,
    /// The pods of each class (with an EvictionRequest).
    pub pods: PerClass,
}

impl Attribution {
    /// The shared requests that go with `class`'s pods: `shared × pods of the class ÷ all pods`.
    pub fn share(&self, class: PodClass) -> f64 {
        self.shared as f64 * self.pods.get(class) as f64 / self.pods.total().max(1) as f64
    }

    /// evictord's requests per pod of `class`: `(charged to the class + its share) ÷ its pods`
    /// (`None`: no pod of the class).
    pub fn per_pod(&self, class: PodClass) -> Option<f64> {
        let pods = self.pods.get(class);
        (pods > 0).then(|| (self.charged.get(class) as f64 + self.share(class)) / pods as f64)
    }

    /// The shared requests per pod with an EvictionRequest (`None`: no such pod).
    pub fn shared_per_pod(&self) -> Option<f64> {
        let pods = self.pods.total();
        (pods > 0).then(|| self.shared as f64 / pods as f64)
    }
}

/// evictord's requests (user agent client `evictord`) received from `from` to `to` (inclusive,
/// as [`crate::support::audit::count_by_client`]), charged by [`charge`].
pub fn attribute(
    requests: &[(AuditedRequest, ObjectRef)],
    from: SystemTime,
    to: SystemTime,
    classes: &PodClasses,
) -> Attribution {
    let evictord: Vec<&(AuditedRequest, ObjectRef)> = requests
        .iter()
        .filter(|(r, _)| client_of(&r.user_agent) == "evictord")
        .collect();
    // Every workload evictord wrote to in the log, not only in the window: names are stable.
    let workloads: BTreeSet<(String, String)> = evictord
        .iter()
        .filter(|(_, o)| WORKLOADS.contains(&o.resource.as_str()) && !o.name.is_empty())
        .map(|(_, o)| (o.namespace.clone(), o.name.clone()))
        .collect();
    let mut out = Attribution {
        pods: classes.pods,
        ..Default::default()
    };
    for (request, object) in evictord
        .iter()
        .filter(|(r, _)| r.received >= from && r.received <= to)
    {
        out.requests += 1;
        match charge(request, object, classes, &workloads) {
            Charge::Pod(class) => out.charged.add(class, 1),
            Charge::Shared => out.shared += 1,
            Charge::UnnamedCreate => out.unnamed_creates += 1,
        }
    }
    let mut left = out.unnamed_creates;
    for class in PodClass::ALL {
        let n = left.min(classes.requests.get(class));
        out.charged.add(class, n);
        left -= n;
    }
    out.shared += left;
    out
}
