//! The table tests of the pool benchmark's attribution of evictord's requests to the pods they
//! served (issue 44, `benches/system/pool_attribution.rs`): one row per rule, on audit-log lines
//! as kube-apiserver 1.20 writes them at the Metadata level. They run here because the
//! benchmark's own target runs without the test harness (`harness = false`).

mod support;

#[path = "../benches/system/pool_attribution.rs"]
mod pool_attribution;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use evictord::api::{EvictionRequest, IMPERATIVE_INTERCEPTOR as IMPERATIVE};
use pool_attribution::{Charge, PerClass, PodClass, PodClasses, attribute, charge};
use serde_json::json;
use support::audit::parse_requests;

/// An EvictionRequest for pod `name` (UID `uid`) in `ns`, created at `created` (seconds
/// after 2024-01-01T00:00:00Z), with `interceptors` and `refusals`.
fn request(
    ns: &str,
    name: &str,
    uid: &str,
    created: u32,
    interceptors: &[&str],
    refusals: i32,
) -> EvictionRequest {
    let targets: Vec<_> = interceptors.iter().map(|i| json!({"name": i})).collect();
    serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1",
        "kind": "EvictionRequest",
        "metadata": {
            "name": uid, "namespace": ns,
            "creationTimestamp": format!("2024-01-01T00:{:02}:{:02}Z", created / 60, created % 60),
        },
        "spec": {"target": {"pod": {"name": name, "uid": uid}},
                 "requesters": [{"name": "nodemaintenance.evictord.dev"}]},
        "status": {
            "targetInterceptors": targets,
            "podEvictionStatus": {"failedAPIEvictionCounter": refusals},
        },
    }))
    .unwrap()
}

/// The mode's requests: `web-1` intercepted (a Deployment's, surged), `bare` without
/// interceptors never refused, `db-0` a StatefulSet's pod refused once, moved and asked again
/// (a new UID, never refused).
fn classes() -> PodClasses {
    PodClasses::of(&[
        request(
            "ns",
            "web-1",
            "uid-web",
            0,
            &["deployment.evictord.dev", IMPERATIVE],
            0,
        ),
        request("ns", "bare", "uid-bare", 0, &[IMPERATIVE], 0),
        request("ns", "db-0", "uid-db-a", 0, &[IMPERATIVE], 1),
        request("ns", "db-0", "uid-db-b", 120, &[IMPERATIVE], 0),
    ])
}

/// One audit-log line as kube-apiserver 1.20 writes it at the Metadata level, received at
/// `at` seconds after 2024-01-01T00:00:00Z.
fn line(id: u32, user_agent: &str, verb: &str, object: serde_json::Value, at: u32) -> String {
    let time = format!("2024-01-01T00:{:02}:{:02}.000000Z", at / 60, at % 60);
    json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "auditID": format!("00000000-0000-0000-0000-{id:012}"),
        "stage": "ResponseComplete", "requestURI": "/", "verb": verb,
        "user": {"username": "system:serviceaccount:evictord:evictord"},
        "sourceIPs": ["127.0.0.1"], "userAgent": user_agent, "objectRef": object,
        "responseStatus": {"metadata": {}, "code": 200},
        "requestReceivedTimestamp": time, "stageTimestamp": time,
    })
    .to_string()
}

const CONTROLLER: &str = "evictord/0.1.0 (controller; evictord-0)";
const INTERCEPTOR: &str = "evictord/0.1.0 (interceptor; evictord-0)";

fn object(resource: &str, subresource: &str, ns: &str, name: &str) -> serde_json::Value {
    let mut o = json!({"resource": resource, "apiVersion": "v1"});
    for (key, value) in [
        ("subresource", subresource),
        ("namespace", ns),
        ("name", name),
    ] {
        if !value.is_empty() {
            o[key] = json!(value);
        }
    }
    o
}

fn at(s: u64) -> SystemTime {
    SystemTime::from(jiff::Timestamp::from_second(1_704_067_200).unwrap()) + Duration::from_secs(s)
}

