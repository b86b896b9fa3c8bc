//! Selectors, durations, interceptor lists and certificates: the text evictord reads from
//! objects, flags, Secrets and files.

use std::collections::BTreeMap;

use evictord::api::parse_interceptor_list;
use evictord::controller::eviction_request::decide::target_interceptors;
use evictord::selector::{
    label_selector_matches, node_selector_matches, validate_label_selector, validate_node_selector,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{NodeSelector, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

/// What the selector targets read: a selector and the labels (and name) to match it against.
#[derive(Deserialize)]
struct SelectorCase<S> {
    selector: S,
    #[serde(default)]
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Label selectors: validation and matching never panic; matching is deterministic, an empty
/// selector matches everything (meta/v1 semantics), and a selector with `matchLabels` only
/// matches exactly the label maps that contain them.
pub fn label_selectors(data: &[u8]) {
    let Ok(case) = serde_json::from_slice::<SelectorCase<LabelSelector>>(data) else {
        return;
    };
    let _ = validate_label_selector(&case.selector, "selector");
    let matched = label_selector_matches(&case.selector, &case.labels);
    assert_eq!(
        matched,
        label_selector_matches(&case.selector, &case.labels)
    );
    if case
        .selector
        .match_expressions
        .as_ref()
        .is_none_or(Vec::is_empty)
    {
        let want = case.selector.match_labels.clone().unwrap_or_default();
        let expected = want.iter().all(|(k, v)| case.labels.get(k) == Some(v));
        assert_eq!(matched, expected, "matchLabels semantics");
    }
}

/// Node selectors: validation and matching never panic; a selector without terms matches no
/// node.
pub fn node_selectors(data: &[u8]) {
    let Ok(case) = serde_json::from_slice::<SelectorCase<NodeSelector>>(data) else {
        return;
    };
    let _ = validate_node_selector(&case.selector, "spec.nodeSelector");
    let matched = node_selector_matches(&case.selector, &case.name, &case.labels);
    if case.selector.node_selector_terms.is_empty() {
        assert!(!matched, "a selector without terms matched");
    }
}

/// Durations of the flags (`--interceptor-deadline 20m`): never panic; what parses prints back
/// to the same duration.
pub fn durations(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = evictord::cli::parse_duration(text) {
        let printed = humantime::format_duration(d).to_string();
        assert_eq!(
            evictord::cli::parse_duration(&printed),
            Ok(d),
            "{text:?} -> {printed:?}"
        );
    }
}

/// The interceptor annotation: parsing keeps every comma-separated item trimmed and in order;
/// the controller's target list, with or without an implicit interceptor (chosen by the first
/// byte), never exceeds 16 names, ends with the imperative interceptor and holds each name once.
pub fn interceptor_lists(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let names = parse_interceptor_list(&text);
    if !text.trim().is_empty() {
        assert_eq!(names.len(), text.split(',').count());
    }
    assert!(names.iter().all(|n| n.trim() == n));
    let implicit: &[&str] = match data.first().map(|b| b % 3) {
        Some(1) => &["daemonset.apps.k8s.io"],
        Some(2) => &["kubelet.k8s.io"],
        _ => &[],
    };
    let (targets, _skipped) = target_interceptors(names, implicit, &[]);
    assert!(implicit.iter().all(|i| targets.iter().any(|t| t == i)));
    assert!(targets.len() <= 16, "{} targets", targets.len());
    assert_eq!(
        targets.last().map(String::as_str),
        Some(evictord::api::IMPERATIVE_INTERCEPTOR)
    );
    let mut unique = targets.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), targets.len(), "duplicates in {targets:?}");
}

/// Certificates from a Secret (and the same files from a directory): the input is split at
/// `\0` into `ca.crt`, `tls.crt`, `tls.key` and `ca.key`. Loading, building the server
/// configuration and reading validity never panic.
pub fn certificates(data: &[u8]) {
    let mut parts = data.split(|b| *b == 0);
    let mut next = || ByteString(parts.next().unwrap_or_default().to_vec());
    let keys = ["ca.crt", "tls.crt", "tls.key", "ca.key"];
    let data: BTreeMap<String, ByteString> = keys.iter().map(|k| (k.to_string(), next())).collect();
    let secret = Secret {
        data: Some(data),
        ..Secret::default()
    };
    let Some(bundle) = evictord::certs::bundle_from_secret(&secret) else {
        return;
    };
    let _ = evictord::tls::server_config(&bundle);
    let _ = evictord::tls::validity_of(&bundle.cert_pem);
    let _ = evictord::tls::renewal_time(&bundle);
}
