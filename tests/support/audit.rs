//! kube-apiserver's audit log of Eviction API calls (opt-in:
//! [`super::control_plane::cluster_with_eviction_audit`]): every call with its pod, answer and
//! times. Unlike kube-apiserver's request counters it survives kube-apiserver restarts, and it
//! says which pod each call was for, so the fault tests can prove per pod that no pod was
//! evicted twice and that no call was made for a pod already evicted. And the audit log of every
//! request ([`super::control_plane::cluster_with_request_audit`]): each request once
//! ([`requests`]; with what it was about, its `objectRef`: [`requests_with_objects`]), and counted
//! by the client its user agent names ([`count_by_client`]), as the pool benchmark splits
//! kube-apiserver's load.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::SystemTime;

/// One `pods/eviction` create, as kube-apiserver answered it.
#[derive(Clone, Debug)]
pub struct EvictionCall {
    pub pod: String,
    /// Who made the call: the impersonated user if any, else the authenticated one.
    pub caller: String,
    /// HTTP status code of the answer.
    pub code: u16,
    pub received: SystemTime,
    pub answered: SystemTime,
}

impl EvictionCall {
    /// The call evicted its pod (201 for policy/v1beta1 and policy/v1).
    pub fn evicted(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The call found its pod already gone: 404, or 409 from the UID precondition.
    pub fn pod_gone(&self) -> bool {
        self.code == 404 || self.code == 409
    }

    /// The call was cut short or failed inside kube-apiserver (5xx, e.g. 500 "context canceled",
    /// 504): it may or may not have evicted its pod.
    pub fn cut(&self) -> bool {
        self.code >= 500
    }
}

/// The Eviction API calls for pods of `namespace` in the audit log at `path`, in the order
/// kube-apiserver received them.
pub fn eviction_calls(path: &Path, namespace: &str) -> Vec<EvictionCall> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the audit log {}: {e}", path.display()));
    let mut calls: Vec<EvictionCall> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| {
            matches!(event["stage"].as_str(), Some("ResponseComplete" | "Panic"))
                && event["verb"] == "create"
                && event["objectRef"]["resource"] == "pods"
                && event["objectRef"]["subresource"] == "eviction"
                && event["objectRef"]["namespace"] == namespace
        })
        .map(|event| EvictionCall {
            pod: event["objectRef"]["name"]
                .as_str()
                .expect("objectRef.name")
                .to_string(),
            caller: event["impersonatedUser"]["username"]
                .as_str()
                .or(event["user"]["username"].as_str())
                .unwrap_or_default()
                .to_string(),
            // A panicking handler leaves no status: count it as a server error.
            code: event["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500),
            received: timestamp(&event["requestReceivedTimestamp"]),
            answered: timestamp(&event["stageTimestamp"]),
        })
        .collect();
    calls.sort_by_key(|c| c.received);
    calls
}

fn timestamp(value: &serde_json::Value) -> SystemTime {
    let text = value.as_str().expect("audit timestamp");
    let ts: jiff::Timestamp = text
        .parse()
        .unwrap_or_else(|e| panic!("audit timestamp {text}: {e}"));
    SystemTime::from(ts)
}

/// The first call that evicted its pod among those received at or after `t`.
pub fn first_eviction_received_after(
    calls: &[EvictionCall],
    t: SystemTime,
) -> Option<&EvictionCall> {
    calls
        .iter()
        .filter(|c| c.evicted() && c.received >= t)
        .min_by_key(|c| c.answered)
}

/// The first call that evicted its pod among those answered at or after `t`.
pub fn first_eviction_answered_after(
    calls: &[EvictionCall],
    t: SystemTime,
) -> Option<&EvictionCall> {
    calls
        .iter()
        .filter(|c| c.evicted() && c.answered >= t)
        .min_by_key(|c| c.answered)
}

/// The Eviction API calls of a drain, pod by pod.
#[derive(Debug, Default)]
pub struct EvictionLedger {
    /// All calls.
    pub calls: usize,
    /// Calls by status code.
    pub by_code: BTreeMap<u16, usize>,
    /// Pods evicted by a call answered 2xx.
    pub evicted: usize,
    /// Pods evicted by a call answered 2xx more than once (impossible unless a pod was recreated).
    pub evicted_twice: Vec<String>,
    /// Calls received after an earlier call for the same pod had been answered 2xx: the caller
    /// had been told the pod was evicted and evicted it again (`pod: code`).
    pub after_evicted: Vec<String>,
    /// Calls answered 404/409 (pod gone) that no earlier cut call (5xx) for the same pod explains.
    pub gone_unexplained: Vec<String>,
    /// Calls answered 404/409 after a cut call for the same pod (which had evicted it after all).
    pub gone_after_cut: usize,
    /// Pods whose only eviction was by calls cut short (no 2xx; the pod went away anyway).
    pub evicted_by_cut_call: usize,
    /// Pods of the drain that no call named.
    pub never_called: Vec<String>,
    /// Calls for pods that are not part of the drain.
    pub strangers: Vec<String>,
}

