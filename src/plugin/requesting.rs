//! `evict` and `cancel`: the EvictionRequest the plugin creates, and the requester lists it
//! writes when joining or withdrawing.

use std::collections::BTreeMap;

use crate::api::{
    EvictionRequest, EvictionRequestSpec, EvictionTarget, PodReference, Requester,
    pod_owner_reference,
};

/// A new request for the pod, named after its UID, with one requester. Owned by the pod (as the
/// controller's own requests are), so it goes with the pod. It carries the pod's `labels` from
/// its creation (SPEC 2.3 step 4), so that the controller has none to patch onto it.
pub fn new_request(
    pod: &str,
    uid: &str,
    labels: &BTreeMap<String, String>,
    requester: &str,
) -> EvictionRequest {
    let mut r = EvictionRequest::new(
        uid,
        EvictionRequestSpec {
            target: EvictionTarget {
                pod: PodReference {
                    name: pod.to_string(),
                    uid: uid.to_string(),
                },
            },
            requesters: vec![Requester {
                name: requester.to_string(),
            }],
            heartbeat_deadline_seconds: None,
        },
    );
    r.metadata.owner_references = Some(vec![pod_owner_reference(pod, uid)]);
    r.metadata.labels = (!labels.is_empty()).then(|| labels.clone());
    r
}

/// The requesters with `name` added; `None` when it is already there.
pub fn joined(requesters: &[Requester], name: &str) -> Option<Vec<Requester>> {
    if requesters.iter().any(|q| q.name == name) {
        return None;
    }
    let mut out = requesters.to_vec();
    out.push(Requester {
        name: name.to_string(),
    });
    Some(out)
}

/// The requesters without `name`; `None` when it is not there.
pub fn withdrawn(requesters: &[Requester], name: &str) -> Option<Vec<Requester>> {
    if !requesters.iter().any(|q| q.name == name) {
        return None;
    }
    Some(
        requesters
            .iter()
            .filter(|q| q.name != name)
            .cloned()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn names(list: &[&str]) -> Vec<Requester> {
        list.iter()
            .map(|n| Requester {
                name: n.to_string(),
            })
            .collect()
    }

    #[rstest]
    #[case::join_new(&["a.example.com"], Some(vec!["a.example.com", "me.example.com"]))]
    #[case::already_there(&["me.example.com"], None)]
    fn joining(#[case] before: &[&str], #[case] after: Option<Vec<&str>>) {
        assert_eq!(
            joined(&names(before), "me.example.com"),
            after.map(|a| names(&a))
        );
    }

    #[rstest]
    #[case::withdraw(&["a.example.com", "me.example.com"], Some(vec!["a.example.com"]))]
    #[case::last_one(&["me.example.com"], Some(vec![]))]
    #[case::not_there(&["a.example.com"], None)]
    fn withdrawing(#[case] before: &[&str], #[case] after: Option<Vec<&str>>) {
        assert_eq!(
            withdrawn(&names(before), "me.example.com"),
            after.map(|a| names(&a))
        );
    }

    #[test]
    fn new_requests_are_named_after_the_pod_uid_and_owned_by_it() {
        let r = new_request("web-1", "u-1", &BTreeMap::new(), "me.example.com");
        assert_eq!(r.metadata.name.as_deref(), Some("u-1"));
        assert_eq!(r.spec.target.pod.name, "web-1");
        assert_eq!(r.metadata.owner_references.unwrap()[0].uid, "u-1");
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[rstest]
    #[case::no_labels(&[], None)]
    #[case::one(&[("app", "web")], Some(vec![("app", "web")]))]
    #[case::two(&[("app", "web"), ("tier", "front")], Some(vec![("app", "web"), ("tier", "front")]))]
    fn new_requests_carry_the_pod_labels_so_the_controller_patches_none(
        #[case] labels: &[(&str, &str)],
        #[case] want: Option<Vec<(&str, &str)>>,
    ) {
        let labels = map(labels);
        let r = new_request("web-1", "u-1", &labels, "me.example.com");
        assert_eq!(r.metadata.labels, want.map(|w| map(&w)));
        let mut pod = crate::cluster::CachedPod::default();
        pod.metadata.name = Some("web-1".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u-1".into());
        pod.metadata.labels = Some(labels);
        pod.status.phase = Some("Running".into());
        let decision = crate::controller::eviction_request::decide(
            &r,
            Some(&pod),
            jiff::Timestamp::UNIX_EPOCH,
            &Default::default(),
        );
        assert_eq!(decision.labels, None, "labels patched after creation");
    }
}
