//! PodDisruptionBudgets, pure: [`Budget`] (the fields that say whether a pod may be disrupted
//! now), [`allowance`] and [`blocking_budgets`] (what the budgets selecting a pod say), and which
//! `policy` version a server serves them in ([`budget_version_in`]).
//!
//! Shared by the controllers' watch cache of budgets ([`crate::cluster::Budgets`]) and by the
//! shipped interceptors, which read budgets from the API themselves (convention 16): a pod is
//! anything that tells its namespace and labels ([`DisruptedPod`]).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, LabelSelector};
use kube::api::ApiResource;
use serde::Serialize;

use crate::selector::{LabelSource, label_selector_matches};

/// What a budget decision reads of a pod.
pub trait DisruptedPod {
    /// The pod's namespace.
    fn pod_namespace(&self) -> &str;
    /// The value of the pod's label `key`.
    fn pod_label(&self, key: &str) -> Option<&str>;
}

impl DisruptedPod for Pod {
    fn pod_namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn pod_label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// A shared pod (the caches hand out `Arc`s) is read as the pod.
impl<P: DisruptedPod + ?Sized> DisruptedPod for std::sync::Arc<P> {
    fn pod_namespace(&self) -> &str {
        (**self).pod_namespace()
    }

    fn pod_label(&self, key: &str) -> Option<&str> {
        (**self).pod_label(key)
    }
}

/// A pod's labels, as a selector reads them.
struct Labels<'a, P: ?Sized>(&'a P);

impl<P: DisruptedPod + ?Sized> LabelSource for Labels<'_, P> {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.pod_label(key)
    }
}

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
    /// `status.disruptedPods`: the pods whose eviction the budget let through, by name, with the
    /// time of the eviction; the disruption controller counts a pod of such a name as disrupted
    /// (not healthy) for [`DISRUPTED_NAME_HELD`] after it, even when it is a new pod back under
    /// the same name (a StatefulSet's).
    #[serde(skip)]
    pub disrupted_pods: Vec<(String, jiff::Timestamp)>,
}

/// How long the disruption controller counts a pod named in a budget's `status.disruptedPods`
/// as disrupted (its `DeletionTimeout`, 2 minutes in every release so far).
pub const DISRUPTED_NAME_HELD: std::time::Duration = std::time::Duration::from_secs(120);

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
            disrupted_pods: v["status"]["disruptedPods"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(name, t)| {
                            Some((name.clone(), t.as_str()?.parse::<jiff::Timestamp>().ok()?))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// True when the budget selects the pod.
    pub fn selects<P: DisruptedPod + ?Sized>(&self, pod: &P) -> bool {
        self.namespace == pod.pod_namespace()
            && self
                .selector
                .as_ref()
                .is_some_and(|s| label_selector_matches(s, &Labels(pod)))
    }

    /// True when the budget lets one more pod it selects go now.
    pub fn allows(&self) -> bool {
        self.observed && self.disruptions_allowed > 0
    }
}

/// The budgets that refuse any disruption of the pod right now.
pub fn blocking_budgets<'a, P: DisruptedPod + ?Sized>(
    pod: &P,
    budgets: &'a [Budget],
) -> Vec<&'a Budget> {
    budgets
        .iter()
        .filter(|b| b.disruptions_allowed <= 0 && b.selects(pod))
        .collect()
}

/// A pod that a refusing budget counts as disrupted only because its name was evicted less than
/// [`DISRUPTED_NAME_HELD`] ago: the pod of that name now is not being deleted — a new pod back
/// under the evicted pod's name, as a StatefulSet recreates it — yet the budget does not count
/// it healthy until `until`. (The Eviction API refuses the budget's other pods meanwhile, with a
/// 429 that says nothing of it: the wait a drain of StatefulSet pods can spend minutes in.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldName {
    /// The budget, `namespace/name`.
    pub budget: String,
    /// The pod name it holds.
    pub pod: String,
    /// When the budget counts it again (the eviction's time plus [`DISRUPTED_NAME_HELD`]).
    pub until: jiff::Timestamp,
}

/// The names held by the budgets that refuse `pod`'s eviction at `now`: entries of their
/// `disruptedPods` younger than [`DISRUPTED_NAME_HELD`] for which `back(name)` says a pod of that
/// name exists and is not being deleted.
pub fn held_names<P: DisruptedPod + ?Sized>(
    pod: &P,
    budgets: &[Budget],
    back: impl Fn(&str) -> bool,
    now: jiff::Timestamp,
) -> Vec<HeldName> {
    let mut held: Vec<HeldName> = budgets
        .iter()
        .filter(|b| !b.allows() && b.selects(pod))
        .flat_map(|b| {
            b.disrupted_pods.iter().filter_map(|(name, at)| {
                let until = at.checked_add(DISRUPTED_NAME_HELD).ok()?;
                (until > now && back(name)).then(|| HeldName {
                    budget: format!("{}/{}", b.namespace, b.name),
                    pod: name.clone(),
                    until,
                })
            })
        })
        .collect();
    held.sort_by(|a, b| (a.until, &a.budget, &a.pod).cmp(&(b.until, &b.budget, &b.pod)));
    held
}

