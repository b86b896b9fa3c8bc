//! What `plan` prints: the preview's pods (those skipped and those waited for to complete with
//! the label or rule that decides), the PodDisruptionBudgets that would block them right now, the
//! maintenances already covering the nodes, the drain deadline the maintenance would have, and
//! the pods `drain` and `rollout` refuse without `--force` or `--delete-emptydir-data`, as tables
//! or as one object.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::api::{DrainBehavior, NodeMaintenance, Stage};
use crate::cluster::CachedPod;
use crate::controller::node_maintenance::gather::selects;

use super::blockers::{Budget, blocking_budgets};
use super::deadline::planned_text;
use super::maintenance::DrainDeadline;
use super::planned::{PlannedPod, Preview, entry_label};
use super::rollout::batches::RolloutPreview;
use super::safety::{Unsafe, unsafe_pods};
use super::status::table;

/// A budget that refuses any disruption now, with the planned pods it protects.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockingBudget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// The planned pods it selects (`namespace/name`).
    pub pods: Vec<String>,
}

/// A maintenance that already selects some of the nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Covering {
    /// Name.
    pub name: String,
    /// Stage.
    pub stage: Stage,
    /// The nodes of the preview it selects.
    pub nodes: Vec<String>,
}

/// The whole `plan` output.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// The nodes.
    pub nodes: Vec<String>,
    /// The drain plan, as admission completes it (`Type ≤ priority`).
    pub drain_plan: Vec<String>,
    /// The pods, in the order the controller asks them to leave.
    pub pods: Vec<PlannedPod>,
    /// Budgets that would block now.
    pub blocking_budgets: Vec<BlockingBudget>,
    /// Maintenances already covering the nodes.
    pub maintenances: Vec<Covering>,
    /// The drain deadline the maintenance would have (`--drain-deadline`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DrainDeadline>,
    /// The pods `drain` and `rollout` refuse without `--force` (no controller recreates them) or
    /// `--delete-emptydir-data` (emptyDir volumes), as `kubectl drain` does.
    #[serde(skip_serializing_if = "Unsafe::is_empty")]
    pub unsafe_pods: Unsafe,
    /// With `--max-unavailable`: the batches a rollout of these nodes would drain in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPreview>,
}

/// Assembles the report. `pods` are the pods the preview was made from; `deadline` is the planned
/// maintenance's.
pub fn plan_report(
    preview: Preview,
    selected: &[String],
    pods: &[CachedPod],
    budgets: &[Budget],
    maintenances: &[NodeMaintenance],
    nodes: &[Arc<Node>],
    deadline: Option<DrainDeadline>,
) -> PlanReport {
    let mut blocking: Vec<BlockingBudget> = Vec::new();
    for planned in &preview.pods {
        let Some(pod) = pods
            .iter()
            .find(|p| p.namespace() == planned.namespace && p.name() == planned.name)
        else {
            continue;
        };
        for b in blocking_budgets(pod, budgets) {
            let who = format!("{}/{}", planned.namespace, planned.name);
            match blocking
                .iter_mut()
                .find(|x| x.namespace == b.namespace && x.name == b.name)
            {
                Some(x) => x.pods.push(who),
                None => blocking.push(BlockingBudget {
                    namespace: b.namespace.clone(),
                    name: b.name.clone(),
                    disruptions_allowed: b.disruptions_allowed,
                    pods: vec![who],
                }),
            }
        }
    }
    let ours: Vec<&Arc<Node>> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_ref()
                .is_some_and(|x| selected.contains(x))
        })
        .collect();
    let covering = maintenances
        .iter()
        .filter_map(|m| {
            let covered: Vec<String> = ours
                .iter()
                .filter(|n| selects(m, n))
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            (!covered.is_empty()).then(|| Covering {
                name: m.metadata.name.clone().unwrap_or_default(),
                stage: m.spec.stage(),
                nodes: covered,
            })
        })
        .collect();
    PlanReport {
        nodes: selected.to_vec(),
        drain_plan: preview.plan.iter().map(entry_label).collect(),
        unsafe_pods: unsafe_pods(&preview.pods, deadline),
        pods: preview.pods,
        blocking_budgets: blocking,
        maintenances: covering,
        deadline,
        rollout: None,
    }
}