/// One row per rule: (rule, user agent, verb, objectRef, received, where it is charged).
#[test]
fn each_rule_charges_its_pod_class() {
    use Charge::*;
    use PodClass::*;
    let rows: Vec<(&str, &str, &str, serde_json::Value, u32, Charge)> = vec![
        (
            "evictionrequests/status named by pod UID",
            CONTROLLER,
            "patch",
            object("evictionrequests", "status", "ns", "uid-web"),
            10,
            Pod(Intercepted),
        ),
        (
            "evictionrequests create named from its body",
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", "uid-bare"),
            10,
            Pod(Plain),
        ),
        (
            "evictionrequests delete",
            CONTROLLER,
            "delete",
            object("evictionrequests", "", "ns", "uid-db-a"),
            10,
            Pod(Refused),
        ),
        (
            "evictionrequests create naming no object",
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", ""),
            10,
            UnnamedCreate,
        ),
        (
            "evictionrequests of no known pod",
            CONTROLLER,
            "get",
            object("evictionrequests", "", "ns", "uid-other"),
            10,
            Shared,
        ),
        (
            "pods/eviction by pod name",
            CONTROLLER,
            "create",
            object("pods", "eviction", "ns", "bare"),
            10,
            Pod(Plain),
        ),
        (
            "pods/eviction of a reused name, before its second request",
            CONTROLLER,
            "create",
            object("pods", "eviction", "ns", "db-0"),
            60,
            Pod(Refused),
        ),
        (
            "pods get of a reused name, after its second request",
            INTERCEPTOR,
            "get",
            object("pods", "", "ns", "db-0"),
            130,
            Pod(Plain),
        ),
        (
            "pods of the same name in another namespace",
            CONTROLLER,
            "get",
            object("pods", "", "other", "bare"),
            10,
            Shared,
        ),
        (
            "an interceptor's list of one namespace's pods (a surge's readiness watch)",
            INTERCEPTOR,
            "list",
            object("pods", "", "ns", ""),
            10,
            Pod(Intercepted),
        ),
        (
            "an interceptor's watch of one namespace's pods",
            INTERCEPTOR,
            "watch",
            object("pods", "", "ns", ""),
            10,
            Pod(Intercepted),
        ),
        (
            "a cluster-wide pod watch (a node's pods)",
            INTERCEPTOR,
            "watch",
            object("pods", "", "", ""),
            10,
            Shared,
        ),
        (
            "the controller's list of one namespace's pods",
            CONTROLLER,
            "list",
            object("pods", "", "ns", ""),
            10,
            Shared,
        ),
        (
            "event about an EvictionRequest (pod UID)",
            CONTROLLER,
            "create",
            object("events", "", "ns", "uid-db-a.17a3f0c2d1e4b5a60001"),
            10,
            Pod(Refused),
        ),
        (
            "event about a pod (pod name)",
            CONTROLLER,
            "patch",
            object("events", "", "ns", "web-1.17a3f0c2d1e4b5a60002"),
            10,
            Pod(Intercepted),
        ),
        (
            "event about a Deployment evictord surged",
            INTERCEPTOR,
            "create",
            object("events", "", "ns", "web.17a3f0c2d1e4b5a60003"),
            10,
            Pod(Intercepted),
        ),
        (
            "event about a node",
            CONTROLLER,
            "create",
            object("events", "", "default", "node-3.17a3f0c2d1e4b5a60004"),
            10,
            Shared,
        ),
        (
            "deployments patch",
            INTERCEPTOR,
            "patch",
            object("deployments", "", "ns", "web"),
            10,
            Pod(Intercepted),
        ),
        (
            "deployments/scale",
            INTERCEPTOR,
            "update",
            object("deployments", "scale", "ns", "web"),
            10,
            Pod(Intercepted),
        ),
        (
            "horizontalpodautoscalers patch",
            INTERCEPTOR,
            "patch",
            object("horizontalpodautoscalers", "", "ns", "web"),
            10,
            Pod(Intercepted),
        ),
        (
            "replicasets get",
            INTERCEPTOR,
            "get",
            object("replicasets", "", "ns", "web-5d8c7"),
            10,
            Pod(Intercepted),
        ),
        (
            "deployments watch",
            INTERCEPTOR,
            "watch",
            object("deployments", "", "", ""),
            10,
            Shared,
        ),
        (
            "nodes patch",
            CONTROLLER,
            "patch",
            object("nodes", "", "", "node-3"),
            10,
            Shared,
        ),
        (
            "nodemaintenances/status",
            CONTROLLER,
            "patch",
            object("nodemaintenances", "status", "", "roll"),
            10,
            Shared,
        ),
        (
            "leases",
            CONTROLLER,
            "update",
            object("leases", "", "evictord", "evictord-controller"),
            10,
            Shared,
        ),
        (
            "subjectaccessreviews",
            "evictord/0.1.0 (webhook; evictord-0)",
            "create",
            object("subjectaccessreviews", "", "", ""),
            10,
            Shared,
        ),
    ];
    let text: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, (_, ua, verb, o, t, _))| line(i as u32, ua, verb, o.clone(), *t))
        .collect();
    let parsed = parse_requests(&text.join("\n"));
    assert_eq!(parsed.len(), rows.len());
    let classes = classes();
    let workloads = BTreeSet::from([("ns".to_string(), "web".to_string())]);
    for (i, (rule, _, _, _, _, want)) in rows.iter().enumerate() {
        // The audit IDs sort as the rows.
        let (request, object) = &parsed[i];
        assert_eq!(
            charge(request, object, &classes, &workloads),
            *want,
            "{rule}: {object:?}"
        );
    }
}

