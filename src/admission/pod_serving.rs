//! The pod webhook's mutation (SPEC 6.4): a pod that declares the `endpoints.evictord.dev`
//! interceptor gets the readiness gate `evictord.dev/serving`, which evictord sets `True` as soon
//! as it sees the pod and `False` when the interceptor takes the pod out of its Services.
//!
//! Rules (CREATE only; the gate cannot be added to a running pod, `spec.readinessGates` is
//! immutable):
//! - P9 a pod whose interceptor annotation names `endpoints.evictord.dev` gets the gate (a JSON
//!   patch), unless it has it already; when this evictord runs without the interceptor
//!   (`--endpoints-interceptor=false`, or offline: then nothing would set the gate's condition
//!   and the pod would never become Ready) it gets none, and a warning says so.
//! - P10 (a warning, never a denial) its `evictord.dev/deregistration-delay`, when set, is a
//!   duration of at most an hour; otherwise the default delay applies, and the warning says so.
//!
//! The webhook is registered with `failurePolicy: Ignore`: while evictord is down pods are created
//! without the gate and leave their endpoints only at SIGTERM, as without evictord.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::Operation;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::INTERCEPTORS_ANNOTATION;
use crate::serving::{
    DEREGISTRATION_DELAY_ANNOTATION, ENDPOINTS_INTERCEPTOR, SERVING_CONDITION,
    declares_endpoints_interceptor, deregistration_delay,
};

/// A Pod as the mutating webhook decodes it: the metadata and the readiness gates; the rest of
/// the spec is skipped.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GatedPod {
    /// The metadata (the two annotations are read).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec.readinessGates`.
    #[serde(default)]
    pub spec: GatedPodSpec,
}

/// The part of the pod spec the mutation reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GatedPodSpec {
    /// `spec.readinessGates`, if present.
    #[serde(
        default,
        rename = "readinessGates",
        skip_serializing_if = "Option::is_none"
    )]
    pub readiness_gates: Option<Vec<Gate>>,
}

/// One readiness gate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Gate {
    /// The pod condition type it waits for.
    #[serde(default, rename = "conditionType")]
    pub condition_type: String,
}

crate::cluster::pod_resource!(GatedPod);

fn annotation<'a>(pod: &'a GatedPod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The mutation of a created pod (rules P9 and P10, see the module docs).
///
/// # Guarantees
/// Never denies. A pod that does not declare the interceptor, and every other operation, is
/// allowed untouched. Mutating an already mutated pod yields no patch.
pub fn mutate_pod(req: &ReviewRequest<'_, GatedPod>, settings: &Settings) -> Verdict {
    let mut verdict = Verdict::allow();
    let (Operation::Create, Some(pod)) = (&req.operation, req.object) else {
        return verdict;
    };
    if !annotation(pod, INTERCEPTORS_ANNOTATION).is_some_and(declares_endpoints_interceptor) {
        return verdict;
    }
    if let Some(problem) = p10_delay(pod, settings) {
        verdict.warn(problem);
    }
    match p9_gate(pod, settings) {
        Ok(Some(op)) => verdict.patch.push(op),
        Ok(None) => {}
        Err(warning) => verdict.warn(warning),
    }
    verdict
}

/// Rule P10: the pod's deregistration delay, when annotated, is one evictord takes.
fn p10_delay(pod: &GatedPod, settings: &Settings) -> Option<String> {
    let text = annotation(pod, DEREGISTRATION_DELAY_ANNOTATION)?;
    let delay = deregistration_delay(Some(text), settings.deregistration_delay);
    delay.problem.map(|p| {
        format!("metadata.annotations[{DEREGISTRATION_DELAY_ANNOTATION:?}]: {p} (rule P10)")
    })
}

