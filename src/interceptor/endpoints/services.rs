//! Which Services concern a pod and whether they still list it as a ready address, pure: read
//! from the namespace's Services, Endpoints and EndpointSlices (`discovery.k8s.io/v1` or
//! `v1beta1`, whose fields read here are the same) as the API returns them.
//!
//! A Service selects a pod when its non-empty `spec.selector` matches the pod's labels. The
//! interceptor waits for those (their endpoints controllers drop an unready pod from the ready
//! addresses), except:
//! - `publishNotReadyAddresses: true`: the pod stays a ready address whatever its readiness
//!   (named, never waited for);
//! - `type: ExternalName`: no endpoints at all (ignored);
//! - a Service without a selector lists whatever its owner writes; when its endpoints list the
//!   pod it is named, and not waited for.
//!
//! A pod is found in an address by its `targetRef` (kind Pod and UID, or name when the UID is
//! missing), else by one of its IPs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, ObjectReference, Service};
use serde_json::Value;

/// The label of an EndpointSlice naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What identifies the pod in an address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAddress {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.name`.
    pub name: String,
    /// `status.podIPs` (or `status.podIP`).
    pub ips: Vec<String>,
}

/// How a Service concerns the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concern {
    /// It selects the pod; `ready`: its Endpoints or an EndpointSlice still list the pod as a
    /// ready address.
    Waited {
        /// Still a ready address somewhere.
        ready: bool,
    },
    /// It selects the pod but publishes not-ready addresses (not waited for).
    PublishesNotReady,
    /// It has no selector, and its endpoints list the pod (not waited for).
    NoSelector,
}

/// One Service that concerns the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceView {
    /// The Service's name.
    pub name: String,
    /// How.
    pub concern: Concern,
}

fn refers_to(target: Option<&ObjectReference>, pod: &PodAddress) -> Option<bool> {
    let t = target?;
    if t.kind.as_deref().is_some_and(|k| k != "Pod") {
        return Some(false);
    }
    Some(match t.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid == pod.uid,
        _ => t.name.as_deref() == Some(pod.name.as_str()),
    })
}

/// True when `address` is the pod's: by its target reference, else by IP.
fn is_pod(address: &EndpointAddress, pod: &PodAddress) -> bool {
    refers_to(address.target_ref.as_ref(), pod).unwrap_or_else(|| pod.ips.contains(&address.ip))
}

/// Where the pod is in one Endpoints object: (a ready address, any address).
fn in_endpoints(e: &Endpoints, pod: &PodAddress) -> (bool, bool) {
    let subsets = e.subsets.as_deref().unwrap_or_default();
    let ready = subsets
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .any(|a| is_pod(a, pod));
    let not_ready = subsets
        .iter()
        .flat_map(|s| s.not_ready_addresses.iter().flatten())
        .any(|a| is_pod(a, pod));
    (ready, ready || not_ready)
}

