//! PodDisruptionBudgets as evictord reads them: [`Budget`] (the fields that say whether a pod may
//! be disrupted now), [`allowance`] (what the budgets selecting a pod say, pure), and
//! [`Budgets`], a watch cache of every budget in `policy/v1` where served, else
//! `policy/v1beta1` (Kubernetes before 1.21), chosen from discovery as kubectl chooses.
//!
//! The eviction request controller reads it to retry a refused eviction as soon as the budgets
//! allow one instead of waiting out its exponential backoff, and to be woken when they do.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, LabelSelector};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde::Serialize;
use tokio::sync::{broadcast, watch};
use tracing::{debug, info, warn};

use super::CachedPod;
use super::cache::subscribed;
use crate::selector::label_selector_matches;

/// A PodDisruptionBudget, reduced to what decides whether a pod may be disrupted now.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.selector` (`None` selects nothing, as a null selector in policy/v1 and an empty one
    /// in policy/v1beta1).
    #[serde(skip)]
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed` (0 when the disruption controller has not written it).
    pub disruptions_allowed: i32,
    /// The disruption controller has observed the budget's latest generation
    /// (`status.observedGeneration` ≥ `metadata.generation`): until then kube-apiserver refuses
    /// every eviction it covers.
    #[serde(skip)]
    pub observed: bool,
}

impl Budget {
    /// Reads the fields from a PodDisruptionBudget of `policy/{version}` as JSON.
    pub fn from_json(namespace: &str, version: &str, v: &serde_json::Value) -> Self {
        let int = |v: &serde_json::Value| v.as_i64().and_then(|n| i32::try_from(n).ok());
        let selector = serde_json::from_value::<LabelSelector>(v["spec"]["selector"].clone())
            .ok()
            // policy/v1beta1: an empty selector selects no pod (policy/v1: every pod).
            .filter(|s| version != "v1beta1" || *s != LabelSelector::default());
        let generation = v["metadata"]["generation"].as_i64().unwrap_or(0);
        Budget {
            namespace: namespace.to_string(),
            name: v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            selector,
            disruptions_allowed: int(&v["status"]["disruptionsAllowed"]).unwrap_or(0),
            observed: v["status"]["observedGeneration"]
                .as_i64()
                .is_some_and(|o| o >= generation),
        }
    }

    /// True when the budget selects the pod.
    pub fn selects(&self, pod: &CachedPod) -> bool {
        self.namespace == pod.namespace()
            && self
                .selector
                .as_ref()
                .is_some_and(|s| label_selector_matches(s, &pod.labels()))
    }

    /// True when the budget lets one more pod it selects go now.
    pub fn allows(&self) -> bool {
        self.observed && self.disruptions_allowed > 0
    }
}

/// The budgets that refuse any disruption of the pod right now.
pub fn blocking_budgets<'a>(pod: &CachedPod, budgets: &'a [Budget]) -> Vec<&'a Budget> {
    budgets
        .iter()
        .filter(|b| b.disruptions_allowed <= 0 && b.selects(pod))
        .collect()
}

/// What the PodDisruptionBudgets selecting a pod say about evicting it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowance {
    /// Not known (the cache has not synced).
    Unknown,
    /// No budget selects the pod: whatever refused an eviction was not a budget.
    NoBudget,
    /// A budget selecting the pod allows no disruption now.
    Refuses,
    /// Every budget selecting the pod allows a disruption now.
    Allows,
}

/// [`Allowance`] of `pod` under `budgets` (those of its namespace, or more).
pub fn allowance(pod: &CachedPod, budgets: &[Budget]) -> Allowance {
    let mut selecting = budgets.iter().filter(|b| b.selects(pod)).peekable();
    if selecting.peek().is_none() {
        return Allowance::NoBudget;
    }
    if selecting.all(Budget::allows) {
        Allowance::Allows
    } else {
        Allowance::Refuses
    }
}

/// The `policy` version to read PodDisruptionBudgets in, from the list of API groups: `v1` where
/// served (Kubernetes 1.21 and later), else `v1beta1`; `None` when neither is.
pub fn budget_version_in(groups: &APIGroupList) -> Option<&'static str> {
    let group = groups.groups.iter().find(|g| g.name == "policy")?;
    ["v1", "v1beta1"]
        .into_iter()
        .find(|wanted| group.versions.iter().any(|v| v.version == *wanted))
}

/// The PodDisruptionBudget resource in `policy/{version}`.
pub fn budget_resource(version: &str) -> ApiResource {
    ApiResource {
        group: "policy".into(),
        version: version.into(),
        api_version: format!("policy/{version}"),
        kind: "PodDisruptionBudget".into(),
        plural: "poddisruptionbudgets".into(),
    }
}

type Key = (String, String);

/// A watch cache of every PodDisruptionBudget, and a stream of those that change.
pub struct Budgets {
    budgets: RwLock<HashMap<Key, Budget>>,
    changes: broadcast::Sender<Budget>,
    synced: watch::Sender<bool>,
}

impl Budgets {
    /// Starts the watch (spawned on the current runtime: discovery first, then the watch, retried
    /// with backoff) and returns the cache; it fills asynchronously.
    pub fn start(client: &Client) -> Arc<Self> {
        let budgets = Arc::new(Self {
            budgets: RwLock::new(HashMap::new()),
            changes: broadcast::channel(1024).0,
            synced: watch::channel(false).0,
        });
        let (client, cache) = (client.clone(), budgets.clone());
        tokio::spawn(async move {
            let version = match client.list_api_groups().await {
                Ok(groups) => budget_version_in(&groups),
                Err(e) => {
                    warn!(error = %e, "API discovery failed; reading PodDisruptionBudgets in policy/v1");
                    Some("v1")
                }
            };
            let Some(version) = version else {
                info!("the server serves no PodDisruptionBudgets");
                cache.synced.send_replace(true);
                return;
            };
            cache.watch(client, version).await;
        });
        budgets
    }

    async fn watch(&self, client: Client, version: &'static str) {
        let api: Api<DynamicObject> = Api::all_with(client, &budget_resource(version));
        let stream = watcher(api, watcher::Config::default().any_semantic()).default_backoff();
        futures::pin_mut!(stream);
        let mut relisted: HashMap<Key, Budget> = HashMap::new();
        let read = |o: &DynamicObject| {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let b = Budget::from_json(&ns, version, &serde_json::to_value(o).unwrap_or_default());
            ((b.namespace.clone(), b.name.clone()), b)
        };
        while let Some(event) = stream.next().await {
            let mut changed = Vec::new();
            match event {
                Ok(watcher::Event::Init) => relisted.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    let (k, b) = read(&o);
                    relisted.insert(k, b);
                }
                Ok(watcher::Event::InitDone) => {
                    let mut all = self.budgets.write().unwrap_or_else(|e| e.into_inner());
                    *all = std::mem::take(&mut relisted);
                    changed.extend(all.values().cloned());
                    drop(all);
                    debug!(version, "PodDisruptionBudget cache synced");
                    self.synced.send_replace(true);
                }
                Ok(watcher::Event::Apply(o)) => {
                    let (k, b) = read(&o);
                    let mut all = self.budgets.write().unwrap_or_else(|e| e.into_inner());
                    all.insert(k, b.clone());
                    changed.push(b);
                }
                Ok(watcher::Event::Delete(o)) => {
                    let (k, b) = read(&o);
                    let mut all = self.budgets.write().unwrap_or_else(|e| e.into_inner());
                    all.remove(&k);
                    changed.push(b);
                }
                Err(e) => {
                    warn!(error = %e, "PodDisruptionBudget watch error; retrying with backoff")
                }
            }
            for b in changed {
                // No receivers (no controller running here) is fine.
                drop(self.changes.send(b));
            }
        }
    }

    /// The budgets of namespace `ns`; `None` until the cache has its first list.
    pub fn in_namespace(&self, ns: &str) -> Option<Vec<Budget>> {
        if !*self.synced.borrow() {
            return None;
        }
        let all = self.budgets.read().unwrap_or_else(|e| e.into_inner());
        Some(
            all.values()
                .filter(|b| b.namespace == ns)
                .cloned()
                .collect(),
        )
    }

    /// What the budgets selecting `pod` say now.
    pub fn allowance(&self, pod: &CachedPod) -> Allowance {
        match self.in_namespace(pod.namespace()) {
            Some(budgets) => allowance(pod, &budgets),
            None => Allowance::Unknown,
        }
    }

    /// The budgets that change from now on (created, modified, deleted: as last seen; after
    /// each full list, every budget).
    pub fn changes(&self) -> impl Stream<Item = Budget> + Send + use<> {
        subscribed(&self.changes, "PodDisruptionBudget".into())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    fn pod(ns: &str, labels: &[(&str, &str)]) -> CachedPod {
        let mut p: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns,
                "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        }))
        .unwrap();
        p.trim_in_place();
        p
    }

    fn budget(
        selector: serde_json::Value,
        allowed: i64,
        generation: i64,
        observed: i64,
    ) -> serde_json::Value {
        json!({
            "metadata": {"name": "b", "namespace": "ns", "generation": generation},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed},
        })
    }

    #[rstest]
    #[case::v1_matching(budget(json!({"matchLabels": {"app": "web"}}), 1, 1, 1), "v1", true, true)]
    #[case::v1_other_labels(budget(json!({"matchLabels": {"app": "db"}}), 1, 1, 1), "v1", false, true)]
    #[case::v1_empty_selects_all(budget(json!({}), 1, 1, 1), "v1", true, true)]
    #[case::v1beta1_empty_selects_none(budget(json!({}), 1, 1, 1), "v1beta1", false, true)]
    #[case::v1beta1_matching(budget(json!({"matchLabels": {"app": "web"}}), 1, 1, 1), "v1beta1", true, true)]
    #[case::null_selects_none(budget(json!(null), 1, 1, 1), "v1", false, true)]
    #[case::none_allowed(budget(json!({}), 0, 1, 1), "v1", true, false)]
    #[case::not_observed(budget(json!({}), 1, 2, 1), "v1", true, false)]
    #[case::no_status(json!({"metadata": {"name": "b", "generation": 1}, "spec": {"selector": {}}}), "v1", true, false)]
    fn budget_rows(
        #[case] v: serde_json::Value,
        #[case] version: &str,
        #[case] selects: bool,
        #[case] allows: bool,
    ) {
        let b = Budget::from_json("ns", version, &v);
        assert_eq!(b.selects(&pod("ns", &[("app", "web")])), selects);
        assert_eq!(b.allows(), allows);
        assert!(
            !b.selects(&pod("other", &[("app", "web")])),
            "another namespace"
        );
    }

    fn b(app: &str, allowed: i32) -> Budget {
        Budget {
            namespace: "ns".into(),
            name: app.into(),
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            disruptions_allowed: allowed,
            observed: true,
        }
    }

    #[rstest]
    #[case::none(vec![], Allowance::NoBudget)]
    #[case::other_pods_only(vec![b("db", 0)], Allowance::NoBudget)]
    #[case::allows(vec![b("web", 1), b("db", 0)], Allowance::Allows)]
    #[case::refuses(vec![b("web", 0)], Allowance::Refuses)]
    #[case::one_of_two_refuses(vec![b("web", 1), Budget { name: "web2".into(), ..b("web", 0) }], Allowance::Refuses)]
    fn allowance_rows(#[case] budgets: Vec<Budget>, #[case] expected: Allowance) {
        assert_eq!(allowance(&pod("ns", &[("app", "web")]), &budgets), expected);
    }

    /// Recorded and written discovery documents (`tests/data/discovery/README.md`).
    #[test]
    fn version_from_discovery_of_each_release() {
        for (server, text, expected) in [
            (
                "1.20.2 (recorded)",
                include_str!("../../tests/data/discovery/apis-policy-1.20.2.json"),
                Some("v1beta1"),
            ),
            (
                "1.21",
                include_str!("../../tests/data/discovery/apis-policy-1.21.json"),
                Some("v1"),
            ),
            (
                "1.25",
                include_str!("../../tests/data/discovery/apis-policy-1.25.json"),
                Some("v1"),
            ),
        ] {
            let group: APIGroup = serde_json::from_str(text).unwrap();
            let list = APIGroupList {
                groups: vec![group],
            };
            assert_eq!(budget_version_in(&list), expected, "{server}");
        }
        assert_eq!(budget_version_in(&APIGroupList { groups: vec![] }), None);
    }
}
