//! What `plan` prints: the preview's pods, the PodDisruptionBudgets that would block them right
//! now, and the maintenances already covering the nodes, as tables or as one object.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::api::{NodeMaintenance, Stage};
use crate::cluster::CachedPod;
use crate::controller::node_maintenance::gather::selects;

use super::blockers::{Budget, blocking_budgets};
use super::preview::{PlannedPod, Preview, entry_label};
use super::rollout::batches::RolloutPreview;
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
    /// With `--max-unavailable`: the batches a rollout of these nodes would drain in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPreview>,
}

/// Assembles the report. `pods` are the pods the preview was made from.
pub fn plan_report(
    preview: Preview,
    selected: &[String],
    pods: &[CachedPod],
    budgets: &[Budget],
    maintenances: &[NodeMaintenance],
    nodes: &[Arc<Node>],
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
        pods: preview.pods,
        blocking_budgets: blocking,
        maintenances: covering,
        rollout: None,
    }
}

/// The report as tables for people.
pub fn plan_text(r: &PlanReport) -> String {
    let rows: Vec<Vec<String>> = r
        .pods
        .iter()
        .map(|p| {
            let mut note = match (&p.stays, &p.autoscaler) {
                (Some(why), _) => format!("stays: {why}; does not hold the drain"),
                (None, Some(hpa)) => {
                    format!("HorizontalPodAutoscaler {hpa} gets a higher minReplicas first")
                }
                (None, None) => String::new(),
            };
            if !p.unregistered.is_empty() {
                if !note.is_empty() {
                    note.push_str("; ");
                }
                note.push_str(&format!("not registered: {}", p.unregistered.join(",")));
            }
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
    use crate::plugin::preview::{maintenance_for, preview};

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
        let r = plan_report(p, &selected, &pods, &budgets, &[other], &nodes);
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
        let mut p = preview(&nm, &[], &[node("n1")], &pods, &[], t(0));
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
        let report = plan_report(p, &["n1".into()], &[], &[], &[], &[]);
        let text = plan_text(&report);
        assert!(text.contains("not registered: typo.example.com"), "{text}");
    }
}