/// Rule P9: the readiness gate, added (`Ok(Some)`), already there (`Ok(None)`), or not added
/// because the interceptor is off (`Err` with the warning).
fn p9_gate(pod: &GatedPod, settings: &Settings) -> Result<Option<PatchOperation>, String> {
    let gates = pod.spec.readiness_gates.as_deref();
    if gates
        .unwrap_or_default()
        .iter()
        .any(|g| g.condition_type == SERVING_CONDITION)
    {
        return Ok(None);
    }
    if !settings.serving_gate {
        return Err(format!(
            "the pod declares {ENDPOINTS_INTERCEPTOR} but this evictord runs without it \
             (--endpoints-interceptor=false, or offline): no {SERVING_CONDITION} readiness gate was \
             added, so an eviction will not take the pod out of its Services first (rule P9)"
        ));
    }
    let gate = json!({"conditionType": SERVING_CONDITION});
    let (path, value): (&[&str], Value) = match gates {
        // `add` at the end of an array: `-` (RFC 6901).
        Some(_) => (&["spec", "readinessGates", "-"], gate),
        None => (&["spec", "readinessGates"], Value::Array(vec![gate])),
    };
    Ok(Some(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().copied()),
        value,
    })))
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::authentication::v1::UserInfo;
    use rstest::rstest;

    use super::*;

    fn pod(interceptors: Option<&str>, delay: Option<&str>, gates: Option<&[&str]>) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(i) = interceptors {
            annotations.insert(INTERCEPTORS_ANNOTATION.into(), json!(i));
        }
        if let Some(d) = delay {
            annotations.insert(DEREGISTRATION_DELAY_ANNOTATION.into(), json!(d));
        }
        let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
        if let Some(g) = gates {
            spec["readinessGates"] = g.iter().map(|c| json!({"conditionType": c})).collect();
        }
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
               "spec": spec})
    }

    fn mutate(op: Operation, pod: &Value, settings: &Settings) -> (Verdict, Value) {
        let decoded: GatedPod = serde_json::from_value(pod.clone()).unwrap();
        let user = UserInfo::default();
        let req = ReviewRequest {
            operation: op,
            sub_resource: None,
            namespace: Some("ns"),
            name: "p",
            object: Some(&decoded),
            old_object: None,
            user: &user,
            dry_run: false,
            now: Timestamp::UNIX_EPOCH,
        };
        let verdict = mutate_pod(&req, settings);
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &verdict.patch).unwrap();
        (verdict, patched)
    }

    const BOTH: &str = "deployment.apps.k8s.io,endpoints.evictord.dev";

    /// Rule P9 per case: the readiness gates after the patch, and a warning when there is one.
    #[rstest]
    #[case::p9_added(Some(BOTH), None, true, &["evictord.dev/serving"][..], None)]
    #[case::p9_appended(Some(BOTH), Some(&["x.example.com/ready"][..]), true, &["x.example.com/ready", "evictord.dev/serving"][..], None)]
    #[case::p9_already_there(Some(BOTH), Some(&["evictord.dev/serving"][..]), true, &["evictord.dev/serving"][..], None)]
    #[case::p9_not_declared(Some("deployment.apps.k8s.io"), None, true, &[][..], None)]
    #[case::p9_no_annotation(None, None, true, &[][..], None)]
    #[case::p9_interceptor_off(Some(BOTH), None, false, &[][..], Some("runs without it (--endpoints-interceptor=false, or offline)"))]
    fn p9_rows(
        #[case] interceptors: Option<&str>,
        #[case] gates: Option<&[&str]>,
        #[case] on: bool,
        #[case] after: &[&str],
        #[case] warning: Option<&str>,
    ) {
        let settings = Settings {
            serving_gate: on,
            ..Settings::default()
        };
        let (verdict, patched) = mutate(
            Operation::Create,
            &pod(interceptors, None, gates),
            &settings,
        );
        assert!(verdict.allowed());
        let got: Vec<&str> = patched["spec"]["readinessGates"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g["conditionType"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(got, after);
        match warning {
            None => assert!(verdict.warnings.is_empty(), "{verdict:?}"),
            Some(w) => assert!(verdict.warnings[0].contains(w), "{verdict:?}"),
        }
        // Mutating the mutated pod changes nothing more.
        let (again, _) = mutate(Operation::Create, &patched, &settings);
        assert!(again.patch.is_empty());
    }

    /// Rule P10: a warning for a delay evictord will not take, never a denial.
    #[rstest]
    #[case::p10_valid(Some("45s"), None)]
    #[case::p10_absent(None, None)]
    #[case::p10_not_a_duration(
        Some("a while"),
        Some("\"a while\" is not a duration like 30s or 2m; using the default 30s (rule P10)")
    )]
    #[case::p10_too_long(Some("3h"), Some("is longer than the 1h allowed"))]
    fn p10_rows(#[case] delay: Option<&str>, #[case] warning: Option<&str>) {
        let (verdict, _) = mutate(
            Operation::Create,
            &pod(Some(BOTH), delay, None),
            &Settings::default(),
        );
        assert!(verdict.allowed());
        match warning {
            None => assert!(verdict.warnings.is_empty(), "{verdict:?}"),
            Some(w) => {
                assert_eq!(verdict.warnings.len(), 1);
                assert!(verdict.warnings[0].contains(w), "{verdict:?}");
                assert!(
                    verdict.warnings[0].len() <= 256,
                    "kube-apiserver may cut it"
                );
            }
        }
    }

    #[test]
    fn only_creates_are_mutated() {
        for op in [Operation::Update, Operation::Delete] {
            let (verdict, _) = mutate(
                op,
                &pod(Some(BOTH), Some("soon"), None),
                &Settings::default(),
            );
            assert_eq!(verdict, Verdict::allow());
        }
    }
}
