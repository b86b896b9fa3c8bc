//! What evictord left behind on the pool at the soak's end ([`leftovers`]).

use evictord::api::{
    EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION, EXCLUDE_FROM_EXTERNAL_LB_LABEL, MAINTENANCE_TAINT,
    MAINTENANCE_TAINT_BEFORE_ANNOTATION, NodeMaintenance, UNSCHEDULABLE_BEFORE_ANNOTATION,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, Client};

use super::ROUND_LABEL;

use crate::support::pool::Pool;

/// What evictord left behind on the pool's nodes, Deployments and autoscalers (empty: nothing):
/// a node cordoned or carrying the maintenance taint, the exclusion label or one of the
/// annotations that remember a node's state; a Deployment's surge record; an autoscaler's raised
/// floor (its record, or `minReplicas` above the workload's).
pub async fn leftovers(client: &Client, pool: &Pool) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            crate::support::pool::POOL_LABEL,
            pool.id
        )))
        .await?;
    for n in nodes.items {
        let name = n.metadata.name.clone().unwrap_or_default();
        let spec = n.spec.clone().unwrap_or_default();
        if spec.unschedulable == Some(true) {
            found.push(format!("node {name} cordoned"));
        }
        if spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == MAINTENANCE_TAINT)
        {
            found.push(format!("node {name} tainted {MAINTENANCE_TAINT}"));
        }
        if n.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(EXCLUDE_FROM_EXTERNAL_LB_LABEL))
        {
            found.push(format!(
                "node {name} labelled {EXCLUDE_FROM_EXTERNAL_LB_LABEL}"
            ));
        }
        for a in [
            UNSCHEDULABLE_BEFORE_ANNOTATION,
            MAINTENANCE_TAINT_BEFORE_ANNOTATION,
            EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION,
        ] {
            if n.metadata
                .annotations
                .as_ref()
                .is_some_and(|m| m.contains_key(a))
            {
                found.push(format!("node {name} annotated {a}"));
            }
        }
    }
    for d in Api::<Deployment>::namespaced(client.clone(), &pool.ns)
        .list(&ListParams::default())
        .await?
    {
        if d.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(evictord::interceptor::deployment::SURGE_ANNOTATION))
        {
            found.push(format!(
                "Deployment {:?} keeps its surge record",
                d.metadata.name
            ));
        }
    }
    for h in Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &pool.ns)
        .list(&ListParams::default())
        .await?
    {
        let row = pool
            .workloads
            .iter()
            .find(|w| w.name == h.spec.scale_target_ref.name);
        if h.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(evictord::interceptor::hpa::RECORD_ANNOTATION))
        {
            found.push(format!(
                "HorizontalPodAutoscaler {:?} keeps its raised-floor record",
                h.metadata.name
            ));
        }
        if row.is_some_and(|w| h.spec.min_replicas != Some(w.row.replicas)) {
            found.push(format!(
                "HorizontalPodAutoscaler {:?} minReplicas {:?}",
                h.metadata.name, h.spec.min_replicas
            ));
        }
    }
    let nms = Api::<NodeMaintenance>::all(client.clone())
        .list(&ListParams::default().labels(ROUND_LABEL))
        .await?;
    for nm in nms.items {
        found.push(format!(
            "NodeMaintenance {:?} still present (stage {:?})",
            nm.metadata.name, nm.spec.stage
        ));
    }
    Ok(found)
}
