//! `evictord review`: one AdmissionReview reviewed offline by the same webhooks the server
//! runs, against a cluster view built from a file of objects (or an unknown cluster). For a
//! NodeMaintenance or Pod CREATE it does what kube-apiserver does: mutate, apply the patch,
//! validate.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use serde::de::DeserializeOwned;

use super::http::{
    HandlerError, ResponseReview, Webhook, check_version, respond, review_request, schema_denial,
};
use super::pod_eviction::review_pod_eviction as review_pod_eviction_call;
use super::pod_eviction::shell::{eviction_call, respond as pod_eviction_response};
use super::webhooks::{
    MUTATE_NODE_MAINTENANCES, MUTATE_PODS, VALIDATE_EVICTION_INTERCEPTORS,
    VALIDATE_EVICTION_REQUESTS, VALIDATE_NODE_MAINTENANCES, VALIDATE_PODS,
};
use super::{Settings, Verdict, node_maintenance};
use crate::api::{EvictionInterceptor, EvictionRequest, NodeMaintenance};
use crate::cluster::{CachedPod, ClusterView, Lookup, StaticView};

/// Errors of the offline review.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is not YAML/JSON.
    #[error("the input is not JSON or YAML: {0}")]
    Parse(#[from] serde_norway::Error),
    /// The input is not an AdmissionReview this server handles.
    #[error("{0}")]
    Unsupported(String),
    /// The request object does not match its resource's schema.
    #[error("the AdmissionReview request does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

/// Builds the cluster view from a multi-document YAML/JSON file of Pods, Nodes,
/// EvictionRequests, NodeMaintenances and EvictionInterceptors (a `List` document is unrolled).
/// The file is the whole cluster: an interceptor without an EvictionInterceptor in it is not
/// registered.
///
/// # Errors
/// When a document does not parse or has another kind.
pub fn view_from_objects(bytes: &[u8]) -> Result<StaticView, Error> {
    let (mut pods, mut nodes, mut nms, mut ers) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut evis = Vec::new();
    let mut docs: Vec<serde_json::Value> = Vec::new();
    for doc in serde_norway::Deserializer::from_slice(bytes) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        match v.get("kind").and_then(|k| k.as_str()) {
            Some(k) if k.ends_with("List") => docs.extend(
                v.get("items")
                    .and_then(|i| i.as_array())
                    .cloned()
                    .unwrap_or_default(),
            ),
            _ if v.is_null() => {}
            _ => docs.push(v),
        }
    }
    for v in docs {
        match v.get("kind").and_then(|k| k.as_str()) {
            Some("Pod") => pods.push(serde_json::from_value::<CachedPod>(v)?),
            Some("Node") => nodes.push(serde_json::from_value::<Node>(v)?),
            Some("NodeMaintenance") => nms.push(serde_json::from_value::<NodeMaintenance>(v)?),
            Some("EvictionRequest") => ers.push(serde_json::from_value::<EvictionRequest>(v)?),
            Some("EvictionInterceptor") => {
                evis.push(serde_json::from_value::<EvictionInterceptor>(v)?);
            }
            other => {
                return Err(Error::Unsupported(format!(
                    "--objects: unsupported kind {other:?} (Pod, Node, EvictionRequest, NodeMaintenance, \
                     EvictionInterceptor)"
                )));
            }
        }
    }
    Ok(StaticView::with_objects(pods, nodes, nms, ers).with_interceptors(evis))
}

/// A decoded request, or the denial of an object that breaks its resource's schema (as the
/// server answers it).
enum Decoded<K: kube::Resource> {
    Request(Box<AdmissionRequest<K>>),
    Denied(Box<ResponseReview>),
}

fn decode<K: kube::Resource + DeserializeOwned>(
    review: serde_json::Value,
) -> Result<Decoded<K>, Error> {
    let typed: AdmissionReview<K> = match serde_json::from_value(review.clone()) {
        Ok(t) => t,
        Err(e) => {
            return match schema_denial::<K>(&review) {
                Some(HandlerError::InvalidObject { response, .. }) => {
                    Ok(Decoded::Denied(Box::new((*response).into())))
                }
                _ => Err(Error::Decode(e)),
            };
        }
    };
    typed
        .try_into()
        .map(|r| Decoded::Request(Box::new(r)))
        .map_err(|_| Error::Unsupported("the AdmissionReview has no request".into()))
}

fn run<K: kube::Resource + DeserializeOwned>(
    webhook: &Webhook<K>,
    review: serde_json::Value,
    view: &StaticView,
    now: Timestamp,
    settings: &Settings,
) -> Result<ResponseReview, Error> {
    let req = match decode::<K>(review)? {
        Decoded::Request(r) => *r,
        Decoded::Denied(response) => return Ok(*response),
    };
    let verdict = (webhook.review)(&review_request(&req, now), view, settings);
    Ok(respond(&req, verdict).into())
}

