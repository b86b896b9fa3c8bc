//! `kubectl drain`'s two safety checks, which `drain` and `rollout` make before they create
//! anything (SPEC 6.2): a pod no controller recreates (no controller owner, not a mirror pod) is
//! refused without `--force`, a pod with an `emptyDir` volume without `--delete-emptydir-data`.
//! Only the pods the maintenance removes count: the Default pods it asks to leave and, under a
//! `Force` deadline, those it waits to complete (deleted at the deadline if still there).
//! DaemonSet and static pods leave their own way (SPEC 5.3), as `kubectl drain` leaves them to
//! `--ignore-daemonsets` and the kubelet; pods the rules skip stay; terminating pods are going.
//! The API itself evicts them all, as the KEP says: these checks are the plugin's.

use serde::Serialize;

use crate::api::{DeadlinePolicy, DrainBehavior, PodType};

use super::maintenance::DrainDeadline;
use super::planned::PlannedPod;

/// At most this many pods are named per check; then a count.
pub const MAX_NAMED: usize = 5;

/// The flags that let `drain` and `rollout` go on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--force`: pods no controller recreates are evicted (and gone for good).
    pub force: bool,
    /// `--delete-emptydir-data`: pods with `emptyDir` volumes are evicted (their data lost).
    pub delete_emptydir_data: bool,
}

/// The pods the checks concern, `namespace/name`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unsafe {
    /// Pods no controller recreates (refused without `--force`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmanaged: Vec<String>,
    /// Pods with `emptyDir` volumes (refused without `--delete-emptydir-data`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub local_data: Vec<String>,
}

/// True when the maintenance removes the pod (see the module docs).
fn removed(p: &PlannedPod, deadline: Option<DrainDeadline>) -> bool {
    let forced_at_deadline = deadline.is_some_and(|d| d.policy == DeadlinePolicy::Force);
    let behavior = match p.behavior {
        DrainBehavior::Drain => true,
        DrainBehavior::WaitCompleted => forced_at_deadline,
        DrainBehavior::Skip => false,
    };
    behavior && p.pod_type == PodType::Default && !p.terminating
}

/// The preview's pods that the checks concern, whatever the flags. `deadline` is the planned
/// maintenance's.
pub fn unsafe_pods(pods: &[PlannedPod], deadline: Option<DrainDeadline>) -> Unsafe {
    let named = |keep: &dyn Fn(&PlannedPod) -> bool| -> Vec<String> {
        pods.iter()
            .filter(|p| removed(p, deadline) && keep(p))
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect()
    };
    Unsafe {
        unmanaged: named(&|p| p.unmanaged),
        local_data: named(&|p| p.local_data),
    }
}

/// What `drain` or `rollout` refuses given its flags; `None` when it may go on.
pub fn refusal(
    pods: &[PlannedPod],
    deadline: Option<DrainDeadline>,
    overrides: Overrides,
) -> Option<Unsafe> {
    let mut u = unsafe_pods(pods, deadline);
    if overrides.force {
        u.unmanaged.clear();
    }
    if overrides.delete_emptydir_data {
        u.local_data.clear();
    }
    (!u.is_empty()).then_some(u)
}

/// `ns/a, ns/b, ns/c, ns/d, ns/e and 3 more`.
fn names(pods: &[String]) -> String {
    let mut named = pods
        .iter()
        .take(MAX_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if pods.len() > MAX_NAMED {
        named.push_str(&format!(" and {} more", pods.len() - MAX_NAMED));
    }
    named
}

fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Unsafe {
    /// Nothing to refuse.
    pub fn is_empty(&self) -> bool {
        self.unmanaged.is_empty() && self.local_data.is_empty()
    }

    /// One line per check that has pods: how many, why, the flag to pass, the first few.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.unmanaged.is_empty() {
            out.push(format!(
                "{} no controller recreates, gone for good once evicted (use --force to override): {}",
                count(self.unmanaged.len(), "pod", "pods"),
                names(&self.unmanaged)
            ));
        }
        if !self.local_data.is_empty() {
            out.push(format!(
                "{}, whose data is lost when they leave (use --delete-emptydir-data to override): {}",
                count(
                    self.local_data.len(),
                    "pod with emptyDir volumes",
                    "pods with emptyDir volumes"
                ),
                names(&self.local_data)
            ));
        }
        out
    }
}