#[test]
fn classes_count_each_pod_once() {
    let c = classes();
    assert_eq!(
        c.pods,
        PerClass {
            intercepted: 1,
            plain: 2,
            refused: 1
        }
    );
    assert_eq!(c.requests.total(), 4);
}

/// Other clients are not evictord's; the window bounds the count; workloads are learned
/// from evictord's own writes; unnamed creates go one per EvictionRequest of each class,
/// the rest shared; the per-pod figures add the class's share of the shared requests.
#[test]
fn attribute_sums_the_window() {
    let lines = [
        line(
            1,
            "kubectl/v1.20.2",
            "get",
            object("pods", "", "ns", "bare"),
            10,
        ),
        line(2, CONTROLLER, "get", object("pods", "", "ns", "bare"), 500),
        line(
            3,
            INTERCEPTOR,
            "patch",
            object("deployments", "", "ns", "web"),
            10,
        ),
        line(
            4,
            INTERCEPTOR,
            "create",
            object("events", "", "ns", "web.1a"),
            10,
        ),
        line(
            5,
            CONTROLLER,
            "create",
            object("pods", "eviction", "ns", "bare"),
            10,
        ),
        line(
            6,
            CONTROLLER,
            "patch",
            object("nodes", "", "", "node-3"),
            10,
        ),
        line(
            7,
            CONTROLLER,
            "patch",
            object("nodes", "", "", "node-4"),
            10,
        ),
        line(8, CONTROLLER, "list", object("pods", "", "", ""), 10),
        line(
            9,
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", ""),
            10,
        ),
        line(
            10,
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", ""),
            10,
        ),
        line(
            11,
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", ""),
            10,
        ),
        line(
            12,
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", ""),
            10,
        ),
        line(
            13,
            CONTROLLER,
            "create",
            object("evictionrequests", "", "ns", ""),
            10,
        ),
    ];
    let parsed = parse_requests(&lines.join("\n"));
    let a = attribute(&parsed, at(0), at(300), &classes());
    assert_eq!(a.requests, 11);
    assert_eq!(a.unnamed_creates, 5);
    // Creates: one per EvictionRequest — intercepted 1, plain 2 (`bare`, `db-0`'s second),
    // refused 1 — and the fifth shared.
    assert_eq!(
        a.charged,
        PerClass {
            intercepted: 3,
            plain: 3,
            refused: 1
        }
    );
    assert_eq!(a.shared, 4);
    assert_eq!(
        a.charged.total() + a.shared,
        a.requests,
        "each request once"
    );
    // Intercepted: (3 + 4 × 1/4) ÷ 1; plain: (3 + 4 × 2/4) ÷ 2; refused: (1 + 4 × 1/4) ÷ 1.
    assert_eq!(a.per_pod(PodClass::Intercepted), Some(4.0));
    assert_eq!(a.per_pod(PodClass::Plain), Some(2.5));
    assert_eq!(a.per_pod(PodClass::Refused), Some(2.0));
    assert_eq!(a.shared_per_pod(), Some(1.0));
    let none = attribute(&parsed, at(0), at(300), &PodClasses::default());
    assert_eq!(none.per_pod(PodClass::Intercepted), None);
    assert_eq!(none.shared_per_pod(), None);
    // Without EvictionRequests only the workloads' requests find a class.
    assert_eq!(none.charged.total(), 2);
    assert_eq!(none.shared, 9);
}
