//! Which `autoscaling` version to read and patch HorizontalPodAutoscalers in, from the server's
//! discovery document of the group (`GET /apis/autoscaling`, or its entry in `GET /apis`), as
//! kubectl decides where a resource is served: `autoscaling/v2` where served (Kubernetes 1.23 and
//! later), else `v2beta2` (1.12–1.25), else `v1` (every release). The fields the interceptor
//! touches (`spec.minReplicas`, `spec.maxReplicas`, `spec.scaleTargetRef`, annotations) are the
//! same in all of them; the newest is chosen so that a round trip through an older version (which
//! keeps v2-only fields such as `spec.behavior` in annotations) is never needed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, APIGroupList};
use kube::api::ApiResource;

/// The API group of HorizontalPodAutoscalers.
pub const GROUP: &str = "autoscaling";

/// The versions the interceptor can work with, most wanted first.
const WANTED: &[&str] = &["v2", "v2beta2", "v1"];

/// The version of `autoscaling` to use, from the group's discovery document; `None` when the
/// server serves none of `v2`, `v2beta2`, `v1` (no HorizontalPodAutoscalers to work with).
pub fn autoscaling_version(group: &APIGroup) -> Option<&'static str> {
    WANTED
        .iter()
        .copied()
        .find(|wanted| group.versions.iter().any(|v| v.version == *wanted))
}

/// [`autoscaling_version`] from the list of every group (`GET /apis`); `None` when the server
/// has no `autoscaling` group.
pub fn autoscaling_version_in(groups: &APIGroupList) -> Option<&'static str> {
    groups
        .groups
        .iter()
        .find(|g| g.name == GROUP)
        .and_then(autoscaling_version)
}

/// The HorizontalPodAutoscaler resource in `version` of `autoscaling`.
pub fn autoscaler_resource(version: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: "HorizontalPodAutoscaler".into(),
        plural: "horizontalpodautoscalers".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> APIGroup {
        serde_json::from_str(text).unwrap()
    }

    /// Recorded and written discovery documents (`tests/data/discovery/README.md`).
    #[test]
    fn version_from_the_group_document_of_each_release() {
        for (server, text, expected) in [
            (
                "1.11: v1, v2beta1",
                include_str!("../../../tests/data/discovery/apis-autoscaling-1.11.json"),
                Some("v1"),
            ),
            (
                "1.20.2 (recorded): v1, v2beta1, v2beta2",
                include_str!("../../../tests/data/discovery/apis-autoscaling-1.20.2.json"),
                Some("v2beta2"),
            ),
            (
                "1.23: v2 added",
                include_str!("../../../tests/data/discovery/apis-autoscaling-1.23.json"),
                Some("v2"),
            ),
            (
                "1.25: v2beta1 gone",
                include_str!("../../../tests/data/discovery/apis-autoscaling-1.25.json"),
                Some("v2"),
            ),
            (
                "1.34: v2, v1",
                include_str!("../../../tests/data/discovery/apis-autoscaling-1.34.json"),
                Some("v2"),
            ),
            (
                "only an unknown version",
                r#"{"kind":"APIGroup","name":"autoscaling","versions":[{"groupVersion":"autoscaling/v3alpha1","version":"v3alpha1"}]}"#,
                None,
            ),
        ] {
            assert_eq!(autoscaling_version(&doc(text)), expected, "{server}");
        }
    }

    #[test]
    fn version_from_the_list_of_groups() {
        let list = |groups: &str| -> APIGroupList {
            serde_json::from_str(&format!(r#"{{"kind":"APIGroupList","groups":[{groups}]}}"#))
                .unwrap()
        };
        let apps = r#"{"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}]}"#;
        let autoscaling = include_str!("../../../tests/data/discovery/apis-autoscaling-1.34.json");
        assert_eq!(
            autoscaling_version_in(&list(&format!("{apps},{autoscaling}"))),
            Some("v2")
        );
        assert_eq!(autoscaling_version_in(&list(apps)), None, "no group");
        assert_eq!(autoscaler_resource("v2").api_version, "autoscaling/v2");
    }
}