impl std::fmt::Display for Unsafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refused, as kubectl drain refuses them; nothing was created:"
        )?;
        for l in self.lines() {
            write!(f, "\n  {l}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DeadlinePolicy::{Force, Report};
    use rstest::rstest;

    fn planned(name: &str) -> PlannedPod {
        PlannedPod {
            step: Some(0),
            entry: String::new(),
            namespace: "ns".into(),
            name: name.into(),
            node: "n1".into(),
            priority: 0,
            pod_type: PodType::Default,
            owner: None,
            interceptors: Vec::new(),
            leaves: true,
            stays: None,
            autoscaler: None,
            unregistered: Vec::new(),
            behavior: DrainBehavior::Drain,
            decided_by: None,
            unmanaged: false,
            local_data: false,
            terminating: false,
        }
    }

    fn bare(p: PlannedPod) -> PlannedPod {
        PlannedPod {
            unmanaged: true,
            ..p
        }
    }

    fn scratch(p: PlannedPod) -> PlannedPod {
        PlannedPod {
            local_data: true,
            ..p
        }
    }

    fn with(b: DrainBehavior, p: PlannedPod) -> PlannedPod {
        PlannedPod { behavior: b, ..p }
    }

    fn deadline(policy: DeadlinePolicy) -> Option<DrainDeadline> {
        Some(DrainDeadline {
            seconds: 600,
            policy,
        })
    }

    const NONE: Overrides = Overrides {
        force: false,
        delete_emptydir_data: false,
    };

    /// SPEC 6.2: which pods are refused, and which flag lets each through.
    #[rstest]
    #[case::bare(bare(planned("p")), None, NONE, Some((true, false)))]
    #[case::bare_forced(bare(planned("p")), None, Overrides { force: true, ..NONE }, None)]
    #[case::empty_dir(scratch(planned("p")), None, NONE, Some((false, true)))]
    #[case::empty_dir_deleted(scratch(planned("p")), None, Overrides { delete_emptydir_data: true, ..NONE }, None)]
    #[case::both_need_both(bare(scratch(planned("p"))), None, Overrides { force: true, ..NONE }, Some((false, true)))]
    #[case::managed(planned("p"), None, NONE, None)]
    #[case::daemonset_spec_5_3(scratch(PlannedPod { pod_type: PodType::DaemonSet, ..planned("p") }), None, NONE, None)]
    #[case::static_pod(scratch(PlannedPod { pod_type: PodType::Static, ..planned("p") }), None, NONE, None)]
    #[case::skipped_stays(with(DrainBehavior::Skip, bare(planned("p"))), None, NONE, None)]
    #[case::waited_for(
        with(DrainBehavior::WaitCompleted, scratch(planned("p"))),
        deadline(Report),
        NONE,
        None
    )]
    #[case::waited_for_then_forced(with(DrainBehavior::WaitCompleted, scratch(planned("p"))), deadline(Force), NONE, Some((false, true)))]
    #[case::terminating(PlannedPod { terminating: true, ..bare(planned("p")) }, None, NONE, None)]
    fn refusals(
        #[case] pod: PlannedPod,
        #[case] deadline: Option<DrainDeadline>,
        #[case] overrides: Overrides,
        #[case] want: Option<(bool, bool)>,
    ) {
        let got = refusal(std::slice::from_ref(&pod), deadline, overrides)
            .map(|u| (!u.unmanaged.is_empty(), !u.local_data.is_empty()));
        assert_eq!(got, want);
    }

    /// The refusal names both checks, the flag for each, at most five pods then a count.
    #[test]
    fn the_refusal_names_the_pods_and_the_flags() {
        let mut pods = vec![bare(planned("bare")), scratch(planned("scratch"))];
        pods.extend((1..=7).map(|i| bare(planned(&format!("b{i}")))));
        let u = refusal(&pods, None, NONE).unwrap();
        assert_eq!(
            u.to_string(),
            "refused, as kubectl drain refuses them; nothing was created:\n  \
             8 pods no controller recreates, gone for good once evicted (use --force to override): ns/bare, ns/b1, ns/b2, ns/b3, ns/b4 and 3 more\n  \
             1 pod with emptyDir volumes, whose data is lost when they leave (use --delete-emptydir-data to override): ns/scratch"
        );
        assert!(unsafe_pods(&[planned("ok")], None).is_empty());
    }
}
