//! Test fixtures: builders for NodeMaintenances, drain plan entries, nodes and admission calls,
//! and [`TestView`], a cluster view whose authorizer answers per node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use kube::core::admission::Operation;

use super::default_drain_plan;
use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::{
    CONTROL_PLANE_LABEL, DrainPlanEntry, EvictionRequest, NodeMaintenance, NodeMaintenanceSpec,
    PodType, Stage,
};
use crate::cluster::{AccessCheck, Authorization, CachedPod, ClusterView, Lookup};

/// A valid maintenance as it looks after mutation: selects node `a`, Idle, the default plan.
pub fn nm() -> NodeMaintenance {
    NodeMaintenance::new(
        "maintenance-a",
        NodeMaintenanceSpec {
            node_selector: NodeSelector::default(),
            stage: Some(Stage::Idle),
            drain_plan: default_drain_plan(),
            reason: Some("OS upgrade".into()),
            ..Default::default()
        },
    )
    .select_nodes(&["a"])
}

/// Builder methods on a NodeMaintenance.
pub trait NmBuilder: Sized {
    /// Replaces the selector with one `matchFields metadata.name In [n]` term per node.
    fn select_nodes(self, names: &[&str]) -> Self;
    /// Replaces the selector with one term of one label expression.
    fn select_expr(self, key: &str, operator: &str, values: &[&str]) -> Self;
    /// Sets the stage.
    fn stage(self, stage: Stage) -> Self;
    /// Removes the stage.
    fn no_stage(self) -> Self;
    /// Sets the plan as given (no defaults, no sorting).
    fn plan(self, plan: &[DrainPlanEntry]) -> Self;
    /// Sets the reason.
    fn reason(self, reason: &str) -> Self;
    /// Adds a label (a metadata-only change).
    fn labelled(self) -> Self;
    /// Marks the object as being deleted.
    fn deleting(self) -> Self;
    /// Sets `spec.drainDeadlineSeconds`.
    fn deadline(self, seconds: i64) -> Self;
    /// Adds a pod rule selecting pods by one label.
    fn pod_rule(self, label: Option<(&str, &str)>, behavior: crate::api::DrainBehavior) -> Self;
}

impl NmBuilder for NodeMaintenance {
    fn select_nodes(mut self, names: &[&str]) -> Self {
        self.spec.node_selector = NodeSelector {
            node_selector_terms: names
                .iter()
                .map(|n| NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![n.to_string()]),
                    }]),
                })
                .collect(),
        };
        self
    }

    fn select_expr(mut self, key: &str, operator: &str, values: &[&str]) -> Self {
        self.spec.node_selector = NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: operator.into(),
                    values: (!values.is_empty())
                        .then(|| values.iter().map(|v| v.to_string()).collect()),
                }]),
                match_fields: None,
            }],
        };
        self
    }

    fn stage(mut self, stage: Stage) -> Self {
        self.spec.stage = Some(stage);
        self
    }

    fn no_stage(mut self) -> Self {
        self.spec.stage = None;
        self
    }

    fn plan(mut self, plan: &[DrainPlanEntry]) -> Self {
        self.spec.drain_plan = plan.to_vec();
        self
    }

    fn reason(mut self, reason: &str) -> Self {
        self.spec.reason = Some(reason.into());
        self
    }

    fn labelled(mut self) -> Self {
        self.metadata.labels = Some(pairs(&[("ticket", "ops-42")]));
        self
    }

    fn deleting(mut self) -> Self {
        self.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        self
    }

    fn deadline(mut self, seconds: i64) -> Self {
        self.spec.drain_deadline_seconds = Some(seconds);
        self
    }

    fn pod_rule(
        mut self,
        label: Option<(&str, &str)>,
        behavior: crate::api::DrainBehavior,
    ) -> Self {
        self.spec.pod_rules.push(crate::api::PodRule {
            namespace_selector: None,
            pod_selector: label.map(|(k, v)| LabelSelector {
                match_labels: Some([(k.to_string(), v.to_string())].into()),
                match_expressions: None,
            }),
            behavior,
        });
        self
    }
}

/// A selector-less drain plan entry.
pub fn entry(pod_type: PodType, pod_priority: i32) -> DrainPlanEntry {
    DrainPlanEntry {
        pod_priority,
        pod_type,
        pod_selector: None,
    }
}

/// Builder methods on a drain plan entry.
pub trait EntryBuilder {
    /// Adds a `matchLabels` pod selector.
    fn selector(self, labels: &[(&str, &str)]) -> Self;
    /// Adds a malformed pod selector (operator `Gt`, which label selectors do not have).
    fn bad_selector(self) -> Self;
}

impl EntryBuilder for DrainPlanEntry {
    fn selector(mut self, labels: &[(&str, &str)]) -> Self {
        self.pod_selector = Some(LabelSelector {
            match_labels: Some(pairs(labels)),
            match_expressions: None,
        });
        self
    }

    fn bad_selector(mut self) -> Self {
        self.pod_selector = Some(LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "Gt".into(),
                values: Some(vec!["1".into()]),
            }]),
        });
        self
    }
}

/// A node without labels.
pub fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