/// The NOTE column of a pod: why it stays, that the drain waits for it, the autoscaler raised
/// first, unregistered interceptors, and what `drain` refuses it without.
fn note(p: &PlannedPod, refused: &Unsafe) -> String {
    let mut parts: Vec<String> = Vec::new();
    match (&p.stays, p.behavior, &p.autoscaler) {
        (Some(why), _, _) => parts.push(format!("stays: {why}; does not hold the drain")),
        (None, DrainBehavior::WaitCompleted, _) => parts.push(format!(
            "waited for to complete, not evicted ({})",
            p.decided_by.as_deref().unwrap_or("pod rule")
        )),
        (None, _, Some(hpa)) => parts.push(format!(
            "HorizontalPodAutoscaler {hpa} gets a higher minReplicas first"
        )),
        (None, _, None) => {}
    }
    if !p.unregistered.is_empty() {
        parts.push(format!("not registered: {}", p.unregistered.join(",")));
    }
    let key = format!("{}/{}", p.namespace, p.name);
    if refused.unmanaged.contains(&key) {
        parts.push("no controller: drain needs --force".into());
    }
    if refused.local_data.contains(&key) {
        parts.push("emptyDir: drain needs --delete-emptydir-data".into());
    }
    parts.join("; ")
}

/// The report as tables for people.
pub fn plan_text(r: &PlanReport) -> String {
    let rows: Vec<Vec<String>> = r
        .pods
        .iter()
        .map(|p| {
            let note = note(p, &r.unsafe_pods);
            vec![
                p.step.map_or_else(|| "-".into(), |s| s.to_string()),
                p.entry.clone(),
                p.node.clone(),
                format!("{}/{}", p.namespace, p.name),
                p.priority.to_string(),
                p.pod_type.to_string(),
                p.owner.clone().unwrap_or_else(|| "-".into()),
                if p.interceptors.is_empty() {
                    "-".into()
                } else {
                    p.interceptors.join(",")
                },
                note,
            ]
        })
        .collect();
    let mut out = format!(
        "Drain preview of {} (nothing written). Pods leave in this order; pods of one step are asked together.\n\n",
        r.nodes.join(", ")
    );
    if rows.is_empty() {
        out.push_str("No pod to evict.\n");
    } else {
        out.push_str(&table(
            &[
                "STEP",
                "PLAN ENTRY",
                "NODE",
                "POD",
                "PRIORITY",
                "TYPE",
                "OWNER",
                "INTERCEPTORS",
                "NOTE",
            ],
            &rows,
        ));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&planned_text(r.deadline));
    out.push('\n');
    if !r.unsafe_pods.is_empty() {
        out.push_str(
            "\nkubectl evictord drain and rollout refuse these nodes, as kubectl drain does:\n",
        );
        for l in r.unsafe_pods.lines() {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out.push_str("\nPodDisruptionBudgets that would block now:\n");
    if r.blocking_budgets.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .blocking_budgets
            .iter()
            .map(|b| {
                vec![
                    b.namespace.clone(),
                    b.name.clone(),
                    b.disruptions_allowed.to_string(),
                    b.pods.join(","),
                ]
            })
            .collect();
        out.push_str(&table(
            &["NAMESPACE", "NAME", "DISRUPTIONS ALLOWED", "PODS"],
            &rows,
        ));
        out.push('\n');
    }
    out.push_str("\nMaintenances already covering these nodes:\n");
    if r.maintenances.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .maintenances
            .iter()
            .map(|m| vec![m.name.clone(), m.stage.to_string(), m.nodes.join(",")])
            .collect();
        out.push_str(&table(&["NAME", "STAGE", "NODES"], &rows));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::fixtures::{node, pod, t};
    use crate::plugin::maintenance::maintenance_for;
    use crate::plugin::preview::preview;

    #[test]
    fn report_names_blocking_budgets_and_covering_maintenances() {
        let nodes = [node("n1"), node("n2")];
        let pods = [
            pod("web-1").label("app", "web").build(),
            pod("db").mirror().build(),
        ];
        let other = maintenance_for(
            "other-nm",
            &["n1".into(), "n2".into()],
            &[],
            None,
            Stage::Cordon,
        );
        let selected = vec!["n1".to_string()];
        let mine = maintenance_for("mine", &selected, &[], None, Stage::Drain);
        let p = preview(
            &mine,
            std::slice::from_ref(&other),
            &nodes,
            &pods,
            &[],
            &Default::default(),
            t(0),
        );
        let budgets = [
            Budget::from_json(
                "ns",
                "v1",
                &serde_json::json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
            ),
            Budget::from_json(
                "ns",
                "v1",
                &serde_json::json!({"metadata": {"name": "free"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}, "status": {"disruptionsAllowed": 1}}),
            ),
        ];
        let r = plan_report(p, &selected, &pods, &budgets, &[other], &nodes, None);
        assert_eq!(
            r.blocking_budgets,
            vec![BlockingBudget {
                namespace: "ns".into(),
                name: "web".into(),
                disruptions_allowed: 0,
                pods: vec!["ns/web-1".into()]
            }]
        );
        assert_eq!(
            r.maintenances,
            vec![Covering {
                name: "other-nm".into(),
                stage: Stage::Cordon,
                nodes: vec!["n1".into()]
            }]
        );
        let text = plan_text(&r);
        assert!(
            text.contains("ns/web-1")
                && text.contains("stays: static pod on a node without an evictord node agent"),
            "{text}"
        );
        assert!(text.contains("other-nm"), "{text}");
    }

    /// SPEC 5.5: the interceptors no EvictionInterceptor registers are named on each pod (the
    /// report's NOTE column says "not registered"); unknown registrations name nothing.
    #[test]
    fn unregistered_interceptors_are_named() {
        let nm = maintenance_for("mine", &["n1".into()], &[], None, crate::api::Stage::Drain);
        let pods = vec![
            pod("db")
                .interceptors("typo.example.com,ok.example.com")
                .build(),
            pod("ds").daemonset().build(),
        ];
        let mut p = preview(
            &nm,
            &[],
            &[node("n1")],
            &pods,
            &[],
            &Default::default(),
            t(0),
        );
        p.mark_unregistered(|n| {
            crate::api::Registration::of(
                n,
                (n != "daemonset.apps.k8s.io").then_some(n == "ok.example.com"),
            )
        });
        let marked: Vec<(&str, Vec<&str>)> = p
            .pods
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.unregistered.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            marked,
            vec![("db", vec!["typo.example.com"]), ("ds", vec![])]
        );
        let json = serde_json::to_value(&p.pods[0]).unwrap();
        assert_eq!(
            json["unregistered"],
            serde_json::json!(["typo.example.com"])
        );
        assert!(
            serde_json::to_value(&p.pods[1])
                .unwrap()
                .get("unregistered")
                .is_none()
        );
        let report = plan_report(p, &["n1".into()], &[], &[], &[], &[], None);
        let text = plan_text(&report);
        assert!(text.contains("not registered: typo.example.com"), "{text}");
    }

    /// SPEC 6.2: plan says which pods are skipped and which waited for (and what decides), which
    /// `drain` refuses and the flag for each (a skipped pod is not refused; one waited for is,
    /// under a Force deadline), and the deadline the maintenance would have.
    #[test]
    fn skipped_waited_for_refused_and_the_deadline() {
        use crate::api::{DRAIN_LABEL, DeadlinePolicy};
        use crate::plugin::maintenance::{DrainDeadline, with_deadline};
        let deadline = DrainDeadline {
            seconds: 1800,
            policy: DeadlinePolicy::Force,
        };
        let nm = with_deadline(
            maintenance_for("mine", &["n1".into()], &[], None, Stage::Drain),
            Some(deadline),
        );
        let pods = vec![
            pod("bare").build(),
            pod("scratch").replicaset("web").empty_dir().build(),
            pod("kept").label(DRAIN_LABEL, "skip").build(),
            pod("job")
                .replicaset("j")
                .label(DRAIN_LABEL, "wait-completed")
                .empty_dir()
                .build(),
        ];
        let p = preview(
            &nm,
            &[],
            &[node("n1")],
            &pods,
            &[],
            &Default::default(),
            t(0),
        );
        let r = plan_report(p, &["n1".into()], &pods, &[], &[], &[], Some(deadline));
        assert_eq!(
            r.unsafe_pods,
            Unsafe {
                unmanaged: vec!["ns/bare".into()],
                local_data: vec!["ns/scratch".into(), "ns/job".into()],
            }
        );
        let text = plan_text(&r);
        for needle in [
            "stays: skipped by label evictord.dev/drain=skip; does not hold the drain",
            "waited for to complete, not evicted (label evictord.dev/drain=wait-completed); emptyDir: drain needs --delete-emptydir-data",
            "no controller: drain needs --force",
            "Drain deadline: 30m per node",
            "kubectl evictord drain and rollout refuse these nodes, as kubectl drain does:\n  1 pod no controller recreates, gone for good once evicted (use --force to override): ns/bare\n  2 pods with emptyDir volumes, whose data is lost when they leave (use --delete-emptydir-data to override): ns/scratch, ns/job\n",
        ] {
            assert!(text.contains(needle), "{needle:?} in:\n{text}");
        }
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["deadline"],
            serde_json::json!({"seconds": 1800, "policy": "Force"})
        );
        assert_eq!(
            json["unsafePods"]["unmanaged"],
            serde_json::json!(["ns/bare"])
        );
        let none = plan_report(Preview::default(), &["n1".into()], &[], &[], &[], &[], None);
        let json = serde_json::to_value(&none).unwrap();
        assert!(json.get("deadline").is_none() && json.get("unsafePods").is_none());
        assert!(plan_text(&none).contains("Drain deadline: none (--drain-deadline sets one)."));
    }
}