impl EvictionLedger {
    /// Sorts `calls` (as [`eviction_calls`] returns them) by pod against the drain's `pods`.
    pub fn of(calls: &[EvictionCall], pods: &BTreeSet<String>) -> EvictionLedger {
        let mut ledger = EvictionLedger {
            calls: calls.len(),
            ..Default::default()
        };
        let mut by_pod: BTreeMap<&str, Vec<&EvictionCall>> = BTreeMap::new();
        for call in calls {
            *ledger.by_code.entry(call.code).or_default() += 1;
            if pods.contains(&call.pod) {
                by_pod.entry(&call.pod).or_default().push(call);
            } else {
                ledger
                    .strangers
                    .push(format!("{}: {}", call.pod, call.code));
            }
        }
        for pod in pods {
            let Some(calls) = by_pod.get(pod.as_str()) else {
                ledger.never_called.push(pod.clone());
                continue;
            };
            let successes = calls.iter().filter(|c| c.evicted()).count();
            match successes {
                0 => ledger.evicted_by_cut_call += 1,
                1 => ledger.evicted += 1,
                _ => {
                    ledger.evicted += 1;
                    ledger.evicted_twice.push(pod.clone());
                }
            }
            for (i, call) in calls.iter().enumerate() {
                let earlier = &calls[..i];
                if earlier
                    .iter()
                    .any(|e| e.evicted() && e.answered <= call.received)
                {
                    ledger
                        .after_evicted
                        .push(format!("{pod}: {} after a 2xx", call.code));
                } else if call.pod_gone() {
                    if earlier.iter().any(|e| e.cut()) {
                        ledger.gone_after_cut += 1;
                    } else {
                        ledger
                            .gone_unexplained
                            .push(format!("{pod}: {}", call.code));
                    }
                }
            }
        }
        ledger
    }

    /// Calls answered 5xx.
    pub fn cut_calls(&self) -> usize {
        self.by_code
            .iter()
            .filter(|(code, _)| **code >= 500)
            .map(|(_, n)| n)
            .sum()
    }

    /// Calls refused with 429: with no PodDisruptionBudget and no interceptor in the drain, that
    /// is kube-apiserver shedding load (`Too many requests`); the call did nothing.
    pub fn refused_calls(&self) -> usize {
        self.by_code.get(&429).copied().unwrap_or(0)
    }

    /// Asserts what must hold after any fault: every pod of the drain was named by a call, none
    /// was evicted twice, no call was made for a pod after a call for it had been answered 2xx,
    /// no 404/409 without a cut call before it, and no answer other than 2xx, 404/409, 429
    /// (kube-apiserver overloaded) and 5xx.
    pub fn assert_each_pod_evicted_once(&self) {
        assert!(
            self.never_called.is_empty(),
            "pods never evicted: {:?}",
            self.never_called
        );
        assert!(
            self.evicted_twice.is_empty(),
            "pods evicted twice: {:?}",
            self.evicted_twice
        );
        assert!(
            self.after_evicted.is_empty(),
            "Eviction API calls for pods already evicted: {:?}",
            self.after_evicted
        );
        assert!(
            self.gone_unexplained.is_empty(),
            "Eviction API calls for pods already gone: {:?}",
            self.gone_unexplained
        );
        let other: Vec<_> = self
            .by_code
            .iter()
            .filter(|(code, _)| {
                !(200..300).contains(*code) && ![404, 409, 429].contains(*code) && **code < 500
            })
            .collect();
        assert!(other.is_empty(), "Eviction API calls answered {other:?}");
        assert!(
            self.strangers.is_empty(),
            "calls for other pods: {:?}",
            self.strangers
        );
    }
}