/// Reviews one AdmissionReview (JSON or YAML) and returns the response AdmissionReview.
///
/// # Errors
/// When the input or the objects cannot be read, or the resource is not one evictord serves.
pub fn review(
    input: &[u8],
    objects: Option<&[u8]>,
    now: Timestamp,
    settings: &Settings,
) -> Result<ResponseReview, Error> {
    let value: serde_json::Value = serde_norway::from_slice(input)?;
    if value.is_null() {
        return Err(Error::Unsupported(
            "the input is empty: expected one AdmissionReview (JSON or YAML)".into(),
        ));
    }
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let kind = value
        .get("kind")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    check_version(api_version, kind).map_err(|e| Error::Unsupported(e.to_string()))?;
    let view = match objects {
        Some(bytes) => view_from_objects(bytes)?,
        None => StaticView::unknown(),
    };
    if !value
        .get("request")
        .is_some_and(serde_json::Value::is_object)
    {
        return Err(Error::Unsupported(
            "the AdmissionReview has no request".into(),
        ));
    }
    let resource = value
        .pointer("/request/resource/resource")
        .and_then(|r| r.as_str())
        .unwrap_or_default()
        .to_string();
    let sub_resource = value
        .pointer("/request/subResource")
        .and_then(|r| r.as_str())
        .unwrap_or_default();
    match resource.as_str() {
        "pods" if sub_resource == "eviction" => review_pod_eviction(value, &view, now, settings),
        "evictionrequests" => run(&VALIDATE_EVICTION_REQUESTS, value, &view, now, settings),
        "pods" => review_pod(value, &view, now, settings),
        "nodemaintenances" => review_node_maintenance(value, &view, now, settings),
        "evictioninterceptors" => run(&VALIDATE_EVICTION_INTERCEPTORS, value, &view, now, settings),
        other => Err(Error::Unsupported(format!(
            "resource {other:?} is not reviewed by evictord (evictionrequests, pods, pods/eviction, \
             nodemaintenances, evictioninterceptors)"
        ))),
    }
}

/// The Eviction API bridge's decision (what it would write is not written: this is offline).
fn review_pod_eviction(
    value: serde_json::Value,
    view: &StaticView,
    now: Timestamp,
    settings: &Settings,
) -> Result<ResponseReview, Error> {
    let req = match decode::<DynamicObject>(value)? {
        Decoded::Request(r) => *r,
        Decoded::Denied(response) => return Ok(*response),
    };
    let call = eviction_call(&req, now);
    let pod = view.pod(call.namespace, call.pod_name);
    let request = match &pod {
        Lookup::Found(p) => view.eviction_request(p.namespace(), p.uid()),
        _ => Lookup::Missing,
    };
    let decision = review_pod_eviction_call(&call, &pod, &request, settings);
    Ok(pod_eviction_response(&req, decision).into())
}

/// A Pod: on CREATE the mutation (rules P9, P10) and then the validation, one response carrying
/// the patch and the warnings of both (the gate the mutation adds is nothing the validation
/// reads); otherwise the validation alone.
fn review_pod(
    value: serde_json::Value,
    view: &StaticView,
    now: Timestamp,
    settings: &Settings,
) -> Result<ResponseReview, Error> {
    // An object the mutation cannot read is left to the validation's answer.
    let mutation = match decode::<super::pod_serving::GatedPod>(value.clone()) {
        Ok(Decoded::Request(req)) if req.operation == Operation::Create => {
            (MUTATE_PODS.review)(&review_request(&req, now), view, settings)
        }
        _ => Verdict::allow(),
    };
    let req = match decode::<super::partial::AdmittedPod>(value)? {
        Decoded::Request(r) => *r,
        Decoded::Denied(response) => return Ok(*response),
    };
    let validation = (VALIDATE_PODS.review)(&review_request(&req, now), view, settings);
    let mut warnings = mutation.warnings;
    warnings.extend(validation.warnings);
    let verdict = Verdict {
        denied: validation.denied,
        warnings,
        patch: mutation.patch,
    };
    Ok(respond(&req, verdict).into())
}

/// Mutating review, patch applied, then validating review — one response carrying the patch,
/// the warnings of both and the final verdict.
fn review_node_maintenance(
    value: serde_json::Value,
    view: &StaticView,
    now: Timestamp,
    settings: &Settings,
) -> Result<ResponseReview, Error> {
    let mut req = match decode::<NodeMaintenance>(value)? {
        Decoded::Request(r) => *r,
        Decoded::Denied(response) => return Ok(*response),
    };
    if req.operation != Operation::Create {
        let verdict =
            (VALIDATE_NODE_MAINTENANCES.review)(&review_request(&req, now), view, settings);
        return Ok(respond(&req, verdict).into());
    }
    let mutation = (MUTATE_NODE_MAINTENANCES.review)(&review_request(&req, now), view, settings);
    if let (Some(obj), false) = (req.object.as_ref(), mutation.patch.is_empty()) {
        let patched =
            node_maintenance::apply_patch(obj, &mutation.patch).map_err(Error::Unsupported)?;
        req.object = Some(patched);
    }
    let validation =
        (VALIDATE_NODE_MAINTENANCES.review)(&review_request(&req, now), view, settings);
    let mut warnings = mutation.warnings;
    warnings.extend(validation.warnings);
    let verdict = Verdict {
        denied: mutation.denied.or(validation.denied),
        warnings,
        patch: mutation.patch,
    };
    Ok(respond(&req, verdict).into())
}
