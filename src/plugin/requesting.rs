//! `evict` and `cancel`: the EvictionRequest the plugin creates, and the requester lists it
//! writes when joining or withdrawing.

use crate::api::{
    EvictionRequest, EvictionRequestSpec, EvictionTarget, PodReference, Requester,
    pod_owner_reference,
};

/// A new request for the pod, named after its UID, with one requester. Owned by the pod (as the
/// controller's own requests are), so it goes with the pod.
pub fn new_request(pod: &str, uid: &str, requester: &str) -> EvictionRequest {
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
        let r = new_request("web-1", "u-1", "me.example.com");
        assert_eq!(r.metadata.name.as_deref(), Some("u-1"));
        assert_eq!(r.spec.target.pod.name, "web-1");
        assert_eq!(r.metadata.owner_references.unwrap()[0].uid, "u-1");
    }
}
