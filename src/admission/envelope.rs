//! The AdmissionReview envelope as the webhooks decode it: only the fields they read.
//!
//! kube-core's `AdmissionReview<K>` also builds `requestKind`, `requestResource`,
//! `requestSubResource` and `options` (a `serde_json::Value` tree) on every call, which no
//! review reads; they are scanned (the body must still be valid JSON) but not built. The result
//! is kube-core's own [`AdmissionRequest`], with those four fields unset, so that everything
//! after the decode is unchanged.
//!
//! The body is checked to be UTF-8 once, as a whole, and then parsed as text: serde_json checks
//! each string it builds from bytes on its own, a slow path that was a fifth of the decoding of
//! an EvictionRequest status update.
//!
//! Nesting: a value the webhook builds (the envelope's fields above, the parts of an object a
//! review reads) is refused 128 levels deep, serde_json's recursion limit, and the body is then
//! a malformed review (HTTP 400). The fields nobody reads are skipped without recursion (serde_json
//! keeps the skipped levels on the heap, at most one byte a level of a body already bounded to
//! 3 MiB), so their depth costs no stack and they are answered on their merits, as any unknown
//! field is (`tests/http.rs`, `tests/hostile_clients.rs`).

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use k8s_openapi::api::authentication::v1::UserInfo;

/// An `admission.k8s.io` AdmissionReview, request side.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<K> {
    api_version: String,
    kind: String,
    #[serde(default = "none")]
    request: Option<Request<K>>,
}

/// The fields of `request` a review reads (kube-core's names and defaults).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<K> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    #[serde(default = "none")]
    object: Option<K>,
    #[serde(default = "none")]
    old_object: Option<K>,
    #[serde(default)]
    dry_run: bool,
}

fn none<T>() -> Option<T> {
    None
}

/// What a body decodes to: the envelope's `apiVersion` and `kind`, and its request if any.
pub struct Decoded<K: kube::Resource> {
    /// `apiVersion` and `kind` of the review.
    pub types: TypeMeta,
    /// The request, with `types` copied from the review (as kube-core's conversion does).
    pub request: Option<AdmissionRequest<K>>,
}

/// Why a body is not an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// Not UTF-8 (JSON text always is).
    #[error("not UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    /// Not JSON, or not an AdmissionReview of these objects.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

/// Decodes an AdmissionReview body.
///
/// # Errors
/// When the body is not UTF-8, not JSON, or its envelope or objects do not decode.
pub fn decode_review<K>(body: &[u8]) -> Result<Decoded<K>, EnvelopeError>
where
    K: kube::Resource + DeserializeOwned,
{
    let text = std::str::from_utf8(body)?;
    let envelope: Envelope<K> = serde_json::from_str(text)?;
    let types = TypeMeta {
        api_version: envelope.api_version,
        kind: envelope.kind,
    };
    let request = envelope.request.map(|r| AdmissionRequest {
        types: types.clone(),
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: r.user_info,
        object: r.object,
        old_object: r.old_object,
        dry_run: r.dry_run,
        options: None,
    });
    Ok(Decoded { types, request })
}
