//! Which versions the `endpoints.evictord.dev` interceptor reads in, from the server's list of
//! API groups (`GET /apis`), as kubectl decides where a resource is served: EndpointSlices in
//! `discovery.k8s.io/v1` where served (Kubernetes 1.21 and later), else `v1beta1` (1.17–1.24),
//! else none (only the Endpoints are read); PodDisruptionBudgets as
//! [`crate::disruption::budget_version_in`] decides. The EndpointSlice fields read
//! (`endpoints[].addresses`, `conditions.ready`, `targetRef`, the `kubernetes.io/service-name`
//! label) are the same in both versions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use kube::api::ApiResource;

/// The API group of EndpointSlices.
pub const GROUP: &str = "discovery.k8s.io";

/// The EndpointSlice version to read, from the list of every group; `None` when the server
/// serves neither `v1` nor `v1beta1`.
pub fn slice_version_in(groups: &APIGroupList) -> Option<&'static str> {
    let group = groups.groups.iter().find(|g| g.name == GROUP)?;
    ["v1", "v1beta1"]
        .into_iter()
        .find(|wanted| group.versions.iter().any(|v| v.version == *wanted))
}

/// The EndpointSlice resource in `version` of `discovery.k8s.io`.
pub fn slice_resource(version: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: "EndpointSlice".into(),
        plural: "endpointslices".into(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;

    use super::*;

    fn list(text: &str) -> APIGroupList {
        let group: APIGroup = serde_json::from_str(text).unwrap();
        APIGroupList {
            groups: vec![group],
        }
    }

    /// Recorded and written discovery documents (`tests/data/discovery/README.md`).
    #[test]
    fn version_from_discovery_of_each_release() {
        for (server, text, expected) in [
            (
                "1.20.2 (recorded): v1beta1",
                include_str!("../../../tests/data/discovery/apis-discovery-1.20.2.json"),
                Some("v1beta1"),
            ),
            (
                "1.21: v1 added",
                include_str!("../../../tests/data/discovery/apis-discovery-1.21.json"),
                Some("v1"),
            ),
            (
                "1.25: v1beta1 gone",
                include_str!("../../../tests/data/discovery/apis-discovery-1.25.json"),
                Some("v1"),
            ),
        ] {
            assert_eq!(slice_version_in(&list(text)), expected, "{server}");
        }
        assert_eq!(slice_version_in(&APIGroupList { groups: vec![] }), None);
        assert_eq!(
            slice_resource("v1beta1").api_version,
            "discovery.k8s.io/v1beta1"
        );
    }
}
