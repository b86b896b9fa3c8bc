//! The drain preview: which pods a maintenance of these nodes would ask to leave, in which plan
//! step, without writing anything.
//!
//! It plays the controller forward with the controller's own code: the maintenance `drain` would
//! create ([`maintenance_for`]) is added to the maintenances already draining, their input is
//! gathered by [`drain_input`] and resolved by [`plan_drain`], exactly as the node maintenance
//! controller does; the pods the result asks for are taken as gone (the controller only moves on
//! once they are), and the resolution runs again, until the maintenance is drained or stops
//! moving. The step of a pod is the plan position at which the controller first asks for it.
//! Pods of one step are asked for together (the controller creates their requests at once).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use crate::admission::node_maintenance::canonical_drain_plan;
use crate::api::{
    DrainPlanEntry, EvictionRequest, NodeMaintenance, NodeMaintenanceSpec, NodeMaintenanceStatus,
    PodType, Registration, Stage,
};
use crate::cluster::CachedPod;
use crate::controller::eviction_request::{implicit_interceptors, target_interceptors};
use crate::controller::node_maintenance::gather::{
    as_admitted, drain_input, has_node_agent, selects,
};
use crate::drain::{DrainPod, Leaving, plan_drain};

/// The maintenance `kubectl evictord drain` creates: these nodes by name (one `matchFields` term
/// each, the form admission rule N1 accepts), Default entries at `priority_steps` ahead of the
/// default plan, in `stage`.
pub fn maintenance_for(
    name: &str,
    nodes: &[String],
    priority_steps: &[i32],
    reason: Option<&str>,
    stage: Stage,
) -> NodeMaintenance {
    let terms = nodes
        .iter()
        .map(|n| NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![n.clone()]),
            }]),
            match_expressions: None,
        })
        .collect();
    let mut steps: Vec<i32> = priority_steps.to_vec();
    steps.sort_unstable();
    steps.dedup();
    let drain_plan = steps
        .into_iter()
        .map(|pod_priority| DrainPlanEntry {
            pod_priority,
            pod_type: PodType::Default,
            pod_selector: None,
        })
        .collect();
    NodeMaintenance::new(
        name,
        NodeMaintenanceSpec {
            node_selector: NodeSelector {
                node_selector_terms: terms,
            },
            stage: Some(stage),
            drain_plan,
            reason: reason.map(str::to_string),
            ..Default::default()
        },
    )
}

/// The name `drain` gives a maintenance: `drain-<first node>[-and-<n>]-<unix seconds>`, cut to
/// fit a name (253 characters).
pub fn maintenance_name(nodes: &[String], now: Timestamp) -> String {
    let first = nodes.first().map_or("nodes", String::as_str);
    let more = match nodes.len() {
        0 | 1 => String::new(),
        n => format!("-and-{}", n - 1),
    };
    let tail = format!("{more}-{}", now.as_second());
    let room = 253 - "drain-".len() - tail.len();
    let head: String = first.chars().take(room).collect();
    format!("drain-{}{tail}", head.trim_end_matches(['-', '.']))
}

/// One pod of the preview.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPod {
    /// The plan position at which the controller asks for the pod (`None`: never, because another
    /// maintenance holds the node back).
    pub step: Option<usize>,
    /// `Type ≤ priority` of that plan entry, for people.
    pub entry: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Node.
    pub node: String,
    /// Priority.
    pub priority: i32,
    /// Default, DaemonSet or Static.
    pub pod_type: PodType,
    /// `Kind/name` of the controller owner, if any.
    pub owner: Option<String>,
    /// The interceptors its EvictionRequest takes turns with, in order: the pod's own, then the
    /// implicit `daemonset.apps.k8s.io` or `kubelet.k8s.io` (the default one, last for every pod,
    /// is not listed).
    pub interceptors: Vec<String>,
    /// True when the pod leaves the node; false for DaemonSet and static pods that nothing will
    /// remove: they get a request but stay, and do not hold the drain up.
    pub leaves: bool,
    /// Why the pod stays, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stays: Option<String>,
    /// The HorizontalPodAutoscaler whose floor is raised before the pod leaves, with its target
    /// (`web-hpa (Deployment web)`; [`name_autoscalers`](super::autoscalers::name_autoscalers)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<String>,
    /// Its interceptors that no `EvictionInterceptor` registers (SPEC 5.5): each may hold the
    /// pod up to its heartbeat deadline (or the grace, under `enforce`). See
    /// [`Preview::mark_unregistered`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unregistered: Vec<String>,
}

/// The plugin cannot read evictord's flags: it assumes `daemonset.apps.k8s.io` runs, as it does
/// by default (`--daemonset-interceptor`, chart value `controller.daemonsetInterceptor`).
pub const ASSUMED_DAEMONSET_INTERCEPTOR: bool = true;

/// The drain preview.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// The drain plan as admission completes it.
    pub plan: Vec<DrainPlanEntry>,
    /// Every pod on the nodes, in the order the controller asks for them.
    pub pods: Vec<PlannedPod>,
}

impl Preview {
    /// Names, on each pod, the interceptors `registration` says no EvictionInterceptor registers.
    pub fn mark_unregistered(&mut self, registration: impl Fn(&str) -> Registration) {
        for p in &mut self.pods {
            p.unregistered = p
                .interceptors
                .iter()
                .filter(|n| registration(n) == Registration::NotRegistered)
                .cloned()
                .collect();
        }
    }

