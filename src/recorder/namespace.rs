//! Where the events of cluster-scoped objects go (a NodeMaintenance, a node: events are
//! namespaced): `default`, or `kube-system` for kube-apiserver before v1.22, which refuses the
//! others with "does not match event.namespace" (kubernetes/kubernetes PR 100125). Decided from
//! the server's version when the process connects ([`learn_server_version`]); a process that has
//! not read it learns from the first refusal.

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::version::Info;

/// The namespace of events about cluster-scoped objects, and the one kube-apiserver before
/// v1.22 requires instead.
pub const CLUSTER_SCOPED_NAMESPACE: &str = "default";
/// See [`CLUSTER_SCOPED_NAMESPACE`].
pub const OLD_CLUSTER_SCOPED_NAMESPACE: &str = "kube-system";

/// The namespace a kube-apiserver of this version takes the events of cluster-scoped objects in
/// (`None`: a version this cannot read). Read from `major` and `minor` (`"22+"` on some
/// distributions), else from `gitVersion` (`v1.20.2`: a server built without them).
pub fn cluster_scoped_namespace(version: &Info) -> Option<&'static str> {
    let leading = |s: &str| -> Option<u32> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let from_fields = leading(&version.major).zip(leading(&version.minor));
    let from_git = || {
        let mut parts = version.git_version.strip_prefix('v')?.split('.');
        leading(parts.next()?).zip(leading(parts.next()?))
    };
    let (major, minor) = from_fields.or_else(from_git)?;
    Some(if (major, minor) < (1, 22) {
        OLD_CLUSTER_SCOPED_NAMESPACE
    } else {
        CLUSTER_SCOPED_NAMESPACE
    })
}

/// Whether kube-apiserver wants the events of cluster-scoped objects in `kube-system`. One
/// kube-apiserver per process: every recorder shares what was learned of it.
static WANTS_KUBE_SYSTEM: AtomicBool = AtomicBool::new(false);

/// Where events of cluster-scoped objects go now: `default`, unless this process learned that
/// kube-apiserver wants `kube-system`.
pub(super) fn cluster_scoped_now() -> &'static str {
    if WANTS_KUBE_SYSTEM.load(Ordering::Relaxed) {
        OLD_CLUSTER_SCOPED_NAMESPACE
    } else {
        CLUSTER_SCOPED_NAMESPACE
    }
}

/// Records that kube-apiserver refused an event of a cluster-scoped object in `default`
/// ([`refuses_namespace`]): the next ones go to `kube-system`.
pub(super) fn learn_refused() {
    WANTS_KUBE_SYSTEM.store(true, Ordering::Relaxed);
}

/// Records kube-apiserver's version, read when the process connected: events of cluster-scoped
/// objects go where that version takes them from the first one on (no refused write to learn it).
pub fn learn_server_version(version: &Info) {
    if let Some(namespace) = cluster_scoped_namespace(version) {
        WANTS_KUBE_SYSTEM.store(namespace == OLD_CLUSTER_SCOPED_NAMESPACE, Ordering::Relaxed);
    }
}

/// The namespace of an event about `regarding`: its own, or for a cluster-scoped object
/// `cluster_scoped`.
pub fn event_namespace(regarding: &ObjectReference, cluster_scoped: &str) -> String {
    regarding
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| cluster_scoped.to_string())
}

/// Whether kube-apiserver refused an event of a cluster-scoped object for its namespace (before
/// v1.22 only `kube-system` is accepted).
pub fn refuses_namespace(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s)
        if s.code == 422 && s.message.contains("does not match event.namespace"))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn object(namespace: Option<&str>, name: &str) -> ObjectReference {
        ObjectReference {
            namespace: namespace.map(Into::into),
            name: Some(name.into()),
            ..ObjectReference::default()
        }
    }

    /// Recorded and written version documents (`tests/data/discovery/README.md`).
    #[rstest]
    #[case::recorded_1_20(include_str!("../../tests/data/discovery/version-1.20.2.json"), Some(OLD_CLUSTER_SCOPED_NAMESPACE))]
    #[case::v1_21(include_str!("../../tests/data/discovery/version-1.21.json"), Some(OLD_CLUSTER_SCOPED_NAMESPACE))]
    #[case::v1_22(include_str!("../../tests/data/discovery/version-1.22.json"), Some(CLUSTER_SCOPED_NAMESPACE))]
    #[case::distribution_1_34(include_str!("../../tests/data/discovery/version-1.34-distribution.json"), Some(CLUSTER_SCOPED_NAMESPACE))]
    #[case::built_without_fields(include_str!("../../tests/data/discovery/version-no-fields.json"), Some(OLD_CLUSTER_SCOPED_NAMESPACE))]
    #[case::unreadable(r#"{"major": "", "minor": "", "gitVersion": "devel"}"#, None)]
    fn the_namespace_of_cluster_scoped_events_follows_the_version(
        #[case] document: &str,
        #[case] expected: Option<&str>,
    ) {
        let info: Info = serde_json::from_str(document).expect("a version document");
        assert_eq!(cluster_scoped_namespace(&info), expected);
    }

    #[test]
    fn events_of_cluster_scoped_objects_go_to_the_given_namespace() {
        assert_eq!(event_namespace(&object(Some("ns"), "a"), "default"), "ns");
        assert_eq!(event_namespace(&object(None, "nm"), "default"), "default");
        assert_eq!(
            event_namespace(&object(Some(""), "nm"), "kube-system"),
            "kube-system"
        );
    }

    #[test]
    fn only_the_namespace_refusal_of_old_servers_moves_events() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, "Invalid")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(refuses_namespace(&api(
            422,
            "Event.events.k8s.io \"nm.1\" is invalid: metadata.namespace: Invalid value: \"default\": does not match event.namespace"
        )));
        assert!(!refuses_namespace(&api(422, "note: Too long")));
        assert!(!refuses_namespace(&api(
            403,
            "does not match event.namespace"
        )));
    }
}
