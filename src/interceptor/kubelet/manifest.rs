//! Static pod manifests as the kubelet reads them (pure): which files of the static pod directory
//! it looks at, which pod a manifest defines, and the name of the mirror pod it creates for it.
//!
//! The kubelet v1.20 file source (`pkg/kubelet/config/file.go`, `extractFromDir`) lists the
//! directory with `filepath.Glob(dir + "/[^.]*")`: names starting with a dot are ignored, and
//! subdirectories are reported ("Not recursing into manifest path") and skipped; its inotify
//! watch (`file_linux.go`, `produceWatchEvent`) drops events of dot-names too. Each regular file
//! (after following symlinks) is decoded as one YAML or JSON document holding a Pod
//! (`tryDecodeSinglePod`, up to 10 MiB); `applyDefaults` (`common.go`) names the pod
//! `<metadata.name>-<lowercased node name>` and puts it in namespace `default` when the manifest
//! sets none: that is the mirror pod's name and namespace.

use serde::Deserialize;

/// The largest manifest the kubelet reads (`maxConfigLength`, 10 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 10 << 20;

/// The pod a manifest defines, as the manifest names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StaticPodId {
    /// `metadata.namespace`, `default` when unset.
    pub namespace: String,
    /// `metadata.name` as written (without the node suffix).
    pub name: String,
}

impl StaticPodId {
    /// The name of the mirror pod the kubelet of `node` creates for this pod.
    pub fn mirror_name(&self, node: &str) -> String {
        mirror_pod_name(&self.name, node)
    }
}

/// `<name>-<node in lower case>`, as the kubelet's `generatePodName`.
pub fn mirror_pod_name(name: &str, node: &str) -> String {
    format!("{name}-{}", node.to_lowercase())
}

/// Whether the kubelet looks at a directory entry of this name (not a dot-name).
pub fn is_visible_to_kubelet(file_name: &str) -> bool {
    !file_name.is_empty() && !file_name.starts_with('.')
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// The pod a manifest defines: the first YAML (or JSON) document, of kind Pod, with a name.
/// `None` for anything the kubelet would not run (it logs and skips such files).
pub fn parse_identity(bytes: &[u8]) -> Option<StaticPodId> {
    let doc = serde_norway::Deserializer::from_slice(bytes).next()?;
    let head = Head::deserialize(doc).ok()?;
    if head.kind.as_deref() != Some("Pod") {
        return None;
    }
    let meta = head.metadata?;
    let name = meta.name.filter(|n| !n.is_empty())?;
    let namespace = meta
        .namespace
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    Some(StaticPodId { namespace, name })
}

/// The SHA-256 of `bytes`, in lower-case hex: how a held manifest is recognised as unchanged.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn id(ns: &str, name: &str) -> Option<StaticPodId> {
        Some(StaticPodId {
            namespace: ns.into(),
            name: name.into(),
        })
    }

    #[rstest]
    #[case::yaml(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n",
        id("kube-system", "etcd")
    )]
    #[case::namespace_defaults("kind: Pod\nmetadata: {name: web}\n", id("default", "web"))]
    #[case::empty_namespace_defaults(
        "kind: Pod\nmetadata: {name: web, namespace: ''}\n",
        id("default", "web")
    )]
    #[case::json(
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j","namespace":"n"}}"#,
        id("n", "j")
    )]
    #[case::first_document_only(
        "kind: Pod\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: b}\n",
        id("default", "a")
    )]
    #[case::not_a_pod("kind: Deployment\nmetadata: {name: d}\n", None)]
    #[case::no_kind("metadata: {name: d}\n", None)]
    #[case::no_name("kind: Pod\nmetadata: {namespace: x}\n", None)]
    #[case::garbage("{{{ not yaml", None)]
    #[case::empty("", None)]
    fn identity_rows(#[case] text: &str, #[case] want: Option<StaticPodId>) {
        assert_eq!(parse_identity(text.as_bytes()), want);
    }

    #[rstest]
    #[case::lower_case_node("etcd", "Node-One", "etcd-node-one")]
    #[case::plain("web", "a", "web-a")]
    fn mirror_names(#[case] name: &str, #[case] node: &str, #[case] want: &str) {
        assert_eq!(mirror_pod_name(name, node), want);
    }

    #[rstest]
    #[case::manifest("etcd.yaml", true)]
    #[case::dot_file(".etcd.yaml.swp", false)]
    #[case::held_directory(".evictord-held", false)]
    #[case::empty("", false)]
    fn visibility(#[case] name: &str, #[case] want: bool) {
        assert_eq!(is_visible_to_kubelet(name), want);
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            content_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