/// Builder methods on a node.
pub trait NodeBuilder {
    /// Adds labels.
    fn labels(self, labels: &[(&str, &str)]) -> Self;
    /// Marks the node as a control-plane node.
    fn control_plane(self) -> Self;
}

impl NodeBuilder for Node {
    fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(pairs(labels));
        self
    }

    fn control_plane(self) -> Self {
        self.labels(&[(CONTROL_PLANE_LABEL, "")])
    }
}

fn pairs(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A cluster view for NodeMaintenance reviews: nodes (or unknown) and an authorizer that answers
/// the cluster-wide check with `cluster_wide` and a per-node check with Allowed exactly for the
/// nodes in `deletable`. It records every check asked.
pub struct TestView {
    nodes: Option<Vec<Arc<Node>>>,
    cluster_wide: Authorization,
    deletable: Vec<String>,
    /// The access checks asked, in order.
    pub asked: Mutex<Vec<AccessCheck<'static>>>,
}

/// A view of these nodes in which the user may delete every node.
pub fn cluster(nodes: Vec<Node>) -> TestView {
    TestView {
        nodes: Some(nodes.into_iter().map(Arc::new).collect()),
        cluster_wide: Authorization::Allowed,
        deletable: Vec::new(),
        asked: Mutex::new(Vec::new()),
    }
}

/// A view that knows no nodes and skips authorization (offline).
pub fn offline() -> TestView {
    TestView {
        nodes: None,
        cluster_wide: Authorization::Skipped("authorization is not checked offline".into()),
        deletable: Vec::new(),
        asked: Mutex::new(Vec::new()),
    }
}

impl TestView {
    /// The cluster-wide check answers this.
    pub fn cluster_wide(mut self, answer: Authorization) -> Self {
        self.cluster_wide = answer;
        self
    }

    /// The cluster-wide check is denied; per node, only these nodes may be deleted.
    pub fn may_delete_only(mut self, names: &[&str]) -> Self {
        self.cluster_wide =
            Authorization::Denied("cannot delete nodes at the cluster scope".into());
        self.deletable = names.iter().map(|n| n.to_string()).collect();
        self
    }

    /// Names of the nodes asked about one by one.
    pub fn asked_nodes(&self) -> Vec<String> {
        self.asked
            .lock()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.name.as_deref().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl ClusterView for TestView {
    fn pod(&self, _namespace: &str, _name: &str) -> Lookup<Arc<CachedPod>> {
        Lookup::Unknown
    }

    fn nodes(&self) -> Lookup<Vec<Arc<Node>>> {
        self.nodes.clone().map_or(Lookup::Unknown, Lookup::Found)
    }

    fn node_maintenances(&self) -> Lookup<Vec<Arc<NodeMaintenance>>> {
        Lookup::Unknown
    }

    fn eviction_request(&self, _namespace: &str, _name: &str) -> Lookup<Arc<EvictionRequest>> {
        Lookup::Unknown
    }

    fn authorize(&self, check: &AccessCheck<'_>) -> Authorization {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(check.clone().into_owned());
        }
        match &check.name {
            None => self.cluster_wide.clone(),
            Some(name) if self.deletable.iter().any(|d| d == name) => Authorization::Allowed,
            Some(name) => Authorization::Denied(format!("cannot delete node {name}")),
        }
    }
}

/// One admission call on a NodeMaintenance, owning its objects.
pub struct Call {
    operation: Operation,
    sub_resource: Option<&'static str>,
    old: Option<NodeMaintenance>,
    new: Option<NodeMaintenance>,
    user: UserInfo,
}

/// A CREATE by alice.
pub fn create(new: NodeMaintenance) -> Call {
    Call {
        operation: Operation::Create,
        sub_resource: None,
        old: None,
        new: Some(new),
        user: alice(),
    }
}

/// An UPDATE by alice.
pub fn update(old: NodeMaintenance, new: NodeMaintenance) -> Call {
    Call {
        operation: Operation::Update,
        sub_resource: None,
        old: Some(old),
        new: Some(new),
        user: alice(),
    }
}

/// A DELETE by alice.
pub fn delete(old: NodeMaintenance) -> Call {
    Call {
        operation: Operation::Delete,
        sub_resource: None,
        old: Some(old),
        new: None,
        user: alice(),
    }
}

fn alice() -> UserInfo {
    UserInfo {
        username: Some("alice".into()),
        ..UserInfo::default()
    }
}

impl Call {
    /// Makes it a write of the `status` sub-resource.
    pub fn status(mut self) -> Self {
        self.sub_resource = Some("status");
        self
    }

    /// The request as a review sees it.
    pub fn request(&self) -> ReviewRequest<'_, NodeMaintenance> {
        ReviewRequest {
            operation: self.operation.clone(),
            sub_resource: self.sub_resource,
            namespace: None,
            name: "maintenance-a",
            object: self.new.as_ref(),
            old_object: self.old.as_ref(),
            user: &self.user,
            dry_run: false,
            now: Timestamp::UNIX_EPOCH,
        }
    }

    /// The validating review against this view.
    pub fn review(&self, view: &dyn ClusterView) -> Verdict {
        super::review_node_maintenance(&self.request(), view, &Settings::default())
    }

    /// The mutating review.
    pub fn mutate(&self) -> Verdict {
        super::mutate_node_maintenance(&self.request())
    }
}