/// One request in the audit log of every request
/// ([`super::control_plane::cluster_with_request_audit`]).
#[derive(Clone, Debug)]
pub struct AuditedRequest {
    /// Who made the request: the impersonated user if any, else the authenticated one.
    pub user: String,
    /// The `User-Agent` the client sent (empty when none).
    pub user_agent: String,
    /// kube-apiserver's verb (`get`, `list`, `watch`, `create`...).
    pub verb: String,
    /// The resource as `evictord_kube_api_requests_total` names it: the plural with its
    /// subresource (`pods/eviction`), or for a request outside the resource paths the first
    /// segment of its path (`/version`, `/apis`).
    pub resource: String,
    /// HTTP status code of the answer (0 when the log has none).
    pub code: u16,
    /// When kube-apiserver received it.
    pub received: SystemTime,
    /// The request's URI: its path and query (a list's label selector, a watch's parameters).
    pub uri: String,
}

/// What an audited request was about: its event's `objectRef` (each field empty when the log
/// has none). kube-apiserver completes it from the request's body at the Metadata level too, so
/// a create names the object it created (unless the body had only `generateName`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// The plural (`pods`, `evictionrequests`), empty outside the resource paths.
    pub resource: String,
    /// `eviction`, `status`, `scale`...
    pub subresource: String,
    /// Empty for a cluster-scoped object and for a list or watch of every namespace.
    pub namespace: String,
    /// Empty for a list, a watch, a create whose body had no name.
    pub name: String,
    /// `evictord.dev`, `apps`; empty for the core group.
    pub api_group: String,
}

/// The requests in the audit log at `path`, each once (at its last stage: a watch is logged
/// when its answer starts and again when it ends).
pub fn requests(path: &Path) -> Vec<AuditedRequest> {
    requests_with_objects(path)
        .into_iter()
        .map(|(request, _)| request)
        .collect()
}

/// [`requests`], each with what it was about.
pub fn requests_with_objects(path: &Path) -> Vec<(AuditedRequest, ObjectRef)> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the audit log {}: {e}", path.display()));
    parse_requests(&text)
}

