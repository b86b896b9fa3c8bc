//! The per-node drain messages' additions: the targeted pods that stay (and why), those waiting
//! on unregistered interceptors, those the drain waits to complete, and those it skips.

use crate::api::MAX_LISTED_NODE_PODS;

use super::DrainPod;

/// At most this many pods are named in each part of a drain message.
pub const MAX_NAMED_PODS: usize = 5;

/// At most this many unregistered interceptors are named per pod in a drain message.
const MAX_NAMED_INTERCEPTORS: usize = 3;

/// Appends the targeted pods whose turn waits on interceptors no `EvictionInterceptor` registers
/// (SPEC 5.5): a mistyped or uninstalled name costs the drain its deadline (or the grace under
/// `enforce`), and the administrator should see which.
pub fn with_unregistered(message: String, pods: &[&&DrainPod]) -> String {
    if pods.is_empty() {
        return message;
    }
    let mut named: Vec<String> = pods
        .iter()
        .take(MAX_NAMED_PODS)
        .map(|p| {
            let mut names: Vec<&str> = p
                .unregistered
                .iter()
                .take(MAX_NAMED_INTERCEPTORS)
                .map(String::as_str)
                .collect();
            let more = p.unregistered.len().saturating_sub(MAX_NAMED_INTERCEPTORS);
            let more = format!("{more} more");
            if p.unregistered.len() > MAX_NAMED_INTERCEPTORS {
                names.push(&more);
            }
            format!("{}/{} ({})", p.namespace, p.name, names.join(", "))
        })
        .collect();
    if pods.len() > MAX_NAMED_PODS {
        named.push(format!("and {} more", pods.len() - MAX_NAMED_PODS));
    }
    let verb = if pods.len() == 1 {
        "pod waits"
    } else {
        "pods wait"
    };
    format!(
        "{}; {} {verb} on unregistered interceptors: {}",
        message.trim_end_matches('.'),
        pods.len(),
        named.join(", ")
    )
}

/// Appends the targeted pods that stay, each with the reason: they do not block the drain, but an
/// administrator should know they are still there and why.
pub fn with_staying(message: String, pods: &[&&DrainPod]) -> String {
    if pods.is_empty() {
        return message;
    }
    let mut names: Vec<String> = pods
        .iter()
        .take(MAX_NAMED_PODS)
        .map(|p| {
            let why = p.stays.map_or("", super::Stay::reason);
            format!("{}/{} ({why})", p.namespace, p.name)
        })
        .collect();
    if pods.len() > MAX_NAMED_PODS {
        names.push(format!("and {} more", pods.len() - MAX_NAMED_PODS));
    }
    let verb = if pods.len() == 1 {
        "pod stays"
    } else {
        "pods stay"
    };
    format!(
        "{}; {} {verb}: {}",
        message.trim_end_matches('.'),
        pods.len(),
        names.join(", ")
    )
}

/// Appends the pods the drain waits to complete and those it skips (SPEC 6.2), counted, the
/// first ones named.
pub fn with_rules(message: String, waiting: &[&DrainPod], skipped: &[&DrainPod]) -> String {
    let mut message = message;
    for (pods, one, many) in [
        (waiting, "pod waits to complete", "pods wait to complete"),
        (skipped, "pod skipped", "pods skipped"),
    ] {
        if pods.is_empty() {
            continue;
        }
        let mut names: Vec<String> = pods
            .iter()
            .take(MAX_NAMED_PODS)
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        if pods.len() > MAX_NAMED_PODS {
            names.push(format!("and {} more", pods.len() - MAX_NAMED_PODS));
        }
        let verb = if pods.len() == 1 { one } else { many };
        message = format!(
            "{}; {} {verb}: {}",
            message.trim_end_matches('.'),
            pods.len(),
            names.join(", ")
        );
    }
    message
}

/// `namespace/name` of the first [`MAX_LISTED_NODE_PODS`] pods, for the node status lists.
pub fn listed<'a>(pods: impl IntoIterator<Item = &'a DrainPod>) -> Vec<String> {
    pods.into_iter()
        .take(MAX_LISTED_NODE_PODS)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect()
}
