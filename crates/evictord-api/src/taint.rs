//! The maintenance taint (SPEC 5.3): the `NoSchedule` taint `evictord.dev/maintenance` that keeps
//! the DaemonSet controller from recreating drained DaemonSet pods on a node under maintenance,
//! and whether a list of tolerations tolerates it (the rule of Kubernetes' `ToleratesTaint`).

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::MAINTENANCE_TAINT;

/// The effect of the maintenance taint.
pub const MAINTENANCE_TAINT_EFFECT: &str = "NoSchedule";

/// The maintenance taint as evictord places it (no value: several maintenances share it).
pub fn maintenance_taint() -> Taint {
    Taint {
        key: MAINTENANCE_TAINT.to_string(),
        effect: MAINTENANCE_TAINT_EFFECT.to_string(),
        value: None,
        time_added: None,
    }
}

/// True when `toleration` tolerates `taint`, as Kubernetes decides it: the effect matches (or the
/// toleration names none), the key matches (an empty key with `Exists` matches every key), and
/// with `Equal` (the default operator) the values are equal.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// True when any of `tolerations` tolerates the maintenance taint: a DaemonSet whose pods do is
/// not kept off the node by it, so deleting its pod would only restart it there.
pub fn tolerates_maintenance_taint(tolerations: &[Toleration]) -> bool {
    let taint = maintenance_taint();
    tolerations.iter().any(|t| tolerates(t, &taint))
}

/// True when the node's taints include the maintenance taint.
pub fn has_maintenance_taint(taints: &[Taint]) -> bool {
    taints
        .iter()
        .any(|t| t.key == MAINTENANCE_TAINT && t.effect == MAINTENANCE_TAINT_EFFECT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(operator),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[rstest::rstest]
    #[case::everything("", "Exists", "", "", true)]
    #[case::every_no_schedule_taint("", "Exists", "", "NoSchedule", true)]
    #[case::only_no_execute("", "Exists", "", "NoExecute", false)]
    #[case::the_key("evictord.dev/maintenance", "Exists", "", "", true)]
    #[case::the_key_equal_empty_value("evictord.dev/maintenance", "", "", "NoSchedule", true)]
    #[case::the_key_equal_other_value("evictord.dev/maintenance", "Equal", "x", "", false)]
    #[case::another_key("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule", false)]
    #[case::daemonset_defaults("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", false)]
    fn tolerates_the_maintenance_taint(
        #[case] key: &str,
        #[case] operator: &str,
        #[case] value: &str,
        #[case] effect: &str,
        #[case] want: bool,
    ) {
        let t = toleration(key, operator, value, effect);
        assert_eq!(tolerates_maintenance_taint(&[t]), want);
    }

    #[test]
    fn the_taint_is_found_among_others() {
        let other = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        assert!(!has_maintenance_taint(std::slice::from_ref(&other)));
        assert!(has_maintenance_taint(&[other, maintenance_taint()]));
        assert!(!tolerates_maintenance_taint(&[]));
    }
}
