//! The answer to kube-apiserver: an `admission.k8s.io/v1` AdmissionReview carrying the
//! response, with `response.patch` in base64 as kube-apiserver documents it.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use serde::{Serialize, Serializer};

/// The response AdmissionReview as kube-apiserver documents it: `response.patch` is a base64
/// string (Go `[]byte`). kube-core serializes its `Vec<u8>` as an array of numbers, which Go's
/// decoder happens to accept but nothing else expects (and which makes `evictord review`
/// output unreadable).
#[derive(Clone, Debug)]
pub struct ResponseReview(pub AdmissionReview<DynamicObject>);

impl From<AdmissionResponse> for ResponseReview {
    fn from(response: AdmissionResponse) -> Self {
        Self(response.into_review())
    }
}

impl Serialize for ResponseReview {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let review = &self.0;
        // Written field by field (no intermediate `serde_json::Value`), as `answer` writes the
        // handler's answers. A review carrying a request too is never built by the handler; it
        // takes the general path.
        if review.request.is_some() {
            return encode_general(review, serializer);
        }
        Wire {
            api_version: &review.types.api_version,
            kind: &review.types.kind,
            response: review.response.as_ref().map(WireResponse::of),
        }
        .serialize(serializer)
    }
}

/// Room for an answer without warnings or patch, so that writing one never reallocates.
const ANSWER_CAPACITY: usize = 512;

/// The HTTP answer carrying `response` in an AdmissionReview: the same JSON as
/// [`ResponseReview`], written straight from the response (no review built around it, none of
/// its strings copied) into one buffer that becomes the body.
pub fn answer(response: &AdmissionResponse) -> Response {
    let wire = Wire {
        api_version: &response.types.api_version,
        kind: &response.types.kind,
        response: Some(WireResponse::of(response)),
    };
    let mut json = Vec::with_capacity(ANSWER_CAPACITY);
    if let Err(e) = serde_json::to_writer(&mut json, &wire) {
        // Cannot happen for these types; answered as axum's `Json` would.
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    let mut r = Response::new(Body::from(json));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The response AdmissionReview as written on the wire.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    api_version: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<WireResponse<'a>>,
}

/// `AdmissionResponse` with the patch in base64.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a kube::core::Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Base64<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    audit_annotations: &'a std::collections::HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

impl<'a> WireResponse<'a> {
    fn of(r: &'a AdmissionResponse) -> Self {
        WireResponse {
            uid: &r.uid,
            allowed: r.allowed,
            status: &r.result,
            patch: r.patch.as_deref().map(Base64),
            // kube-core sets the (private) patch type exactly when it sets the patch.
            patch_type: r.patch.as_ref().map(|_| "JSONPatch"),
            audit_annotations: &r.audit_annotations,
            warnings: r.warnings.as_deref(),
        }
    }
}

/// Bytes serialized as a base64 string (Go's `[]byte`).
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(self.0))
    }
}

/// The whole review through `serde_json::Value`, with the patch turned into base64.
fn encode_general<S: Serializer>(
    review: &AdmissionReview<DynamicObject>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut value = serde_json::to_value(review).map_err(serde::ser::Error::custom)?;
    let patch = review.response.as_ref().and_then(|r| r.patch.as_deref());
    if let (Some(patch), Some(slot)) = (patch, value.pointer_mut("/response/patch")) {
        *slot = serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    value.serialize(serializer)
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;
    use axum::http::StatusCode;
    use kube::core::admission::AdmissionResponse;

    use super::{ResponseReview, answer};

    /// The handler's answer is the JSON of [`ResponseReview`], byte for byte: allowed, denied,
    /// with warnings, with a patch.
    #[tokio::test]
    async fn answers_are_the_response_review_json() {
        let base = AdmissionResponse::invalid("").into_review();
        let mut allowed = base.response.expect("a response");
        allowed.uid = "u-1".into();
        allowed.allowed = true;
        allowed.result = Default::default();
        let mut warned = allowed.clone();
        warned.warnings = Some(vec!["careful \"here\"".into()]);
        let denied = allowed.clone().deny("no (rule E1)");
        let patched = allowed
            .clone()
            .with_patch(json_patch::Patch(Vec::new()))
            .unwrap();
        for response in [allowed, warned, denied, patched] {
            let expected = serde_json::to_vec(&ResponseReview::from(response.clone())).unwrap();
            let got = answer(&response);
            assert_eq!(got.status(), StatusCode::OK);
            assert_eq!(got.headers()["content-type"], "application/json");
            let body = to_bytes(got.into_body(), 1 << 20).await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(&expected)
            );
        }
    }
}
