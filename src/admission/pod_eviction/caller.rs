//! Who called the Eviction API, in words: the known drainers by their service account, anyone
//! else by user name. Recorded on the EvictionRequest and in the pod's event.

use k8s_openapi::api::authentication::v1::UserInfo;

/// Service account name fragments of well-known drainers and how people call them.
const KNOWN_TOOLS: &[(&str, &str)] = &[
    ("cluster-autoscaler", "cluster-autoscaler"),
    ("descheduler", "descheduler"),
    ("karpenter", "Karpenter"),
    ("kured", "kured"),
    ("capi-controller-manager", "Cluster API"),
    ("machine-controller", "machine controller"),
    ("node-problem-detector", "node-problem-detector"),
];

/// A readable name of the caller: `"descheduler (system:serviceaccount:kube-system:descheduler)"`
/// for a known tool's service account, `"user alice"` otherwise.
pub fn caller_name(user: &UserInfo) -> String {
    let name = user.username.as_deref().unwrap_or("");
    if name.is_empty() {
        return "an unnamed user".to_string();
    }
    let account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, sa)| sa);
    let tool = account.and_then(|sa| {
        KNOWN_TOOLS
            .iter()
            .find(|(fragment, _)| sa.contains(fragment))
            .map(|(_, tool)| *tool)
    });
    match (tool, account) {
        (Some(tool), _) => format!("{tool} ({name})"),
        (None, Some(_)) => format!("service account {name}"),
        (None, None) => format!("user {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            ..Default::default()
        }
    }

    #[test]
    fn callers_by_name() {
        for (name, expected) in [
            (
                "system:serviceaccount:kube-system:cluster-autoscaler",
                "cluster-autoscaler (system:serviceaccount:kube-system:cluster-autoscaler)",
            ),
            (
                "system:serviceaccount:kube-system:descheduler-sa",
                "descheduler (system:serviceaccount:kube-system:descheduler-sa)",
            ),
            (
                "system:serviceaccount:karpenter:karpenter",
                "Karpenter (system:serviceaccount:karpenter:karpenter)",
            ),
            (
                "system:serviceaccount:apps:builder",
                "service account system:serviceaccount:apps:builder",
            ),
            ("kubernetes-admin", "user kubernetes-admin"),
            ("", "an unnamed user"),
        ] {
            assert_eq!(caller_name(&user(name)), expected, "{name}");
        }
    }
}