/// The requests in an audit log's text (JSON lines), as [`requests_with_objects`] reads them.
pub fn parse_requests(text: &str) -> Vec<(AuditedRequest, ObjectRef)> {
    let mut by_id: BTreeMap<String, (AuditedRequest, ObjectRef)> = BTreeMap::new();
    for event in text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
    {
        let Some(id) = event["auditID"].as_str() else {
            continue;
        };
        let object = &event["objectRef"];
        let resource = match (object["resource"].as_str(), object["subresource"].as_str()) {
            (Some(r), Some(s)) if !r.is_empty() && !s.is_empty() => format!("{r}/{s}"),
            (Some(r), _) if !r.is_empty() => r.to_string(),
            _ => {
                let uri = event["requestURI"].as_str().unwrap_or_default();
                let path = uri.split('?').next().unwrap_or_default();
                format!(
                    "/{}",
                    path.trim_matches('/').split('/').next().unwrap_or_default()
                )
            }
        };
        let code = match event["stage"].as_str() {
            Some("Panic") => 500,
            _ => event["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        };
        let field = |name: &str| object[name].as_str().unwrap_or_default().to_string();
        let mut object_ref = ObjectRef {
            resource: field("resource"),
            subresource: field("subresource"),
            namespace: field("namespace"),
            name: field("name"),
            api_group: field("apiGroup"),
        };
        let request = AuditedRequest {
            user: event["impersonatedUser"]["username"]
                .as_str()
                .or(event["user"]["username"].as_str())
                .unwrap_or_default()
                .to_string(),
            user_agent: event["userAgent"].as_str().unwrap_or_default().to_string(),
            verb: event["verb"].as_str().unwrap_or_default().to_string(),
            resource,
            code,
            received: timestamp(&event["requestReceivedTimestamp"]),
            uri: event["requestURI"].as_str().unwrap_or_default().to_string(),
        };
        // An earlier stage's name stays when a later one has none.
        if let Some((_, earlier)) = by_id.get(id)
            && object_ref.name.is_empty()
        {
            object_ref.name = earlier.name.clone();
        }
        by_id.insert(id.to_string(), (request, object_ref));
    }
    by_id.into_values().collect()
}

/// Who sent a request, by its user agent (every client of the test control plane and of the
/// pool benchmark names itself): `evictord` (any component; [`evictord_component`] tells which),
/// `kube-controller-manager`, `kubectl`, the pool's `pool-kubelet` and `pool-scheduler`
/// ([`super::pool::played`]), `kube-apiserver` (its own loopback requests), `test-harness` (the
/// tests' and the benchmark's own clients, [`super::control_plane::HARNESS_USER_AGENT`]), else
/// `other`.
pub fn client_of(user_agent: &str) -> &'static str {
    const PREFIXES: [(&str, &str); 7] = [
        ("evictord/", "evictord"),
        ("kube-controller-manager/", "kube-controller-manager"),
        ("kubectl/", "kubectl"),
        ("pool-kubelet", "pool-kubelet"),
        ("pool-scheduler", "pool-scheduler"),
        ("kube-apiserver/", "kube-apiserver"),
        ("test-harness", "test-harness"),
    ];
    PREFIXES
        .iter()
        .find(|(prefix, _)| user_agent.starts_with(prefix))
        .map_or("other", |(_, client)| client)
}

/// The component an evictord user agent names (`evictord/<version> (<component>; <identity>)`
/// or `evictord/<version> (<component>)`), `None` for any other client.
pub fn evictord_component(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("evictord/")?;
    let inside = rest.split_once('(')?.1;
    let component = inside.split([';', ')']).next()?.trim();
    (!component.is_empty()).then_some(component)
}

/// The controller a kube-controller-manager user agent names
/// (`kube-controller-manager/<version> (<os>/<arch>) kubernetes/<commit>/<controller>`: each of
/// its controllers has a client of its own), `None` for any other client or without one.
pub fn controller_manager_controller(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("kube-controller-manager/")?;
    let after_commit = rest.split_once(") kubernetes/")?.1.split_once('/')?.1;
    let controller = after_commit.trim();
    (!controller.is_empty()).then_some(controller)
}

/// Asserts that evictord's Eviction API bridge (its `webhook` component) wrote none of
/// `namespace`'s EvictionRequests since `from` (`how` names the drain in the failure). Call it
/// on a drain where nothing but evictord calls the Eviction API: the bridge lets evictord's own
/// calls through (rule B5) and hands only other clients' calls to their requests. (A webhook
/// cache a few milliseconds behind the controller's activation of the imperative interceptor
/// once handed a quarter of the pool benchmark's own calls back, each answered 429 and retried.)
pub fn assert_own_evictions_not_bridged(
    requests: &[AuditedRequest],
    namespace: &str,
    from: SystemTime,
    how: &str,
) {
    let path = format!("/apis/evictord.dev/v1alpha1/namespaces/{namespace}/evictionrequests");
    let writes: Vec<String> = requests
        .iter()
        .filter(|r| {
            r.received >= from
                && evictord_component(&r.user_agent) == Some("webhook")
                && matches!(r.verb.as_str(), "create" | "patch" | "update" | "delete")
                && r.uri.starts_with(&path)
        })
        .map(|r| format!("{} {} {}", r.verb, r.uri, r.code))
        .collect();
    assert!(
        writes.is_empty(),
        "{how}: the Eviction API bridge handed evictord's own calls back to their requests: {writes:#?}"
    );
}

/// The webhook's live reads of `namespace`'s pods named in `names` since `from` that were
/// answered 404: reads of pods already gone. Its pod cache answers a name it saw deleted, when the
/// name was generated, without asking again (`kubectl drain`'s last retry after evictord evicted
/// the pod once cost one such read per pod).
pub fn webhook_reads_of_gone_pods(
    requests: &[AuditedRequest],
    namespace: &str,
    from: SystemTime,
    names: &BTreeSet<String>,
) -> Vec<String> {
    let path = format!("/api/v1/namespaces/{namespace}/pods/");
    requests
        .iter()
        .filter(|r| {
            r.received >= from
                && evictord_component(&r.user_agent) == Some("webhook")
                && r.verb == "get"
                && r.code == 404
                && r.uri
                    .strip_prefix(&path)
                    .is_some_and(|name| names.contains(name.split('?').next().unwrap_or(name)))
        })
        .map(|r| format!("{} {} {}", r.verb, r.uri, r.code))
        .collect()
}

/// The controller's status writes of `namespace`'s EvictionRequests since `from` made after
/// their pod was gone, for the pods the controller evicted itself (gone: its last eviction or
/// deletion answered 2xx, by any client), and how many pods it evicted; `uids` names each pod's
/// UID, the name of its request. A request evictord created is owned by its pod and
/// deleted with it by the garbage collector: the controller leaves it to the collector for a few
/// seconds instead of marking it `Evicted` (a write that raced the deletion, answered 404 on a
/// fifth of a pool's requests).
pub fn status_writes_after_pod_gone(
    requests: &[AuditedRequest],
    namespace: &str,
    from: SystemTime,
    uids: &BTreeMap<String, String>,
) -> (Vec<String>, usize) {
    let pods = format!("/api/v1/namespaces/{namespace}/pods/");
    let mut gone: BTreeMap<&str, SystemTime> = BTreeMap::new();
    let mut evicted: BTreeSet<&str> = BTreeSet::new();
    for r in requests.iter().filter(|r| {
        r.received >= from
            && (200..300).contains(&r.code)
            && matches!(
                (r.verb.as_str(), r.resource.as_str()),
                ("create", "pods/eviction") | ("delete", "pods")
            )
    }) {
        let Some(rest) = r.uri.strip_prefix(&pods) else {
            continue;
        };
        let name = rest.split(['/', '?']).next().unwrap_or(rest);
        if let Some(uid) = uids.get(name) {
            let at = gone.entry(uid.as_str()).or_insert(r.received);
            *at = (*at).max(r.received);
            if r.verb == "create" && evictord_component(&r.user_agent) == Some("controller") {
                evicted.insert(uid.as_str());
            }
        }
    }
    gone.retain(|uid, _| evicted.contains(uid));
    let path = format!("/apis/evictord.dev/v1alpha1/namespaces/{namespace}/evictionrequests/");
    let writes = requests
        .iter()
        .filter(|r| {
            evictord_component(&r.user_agent) == Some("controller")
                && r.verb == "patch"
                && r.resource == "evictionrequests/status"
        })
        .filter(|r| {
            r.uri
                .strip_prefix(&path)
                .and_then(|rest| rest.split('/').next())
                .and_then(|uid| gone.get(uid))
                .is_some_and(|at| r.received > *at)
        })
        .map(|r| format!("{} {} {}", r.verb, r.uri, r.code))
        .collect();
    (writes, evicted.len())
}

/// Requests counted by client, evictord's by component and kube-controller-manager's by
/// controller.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ClientCounts {
    /// Every request counted.
    pub total: usize,
    /// By [`client_of`].
    pub by_client: BTreeMap<String, usize>,
    /// evictord's requests by [`evictord_component`].
    pub evictord_by_component: BTreeMap<String, usize>,
    /// evictord's requests by component, verb, resource and answer (`controller patch
    /// evictionrequests/status 200`): where its bill goes.
    pub evictord_by_request: BTreeMap<String, usize>,
    /// kube-controller-manager's requests by [`controller_manager_controller`] (`-` for its
    /// requests that name none).
    pub controller_manager_by_controller: BTreeMap<String, usize>,
    /// kube-controller-manager's requests by controller, verb, resource and answer
    /// (`replicaset-controller create pods 201`).
    pub controller_manager_by_request: BTreeMap<String, usize>,
    /// The user agents counted as `other`, with their requests (what to name next).
    pub other_user_agents: BTreeMap<String, usize>,
}