    /// The pods of each node that leave: what a drain has to remove.
    pub fn to_evict(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in self.pods.iter().filter(|p| p.leaves) {
            out.entry(p.node.clone())
                .or_default()
                .insert(format!("{}/{}", p.namespace, p.name));
        }
        out
    }
}

/// `Default ≤ 1000000000`, with ` (podSelector)` when the entry has one.
pub fn entry_label(e: &DrainPlanEntry) -> String {
    let selector = if e.pod_selector.is_some() {
        " (podSelector)"
    } else {
        ""
    };
    format!("{} ≤ {}{selector}", e.pod_type, e.pod_priority)
}

/// `Kind/name` of the pod's controller owner.
pub fn owner_of(pod: &CachedPod) -> Option<String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", o.kind, o.name))
}

/// The preview of draining with `planned` (e.g. from [`maintenance_for`]) while `existing`
/// maintenances are as they are. `nodes` are the cluster's nodes (at least those selected),
/// `pods` the pods on the selected nodes, `requests` the EvictionRequests that exist.
pub fn preview(
    planned: &NodeMaintenance,
    existing: &[NodeMaintenance],
    nodes: &[Arc<Node>],
    pods: &[CachedPod],
    requests: &[EvictionRequest],
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
    let planned_pod = |pod: &CachedPod, step: Option<usize>, plan: &[DrainPlanEntry]| {
        let node_agent = pod
            .spec
            .node_name
            .as_deref()
            .is_some_and(|n| with_agent.contains(n));
        let request = request_of.get(&(pod.namespace(), pod.uid())).copied();
        planned_pod(pod, step, plan, request, node_agent)
    };
    let mut remaining: Vec<Arc<CachedPod>> = pods.iter().cloned().map(Arc::new).collect();
    let by_uid: BTreeMap<&str, &CachedPod> = pods.iter().map(|p| (p.uid(), p)).collect();
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut planned_pods = Vec::new();
    // Each round either lists a pod or advances a position; both are bounded.
    let bound = mine.spec.drain_plan.len() + pods.len() + 2;
    for _ in 0..bound {
        let input = drain_input(
            &maintenances,
            nodes,
            &remaining,
            |ns, uid| request_of.get(&(ns, uid)).copied(),
            ASSUMED_DAEMONSET_INTERCEPTOR,
        );
        let output = plan_drain(&input);
        let Some(out) = output.maintenances.iter().find(|o| o.name == name) else {
            break;
        };
        let step = usize::try_from(out.drain_plan_position).unwrap_or(0);
        let mut progressed = false;
        for p in &out.pods_to_request {
            if !listed.insert(p.uid.clone()) {
                continue;
            }
            if let Some(pod) = by_uid.get(p.uid.as_str()) {
                progressed = true;
                planned_pods.push(planned_pod(pod, Some(step), &mine.spec.drain_plan));
            }
        }
        if out.drained {
            break;
        }
        // The controller moves on once the pods asked for are gone.
        let asked: BTreeSet<&str> = output
            .maintenances
            .iter()
            .flat_map(|o| o.pods_to_request.iter().map(|p| p.uid.as_str()))
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
    // Pods the plan never reaches (another maintenance holds their node back).
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
        .map(|p| planned_pod(p, None, &mine.spec.drain_plan))
        .collect();
    unreached
        .sort_by(|a, b| (&a.node, &a.namespace, &a.name).cmp(&(&b.node, &b.namespace, &b.name)));
    planned_pods.extend(unreached);
    Preview {
        plan: mine.spec.drain_plan,
        pods: planned_pods,
    }
}

fn planned_pod(
    pod: &CachedPod,
    step: Option<usize>,
    plan: &[DrainPlanEntry],
    request: Option<&EvictionRequest>,
    node_agent: bool,
) -> PlannedPod {
    let leaving = Leaving {
        daemonset_interceptor: ASSUMED_DAEMONSET_INTERCEPTOR,
        node_agent,
    };
    let drain = DrainPod::from_cached(pod, request, leaving);
    let implicit = implicit_interceptors(pod, node_agent, ASSUMED_DAEMONSET_INTERCEPTOR);
    let (mut interceptors, _) = target_interceptors(pod.interceptors(), &implicit, &[]);
    interceptors.pop(); // the default one, last for every pod
    let leaves = drain.leaves();
    PlannedPod {
        step,
        entry: step
            .and_then(|k| plan.get(k))
            .map(entry_label)
            .unwrap_or_else(|| "held by another maintenance".to_string()),
        namespace: drain.namespace,
        name: drain.name,
        node: pod.spec.node_name.clone().unwrap_or_default(),
        priority: drain.priority,
        pod_type: drain.pod_type,
        owner: owner_of(pod),
        interceptors,
        leaves,
        stays: drain.stays.map(|s| s.reason().to_string()),
        autoscaler: None,
        unregistered: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::fixtures::{node, pod, t};

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
        preview(&nm, existing, &all, &pods, &[], t(0))
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
        let p = preview(&nm, &[], &nodes, &pods, &[], t(0));
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

    #[rstest::rstest]
    #[case(&["n1"], "drain-n1-1800000000")]
    #[case(&["n1", "n2", "n3"], "drain-n1-and-2-1800000000")]
    fn maintenance_names(#[case] nodes: &[&str], #[case] name: &str) {
        let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        assert_eq!(maintenance_name(&nodes, t(0)), name);
        let long = vec!["x".repeat(300)];
        assert_eq!(maintenance_name(&long, t(0)).len(), 253);
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