/// What [`held_names`] found, said in one sentence for an event or a log line; `None` when none.
pub fn held_names_note(held: &[HeldName]) -> Option<String> {
    if held.is_empty() {
        return None;
    }
    let each: Vec<String> = held
        .iter()
        .map(|h| {
            format!(
                "PodDisruptionBudget {} counts pod {} as disrupted until {}",
                h.budget,
                h.pod,
                h.until.strftime("%H:%M:%SZ")
            )
        })
        .collect();
    Some(format!(
        "{}: the pod is back under the name of an evicted pod, and the disruption controller \
         counts an evicted pod's name as disrupted for {} after the eviction; the eviction is \
         retried as soon as the budget allows one",
        each.join("; "),
        humantime::format_duration(DISRUPTED_NAME_HELD),
    ))
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
pub fn allowance<P: DisruptedPod + ?Sized>(pod: &P, budgets: &[Budget]) -> Allowance {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    fn pod(ns: &str, labels: &[(&str, &str)]) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns,
                "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        }))
        .unwrap()
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
            disrupted_pods: vec![],
        }
    }

    /// A refusing budget `web` that evicted `names` at the given seconds after 00:00:00Z.
    fn held(allowed: i32, names: &[(&str, i64)]) -> Budget {
        Budget {
            disrupted_pods: names.iter().map(|(n, s)| (n.to_string(), at(*s))).collect(),
            ..b("web", allowed)
        }
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    /// One rule per row: which evicted names a refusing budget still counts as disrupted.
    #[rstest]
    #[case::a_name_back_is_held(vec![held(0, &[("s-2", 0)])], &["s-2"], 60, &[("ns/web", "s-2", 120)])]
    #[case::held_two_minutes_only(vec![held(0, &[("s-2", 0)])], &["s-2"], 120, &[])]
    #[case::a_name_not_back_is_not_held(vec![held(0, &[("s-2", 0)])], &[], 60, &[])]
    #[case::a_budget_that_allows_holds_nothing(vec![held(1, &[("s-2", 0)])], &["s-2"], 60, &[])]
    #[case::a_budget_not_selecting_the_pod(vec![Budget { name: "db".into(), ..held(0, &[("s-2", 0)]) }.with_app("db")], &["s-2"], 60, &[])]
    #[case::oldest_first(vec![held(0, &[("s-1", 30), ("s-0", 10)])], &["s-0", "s-1"], 60, &[("ns/web", "s-0", 130), ("ns/web", "s-1", 150)])]
    fn names_held_by_refusing_budgets(
        #[case] budgets: Vec<Budget>,
        #[case] back: &[&str],
        #[case] now: i64,
        #[case] expected: &[(&str, &str, i64)],
    ) {
        let found = held_names(
            &pod("ns", &[("app", "web")]),
            &budgets,
            |name| back.contains(&name),
            at(now),
        );
        let expected: Vec<HeldName> = expected
            .iter()
            .map(|(b, p, s)| HeldName {
                budget: b.to_string(),
                pod: p.to_string(),
                until: at(*s),
            })
            .collect();
        assert_eq!(found, expected);
    }

    impl Budget {
        fn with_app(mut self, app: &str) -> Self {
            self.selector = b(app, 0).selector;
            self
        }
    }

    #[test]
    fn held_names_are_read_from_the_status_and_told() {
        let v = json!({
            "metadata": {"name": "s", "namespace": "ns", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "observedGeneration": 1,
                "disruptedPods": {"s-2": "2027-01-15T08:00:00Z", "bad": 3}},
        });
        let budget = Budget::from_json("ns", "v1", &v);
        assert_eq!(
            budget.disrupted_pods,
            vec![("s-2".to_string(), "2027-01-15T08:00:00Z".parse().unwrap())]
        );
        let now: jiff::Timestamp = "2027-01-15T08:00:30Z".parse().unwrap();
        let held = held_names(&pod("ns", &[("app", "web")]), &[budget], |_| true, now);
        assert_eq!(
            held_names_note(&held).unwrap(),
            "PodDisruptionBudget ns/s counts pod s-2 as disrupted until 08:02:00Z: the pod is back \
             under the name of an evicted pod, and the disruption controller counts an evicted \
             pod's name as disrupted for 2m after the eviction; the eviction is retried as soon as \
             the budget allows one"
        );
        assert_eq!(held_names_note(&[]), None);
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

    #[test]
    fn blocking_budgets_select_the_pod_and_allow_nothing() {
        let p = pod("ns", &[("app", "web")]);
        assert!(blocking_budgets(&p, &[b("web", 1)]).is_empty());
        assert_eq!(blocking_budgets(&p, &[b("web", 0), b("db", 0)]).len(), 1);
    }

    /// Recorded and written discovery documents (`tests/data/discovery/README.md`).
    #[test]
    fn version_from_discovery_of_each_release() {
        for (server, text, expected) in [
            (
                "1.20.2 (recorded)",
                include_str!("../tests/data/discovery/apis-policy-1.20.2.json"),
                Some("v1beta1"),
            ),
            (
                "1.21",
                include_str!("../tests/data/discovery/apis-policy-1.21.json"),
                Some("v1"),
            ),
            (
                "1.25",
                include_str!("../tests/data/discovery/apis-policy-1.25.json"),
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