/// Where the pod is in one EndpointSlice (JSON of either version): (ready, listed). An endpoint
/// whose `conditions.ready` is absent is ready (the API's rule for a nil value).
fn in_slice(slice: &Value, pod: &PodAddress) -> (bool, bool) {
    let mut found = (false, false);
    for e in slice["endpoints"].as_array().into_iter().flatten() {
        let target = serde_json::from_value::<ObjectReference>(e["targetRef"].clone()).ok();
        let mine = refers_to(target.as_ref(), pod).unwrap_or_else(|| {
            e["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a.as_str().is_some_and(|a| pod.ips.iter().any(|ip| ip == a)))
        });
        if mine {
            let ready = e["conditions"]["ready"].as_bool() != Some(false);
            found = (found.0 || ready, true);
        }
    }
    found
}

fn service_of(slice: &Value) -> Option<&str> {
    slice["metadata"]["labels"][SERVICE_NAME_LABEL].as_str()
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The Services of the pod's namespace that concern it (see the module docs), by name.
pub fn services_of(
    labels: &BTreeMap<String, String>,
    pod: &PodAddress,
    services: &[Service],
    endpoints: &[Endpoints],
    slices: &[Value],
) -> Vec<ServiceView> {
    let mut views: Vec<ServiceView> = services
        .iter()
        .filter_map(|s| {
            let name = s.metadata.name.clone()?;
            let spec = s.spec.clone().unwrap_or_default();
            if spec.type_.as_deref() == Some("ExternalName") {
                return None;
            }
            let eps = endpoints
                .iter()
                .filter(|e| e.metadata.name.as_deref() == Some(name.as_str()))
                .map(|e| in_endpoints(e, pod));
            let sls = slices
                .iter()
                .filter(|sl| service_of(sl) == Some(name.as_str()))
                .map(|sl| in_slice(sl, pod));
            let (ready, listed) = eps
                .chain(sls)
                .fold((false, false), |a, b| (a.0 || b.0, a.1 || b.1));
            let concern = match spec.selector {
                Some(selector) if !selector.is_empty() => {
                    if !selects(&selector, labels) {
                        return None;
                    }
                    if spec.publish_not_ready_addresses == Some(true) {
                        Concern::PublishesNotReady
                    } else {
                        Concern::Waited { ready }
                    }
                }
                _ if listed => Concern::NoSelector,
                _ => return None,
            };
            Some(ServiceView { name, concern })
        })
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    fn pod() -> PodAddress {
        PodAddress {
            uid: "u1".into(),
            name: "web-1".into(),
            ips: vec!["10.0.0.5".into()],
        }
    }

    fn labels() -> BTreeMap<String, String> {
        [("app".to_string(), "web".to_string())].into()
    }

    fn service(name: &str, spec: Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    }

    fn web(name: &str) -> Service {
        service(name, json!({"selector": {"app": "web"}}))
    }

    fn target(uid: &str) -> Value {
        json!({"kind": "Pod", "name": "web-1", "uid": uid})
    }

    fn endpoints(name: &str, ready: &[Value], not_ready: &[Value]) -> Endpoints {
        serde_json::from_value(json!({"metadata": {"name": name}, "subsets": [
            {"addresses": ready, "notReadyAddresses": not_ready, "ports": [{"port": 80}]}]}))
        .unwrap()
    }

    fn slice(service: &str, endpoints: Value) -> Value {
        json!({"metadata": {"name": format!("{service}-abc"), "labels": {SERVICE_NAME_LABEL: service}},
               "addressType": "IPv4", "endpoints": endpoints})
    }

    fn one(
        services: &[Service],
        endpoints: &[Endpoints],
        slices: &[Value],
    ) -> Vec<(String, Concern)> {
        services_of(&labels(), &pod(), services, endpoints, slices)
            .into_iter()
            .map(|v| (v.name, v.concern))
            .collect()
    }

    const IN: Concern = Concern::Waited { ready: true };
    const OUT: Concern = Concern::Waited { ready: false };

    /// One row per way a Service concerns (or does not concern) the pod, and per way an address
    /// names it.
    #[rstest]
    // A selecting Service whose Endpoints list the pod ready, by target UID.
    #[case::ready_in_endpoints(vec![web("s")], vec![endpoints("s", &[json!({"ip": "10.0.0.5", "targetRef": target("u1")})], &[])], vec![], vec![IN])]
    // Not ready there: out.
    #[case::not_ready_in_endpoints(vec![web("s")], vec![endpoints("s", &[], &[json!({"ip": "10.0.0.5", "targetRef": target("u1")})])], vec![], vec![OUT])]
    // Gone from both: out.
    #[case::absent(vec![web("s")], vec![endpoints("s", &[], &[])], vec![slice("s", json!([]))], vec![OUT])]
    // A same-named successor (another UID) at the pod's old IP is not the pod.
    #[case::other_uid(vec![web("s")], vec![endpoints("s", &[json!({"ip": "10.0.0.5", "targetRef": target("u2")})], &[])], vec![], vec![OUT])]
    // No target reference: the IP decides.
    #[case::by_ip(vec![web("s")], vec![endpoints("s", &[json!({"ip": "10.0.0.5"})], &[])], vec![], vec![IN])]
    // Out of the Endpoints but a slice still lists it ready (the two controllers lag apart).
    #[case::ready_in_a_slice(vec![web("s")], vec![endpoints("s", &[], &[])], vec![slice("s", json!([{"addresses": ["10.0.0.5"], "conditions": {"ready": true}, "targetRef": target("u1")}]))], vec![IN])]
    #[case::nil_ready_is_ready(vec![web("s")], vec![], vec![slice("s", json!([{"addresses": ["10.0.0.5"], "targetRef": target("u1")}]))], vec![IN])]
    #[case::not_ready_in_a_slice(vec![web("s")], vec![], vec![slice("s", json!([{"addresses": ["10.0.0.5"], "conditions": {"ready": false}, "targetRef": target("u1")}]))], vec![OUT])]
    // A slice of another Service does not count for this one.
    #[case::slice_of_another_service(vec![web("s")], vec![], vec![slice("t", json!([{"addresses": ["10.0.0.5"], "targetRef": target("u1")}]))], vec![OUT])]
    // Not selecting the pod: not concerned.
    #[case::other_selector(vec![service("db", json!({"selector": {"app": "db"}}))], vec![], vec![], vec![])]
    // publishNotReadyAddresses: named, not waited for.
    #[case::publishes_not_ready(vec![service("h", json!({"selector": {"app": "web"}, "publishNotReadyAddresses": true}))], vec![], vec![], vec![Concern::PublishesNotReady])]
    // No selector: named when its endpoints list the pod, not waited for.
    #[case::no_selector_listing(vec![service("m", json!({}))], vec![endpoints("m", &[json!({"ip": "10.0.0.5"})], &[])], vec![], vec![Concern::NoSelector])]
    #[case::no_selector_elsewhere(vec![service("m", json!({"selector": {}}))], vec![endpoints("m", &[json!({"ip": "10.9.9.9"})], &[])], vec![], vec![])]
    // ExternalName has no endpoints.
    #[case::external_name(vec![service("x", json!({"type": "ExternalName", "externalName": "a.example.com", "selector": {"app": "web"}}))], vec![], vec![], vec![])]
    fn concern_rows(
        #[case] services: Vec<Service>,
        #[case] endpoints: Vec<Endpoints>,
        #[case] slices: Vec<Value>,
        #[case] expected: Vec<Concern>,
    ) {
        let got: Vec<Concern> = one(&services, &endpoints, &slices)
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn services_come_sorted_by_name() {
        let got = one(&[web("b"), web("a")], &[], &[]);
        assert_eq!(
            got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
