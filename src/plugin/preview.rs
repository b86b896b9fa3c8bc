//! The drain preview: which pods a maintenance of these nodes would ask to leave, in which plan
//! step, without writing anything.
//!
//! It plays the controller forward with the controller's own code: the maintenance `drain` would
//! create ([`maintenance_for`](super::maintenance::maintenance_for)) is added to the maintenances
//! already draining, their input is gathered by [`drain_input`] and [`apply_pod_rules`] and
//! resolved by [`plan_drain`], exactly as the node maintenance controller does; the pods the
//! result asks for are taken as gone (the controller only moves on once they are), those it waits
//! to complete (SPEC 6.2) as finished, and the resolution runs again, until the maintenance is
//! drained or stops moving. The step of a pod is the plan position at which the controller first
//! asks for it (or starts waiting for it). Pods of one step are asked for together (the
//! controller creates their requests at once). Pods the rules skip are listed last, never asked
//! for.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::admission::node_maintenance::canonical_drain_plan;
use crate::api::{DrainBehavior, EvictionRequest, NodeMaintenance, NodeMaintenanceStatus, Stage};
use crate::cluster::CachedPod;
use crate::controller::node_maintenance::gather::{
    apply_pod_rules, as_admitted, drain_input, has_node_agent, selects,
};
use crate::drain::{DrainInput, MaintenanceOutput, TargetSet, plan_drain};

use super::drain_rules::{NamespaceLabels, labels_of, sources};
use super::planned::{ASSUMED_DAEMONSET_INTERCEPTOR, PlannedPod, Preview, planned_pod};