impl ClientCounts {
    /// The requests of `client` (one of [`client_of`]'s names).
    pub fn of(&self, client: &str) -> usize {
        self.by_client.get(client).copied().unwrap_or(0)
    }
}

/// The requests kube-apiserver received from `from` to `to` (inclusive), by client. A watch
/// counts once, when received; kube-apiserver 1.20 logs it only when it ends, so read the log
/// once the window's watches have ended (or they are missing).
pub fn count_by_client(
    requests: &[AuditedRequest],
    from: SystemTime,
    to: SystemTime,
) -> ClientCounts {
    let mut counts = ClientCounts::default();
    for r in requests
        .iter()
        .filter(|r| r.received >= from && r.received <= to)
    {
        counts.total += 1;
        let client = client_of(&r.user_agent);
        *counts.by_client.entry(client.to_string()).or_default() += 1;
        if let Some(component) = evictord_component(&r.user_agent) {
            *counts
                .evictord_by_component
                .entry(component.to_string())
                .or_default() += 1;
            *counts
                .evictord_by_request
                .entry(format!("{component} {} {} {}", r.verb, r.resource, r.code))
                .or_default() += 1;
        }
        if client == "kube-controller-manager" {
            let controller = controller_manager_controller(&r.user_agent).unwrap_or("-");
            *counts
                .controller_manager_by_controller
                .entry(controller.to_string())
                .or_default() += 1;
            *counts
                .controller_manager_by_request
                .entry(format!("{controller} {} {} {}", r.verb, r.resource, r.code))
                .or_default() += 1;
        }
        if client == "other" {
            *counts
                .other_user_agents
                .entry(r.user_agent.clone())
                .or_default() += 1;
        }
    }
    counts
}