/// The preview of draining with `planned` (e.g. from
/// [`maintenance_for`](super::maintenance::maintenance_for)) while `existing` maintenances are as
/// they are. `nodes` are the cluster's nodes (at least those selected), `pods` the pods on the
/// selected nodes, `requests` the EvictionRequests that exist, `namespaces` the labels of the
/// pods' namespaces (needed only when a pod rule has a `namespaceSelector`).
pub fn preview(
    planned: &NodeMaintenance,
    existing: &[NodeMaintenance],
    nodes: &[Arc<Node>],
    pods: &[CachedPod],
    requests: &[EvictionRequest],
    namespaces: &NamespaceLabels,
    now: Timestamp,
) -> Preview {
    let name = planned.metadata.name.clone().unwrap_or_default();
    let mut mine = planned.clone();
    mine.spec.stage = Some(Stage::Drain);
    mine.spec.drain_plan = canonical_drain_plan(&planned.spec.drain_plan);
    // The newest maintenance: created now (older ones keep precedence, as they will).
    mine.metadata.creation_timestamp = Some(Time(now));
    // Shown as admitted: the order in which its pods leave once budgets let it act (SPEC 6.1).
    let mine = as_admitted(mine);
    let mut maintenances: Vec<Arc<NodeMaintenance>> = existing
        .iter()
        .filter(|m| m.metadata.name.as_deref() != Some(name.as_str()))
        .cloned()
        .map(Arc::new)
        .collect();
    maintenances.push(Arc::new(mine.clone()));
    let request_of: BTreeMap<(&str, &str), &EvictionRequest> = requests
        .iter()
        .filter_map(|r| {
            Some((
                (
                    r.metadata.namespace.as_deref()?,
                    r.metadata.name.as_deref()?,
                ),
                r,
            ))
        })
        .collect();
    let with_agent: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| has_node_agent(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mut remaining: Vec<Arc<CachedPod>> = pods.iter().cloned().map(Arc::new).collect();
    let decided = sources(&maintenances, nodes, &remaining, namespaces);
    // Each pod's behaviour, as the controller decides it (the first round sees every pod).
    let mut behaviors: BTreeMap<String, DrainBehavior> = BTreeMap::new();
    let planned_pod = |pod: &CachedPod, step: Option<usize>, behavior: DrainBehavior| {
        let node_agent = pod
            .spec
            .node_name
            .as_deref()
            .is_some_and(|n| with_agent.contains(n));
        let request = request_of.get(&(pod.namespace(), pod.uid())).copied();
        let mut p = planned_pod(pod, step, &mine.spec.drain_plan, request, node_agent);
        p.behavior = behavior;
        p.decided_by = decided.get(pod.uid()).cloned();
        if behavior == DrainBehavior::Skip {
            p.entry = "skipped".into();
            p.leaves = false;
            p.stays = Some(match &p.decided_by {
                Some(why) => format!("skipped by {why}"),
                None => "skipped".into(),
            });
        }
        p
    };
    let by_uid: BTreeMap<&str, &CachedPod> = pods.iter().map(|p| (p.uid(), p)).collect();
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut planned_pods = Vec::new();
    // Each round either lists a pod or advances a position; both are bounded.
    let bound = mine.spec.drain_plan.len() + pods.len() + 2;
    for _ in 0..bound {
        let mut input = drain_input(
            &maintenances,
            nodes,
            &remaining,
            |ns, uid| request_of.get(&(ns, uid)).copied(),
            ASSUMED_DAEMONSET_INTERCEPTOR,
        );
        apply_pod_rules(
            &mut input,
            &maintenances,
            nodes,
            &remaining,
            labels_of(namespaces),
        );
        for p in input.pods.values().flatten() {
            behaviors.entry(p.uid.clone()).or_insert(p.behavior);
        }
        let output = plan_drain(&input);
        let Some(out) = output.maintenances.iter().find(|o| o.name == name) else {
            break;
        };
        let step = usize::try_from(out.drain_plan_position).unwrap_or(0);
        let mut progressed = false;
        let asked_now = out.pods_to_request.iter().map(|p| p.uid.clone());
        for uid in asked_now.chain(waited_for(&input, out)) {
            if !listed.insert(uid.clone()) {
                continue;
            }
            if let Some(pod) = by_uid.get(uid.as_str()) {
                progressed = true;
                let behavior = behaviors.get(&uid).copied().unwrap_or_default();
                planned_pods.push(planned_pod(pod, Some(step), behavior));
            }
        }
        if out.drained {
            break;
        }
        // The controller moves on once the pods asked for are gone and those waited for
        // finished.
        let asked: BTreeSet<String> = output
            .maintenances
            .iter()
            .flat_map(|o| {
                o.pods_to_request
                    .iter()
                    .map(|p| p.uid.clone())
                    .chain(waited_for(&input, o))
            })
            .collect();
        let before = remaining.len();
        remaining.retain(|p| !asked.contains(p.uid()));
        progressed |= remaining.len() != before;
        // Positions and reached targets carry over, as recorded statuses do.
        maintenances = maintenances
            .iter()
            .map(|m| {
                let mut m = (**m).clone();
                if let Some(o) = output
                    .maintenances
                    .iter()
                    .find(|o| Some(&o.name) == m.metadata.name.as_ref())
                {
                    let status = m.status.get_or_insert_with(NodeMaintenanceStatus::default);
                    status.drain_plan_position = Some(o.drain_plan_position);
                    status.node_statuses = o.node_statuses.clone();
                }
                Arc::new(m)
            })
            .collect();
        if !progressed {
            break;
        }
    }
    // Pods the rules skip, and pods the plan never reaches (another maintenance holds their node
    // back).
    let selected: BTreeSet<String> = nodes
        .iter()
        .filter(|n| selects(&mine, n))
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let mut unreached: Vec<PlannedPod> = pods
        .iter()
        .filter(|p| !p.is_terminal() && !listed.contains(p.uid()))
        .filter(|p| {
            p.spec
                .node_name
                .as_ref()
                .is_some_and(|n| selected.contains(n))
        })
        .map(|p| {
            let behavior = behaviors.get(p.uid()).copied().unwrap_or_default();
            planned_pod(p, None, behavior)
        })
        .collect();
    unreached
        .sort_by(|a, b| (&a.node, &a.namespace, &a.name).cmp(&(&b.node, &b.namespace, &b.name)));
    planned_pods.extend(unreached);
    Preview {
        plan: mine.spec.drain_plan,
        pods: planned_pods,
    }
}

/// The pods a maintenance's output waits to complete (SPEC 6.2): on each of its nodes, the
/// non-terminal `WaitCompleted` pods the node's targets match — those that hold the node, as
/// [`plan_drain`] counts them.
fn waited_for(input: &DrainInput, out: &MaintenanceOutput) -> Vec<String> {
    out.node_statuses
        .iter()
        .flat_map(|s| {
            let targets = TargetSet::from_entries(&s.drain_targets);
            input
                .pods
                .get(&s.node_ref.name)
                .into_iter()
                .flatten()
                .filter(move |p| {
                    p.behavior == DrainBehavior::WaitCompleted
                        && !p.terminal
                        && targets.matches(p.pod_type, p.priority, &p.labels)
                })
                .map(|p| p.uid.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PodRule;
    use crate::plugin::fixtures::{node, pod, t};
    use crate::plugin::maintenance::maintenance_for;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn names(p: &Preview) -> Vec<(Option<usize>, String)> {
        p.pods.iter().map(|p| (p.step, p.name.clone())).collect()
    }

    fn run(
        steps: &[i32],
        nodes: &[&str],
        pods: Vec<CachedPod>,
        existing: &[NodeMaintenance],
    ) -> Preview {
        let selected: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        let nm = maintenance_for("mine", &selected, steps, None, Stage::Drain);
        let all = [node("n1"), node("n2")];
        preview(&nm, existing, &all, &pods, &[], &Default::default(), t(0))
    }

    /// The default plan: every ordinary pod in step 0; the DaemonSet pod, which leaves through
    /// `daemonset.apps.k8s.io`, at the first DaemonSet entry (position 4), once they are gone.
    #[test]
    fn default_plan_orders_by_type_then_name() {
        let p = run(
            &[],
            &["n1"],
            vec![
                pod("b").replicaset("web-1").build(),
                pod("ds").daemonset().build(),
                pod("a").priority(5).build(),
            ],
            &[],
        );
        assert_eq!(
            names(&p),
            vec![
                (Some(0), "a".into()),
                (Some(0), "b".into()),
                (Some(4), "ds".into())
            ]
        );
        assert!(
            p.pods[2].leaves,
            "a DaemonSet pod leaves through daemonset.apps.k8s.io"
        );
        assert_eq!(p.pods[2].interceptors, ["daemonset.apps.k8s.io"]);
        assert_eq!(p.pods[2].owner.as_deref(), Some("DaemonSet/ds"));
        assert_eq!(p.pods[2].stays, None);
        assert_eq!(p.pods[1].owner.as_deref(), Some("ReplicaSet/web-1"));
        assert_eq!(p.plan.len(), 12);
    }

    /// DaemonSet and static pods: which leave (through their implicit interceptor) and which stay,
    /// with the reason, at the step the controller asks for them.
    #[test]
    fn daemonset_and_static_pods_leave_or_stay() {
        let mut with_agent = (*node("n2")).clone();
        with_agent.metadata.annotations = Some(
            [(
                crate::api::NODE_AGENT_ANNOTATION.to_string(),
                "agent-x".to_string(),
            )]
            .into(),
        );
        let nodes = [node("n1"), Arc::new(with_agent)];
        let pods = [
            pod("ds").on("n1").daemonset().build(),
            pod("ds-tolerating")
                .on("n1")
                .daemonset()
                .tolerating_maintenance()
                .build(),
            pod("etcd-n1").on("n1").mirror().build(),
            pod("etcd-n2").on("n2").mirror().build(),
        ];
        let nm = maintenance_for("mine", &["n1".into(), "n2".into()], &[], None, Stage::Drain);
        let p = preview(&nm, &[], &nodes, &pods, &[], &Default::default(), t(0));
        type Row<'a> = (&'a str, Option<usize>, bool, Option<&'a str>, Vec<&'a str>);
        let rows: Vec<Row<'_>> = p
            .pods
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.step,
                    p.leaves,
                    p.stays.as_deref(),
                    p.interceptors.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("ds", Some(4), true, None, vec!["daemonset.apps.k8s.io"]),
                (
                    "ds-tolerating",
                    Some(4),
                    false,
                    Some("its DaemonSet tolerates the evictord.dev/maintenance taint"),
                    vec!["daemonset.apps.k8s.io"]
                ),
                (
                    "etcd-n1",
                    Some(8),
                    false,
                    Some("static pod on a node without an evictord node agent"),
                    vec![]
                ),
                ("etcd-n2", Some(8), true, None, vec!["kubelet.k8s.io"]),
            ]
        );
        let to_evict = p.to_evict();
        assert_eq!(to_evict["n1"].len(), 1, "{to_evict:?}");
        assert_eq!(to_evict["n2"].len(), 1, "{to_evict:?}");
    }

    /// Priority steps ahead of the default plan: lower priorities leave first.
    #[test]
    fn priority_steps_order_pods() {
        let p = run(
            &[200, 100],
            &["n1"],
            vec![
                pod("high").priority(300).build(),
                pod("mid")
                    .priority(200)
                    .interceptors("hold.example.com")
                    .build(),
                pod("low").priority(100).build(),
            ],
            &[],
        );
        assert_eq!(
            names(&p),
            vec![
                (Some(0), "low".into()),
                (Some(1), "mid".into()),
                (Some(2), "high".into())
            ]
        );
        assert_eq!(p.pods[1].interceptors, vec!["hold.example.com"]);
        assert_eq!(p.pods[0].entry, "Default ≤ 100");
    }

    /// Pods of other nodes and terminal pods are not listed.
    #[test]
    fn only_live_pods_of_the_selected_nodes() {
        let p = run(
            &[],
            &["n1"],
            vec![
                pod("x").on("n2").build(),
                pod("done").phase("Succeeded").build(),
                pod("a").build(),
            ],
            &[],
        );
        assert_eq!(names(&p), vec![(Some(0), "a".into())]);
    }

    /// A node shared with an older maintenance at an earlier step: its targets bound ours, so the
    /// preview follows the older one's progress, as the controller will.
    #[test]
    fn shared_node_follows_the_older_maintenance() {
        let mut older = maintenance_for("older", &["n1".into()], &[100], None, Stage::Drain);
        older.spec.drain_plan = canonical_drain_plan(&older.spec.drain_plan);
        older.metadata.creation_timestamp = Some(Time(t(-100)));
        let p = run(
            &[],
            &["n1"],
            vec![
                pod("low").priority(100).build(),
                pod("mid").priority(200).build(),
            ],
            &[older],
        );
        // Both are in our step 0; "low" is asked for first because "older" limits the node.
        assert_eq!(
            names(&p),
            vec![(Some(0), "low".into()), (Some(0), "mid".into())]
        );
    }

    fn selector(k: &str, v: &str) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some([(k.to_string(), v.to_string())].into()),
            match_expressions: None,
        })
    }

    /// SPEC 6.2: a pod waited for is listed at the step the drain starts waiting for it, and the
    /// plan moves on once it finished; a skipped pod is listed last, never asked for, and holds
    /// nothing; the label or the rule (of the oldest maintenance holding the node) that decides
    /// is named; the namespaces' labels count.
    #[test]
    fn skipped_and_waited_for_pods() {
        let mut older = maintenance_for("older", &["n1".into()], &[], None, Stage::Cordon);
        older.spec.pod_rules = vec![PodRule {
            namespace_selector: selector("team", "batch"),
            pod_selector: selector("kind", "job"),
            behavior: DrainBehavior::WaitCompleted,
        }];
        older.metadata.creation_timestamp = Some(Time(t(-100)));
        let older = as_admitted(older);
        let pods = vec![
            pod("a").replicaset("web").build(),
            pod("job").namespace("batch").label("kind", "job").build(),
            pod("other-job").label("kind", "job").build(),
            pod("kept").label(crate::api::DRAIN_LABEL, "skip").build(),
            pod("ds").daemonset().build(),
        ];
        let nm = maintenance_for("mine", &["n1".into()], &[], None, Stage::Drain);
        let namespaces: NamespaceLabels = [(
            "batch".to_string(),
            [("team".to_string(), "batch".to_string())].into(),
        )]
        .into();
        let p = preview(&nm, &[older], &[node("n1")], &pods, &[], &namespaces, t(0));
        assert_eq!(
            names(&p),
            vec![
                (Some(0), "a".into()),
                (Some(0), "other-job".into()),
                (Some(0), "job".into()),
                (Some(4), "ds".into()),
                (None, "kept".into()),
            ]
        );
        let row = |name: &str| p.pods.iter().find(|x| x.name == name).unwrap();
        assert_eq!(row("job").behavior, DrainBehavior::WaitCompleted);
        assert_eq!(
            row("job").decided_by.as_deref(),
            Some("podRules[0] of maintenance older")
        );
        assert_eq!(row("other-job").behavior, DrainBehavior::Drain);
        let kept = row("kept");
        assert_eq!(
            (kept.behavior, kept.leaves, kept.entry.as_str()),
            (DrainBehavior::Skip, false, "skipped")
        );
        assert_eq!(
            kept.stays.as_deref(),
            Some("skipped by label evictord.dev/drain=skip")
        );
        let to_evict = p.to_evict();
        let evicted: Vec<&String> = to_evict["n1"].iter().collect();
        assert_eq!(evicted, ["ns/a", "ns/ds", "ns/other-job"]);
        let json = serde_json::to_value(kept).unwrap();
        assert_eq!(json["behavior"], "Skip");
        assert_eq!(json["decidedBy"], "label evictord.dev/drain=skip");
    }

    /// The facts `kubectl drain` checks: no controller (not a mirror pod), an emptyDir volume.
    #[test]
    fn unmanaged_and_local_data_pods_are_marked() {
        let p = run(
            &[],
            &["n1"],
            vec![
                pod("bare").build(),
                pod("scratch").replicaset("web").empty_dir().build(),
                pod("m").mirror().build(),
            ],
            &[],
        );
        let marks: Vec<(&str, bool, bool)> = p
            .pods
            .iter()
            .map(|p| (p.name.as_str(), p.unmanaged, p.local_data))
            .collect();
        assert_eq!(
            marks,
            vec![
                ("bare", true, false),
                ("scratch", false, true),
                ("m", false, false)
            ]
        );
        let json = serde_json::to_value(&p.pods[0]).unwrap();
        assert_eq!(json["unmanaged"], true);
        assert!(json.get("localData").is_none(), "{json}");
    }

    #[test]
    fn to_evict_lists_evictable_pods_per_node() {
        let p = run(
            &[],
            &["n1", "n2"],
            vec![
                pod("a").build(),
                pod("b").on("n2").build(),
                pod("m").mirror().build(),
            ],
            &[],
        );
        let t = p.to_evict();
        assert_eq!(t["n1"], BTreeSet::from(["ns/a".to_string()]));
        assert_eq!(t["n2"], BTreeSet::from(["ns/b".to_string()]));
    }
}
