//! The pod Eviction API: POST `pods/{name}/eviction` with a UID precondition, in the version the
//! server's `pods/eviction` subresource takes (policy/v1 from Kubernetes 1.22, policy/v1beta1
//! before), keeping the `Retry-After` header that kube-rs' typed calls drop.

use std::time::Duration;

use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use serde_json::json;
use tokio::sync::OnceCell;
use tracing::warn;

use super::eviction_request::EvictionOutcome;
use crate::api::IMPERATIVE_EVICTION_ANNOTATION;

/// Longest wait for one Eviction API call (it may run admission webhooks of its own).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Which Eviction API version the server serves, discovered once.
#[derive(Default)]
pub struct EvictionApi {
    version: OnceCell<&'static str>,
}

impl EvictionApi {
    async fn version(&self, client: &Client) -> &'static str {
        self.version
            .get_or_init(|| async {
                match client.list_core_api_resources("v1").await {
                    Ok(list) => eviction_version(&list),
                    Err(e) => {
                        warn!(error = %e, "core API discovery failed; using policy/v1beta1 Evictions");
                        POLICY_V1BETA1
                    }
                }
            })
            .await
    }

    /// Evicts the pod if its UID is still `uid`.
    pub async fn evict(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> EvictionOutcome {
        let version = self.version(client).await;
        let body = json!({
            "apiVersion": version,
            "kind": "Eviction",
            // Names the EvictionRequest (named after the pod UID) this call acts for, so that the
            // Eviction API bridge lets evictord's own call as the imperative interceptor through.
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": {IMPERATIVE_EVICTION_ANNOTATION: uid},
            },
            "deleteOptions": {"preconditions": {"uid": uid}},
        });
        let request = Request::post(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        ))
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default());
        let request = match request {
            Ok(r) => r,
            Err(e) => return failed(0, format!("building the eviction request: {e}"), None),
        };
        let response =
            match tokio::time::timeout(CALL_TIMEOUT, client.send(request.map(Into::into))).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return failed(0, format!("calling the Eviction API: {e}"), None),
                Err(_) => {
                    return failed(
                        0,
                        format!("the Eviction API did not answer within {CALL_TIMEOUT:?}"),
                        None,
                    );
                }
            };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                v.get("message")
                    .and_then(|m| m.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(512).collect());
        classify(status, message, retry_after)
    }
}

const POLICY_V1: &str = "policy/v1";
const POLICY_V1BETA1: &str = "policy/v1beta1";

/// The Eviction version the server takes, from the `pods/eviction` entry of its core `/api/v1`
/// discovery document, as kubectl's drain decides it. Not from whether policy/v1 serves
/// PodDisruptionBudgets: 1.21 does, yet its `pods/eviction` accepts only policy/v1beta1.
/// An entry without group and version (early releases) or without the subresource means
/// policy/v1beta1.
pub fn eviction_version(core: &APIResourceList) -> &'static str {
    let entry = core.resources.iter().find(|r| r.name == "pods/eviction");
    match entry.map(|r| (r.group.as_deref(), r.version.as_deref())) {
        Some((Some("policy"), Some("v1"))) => POLICY_V1,
        _ => POLICY_V1BETA1,
    }
}

fn failed(status_code: u16, message: String, retry_after: Option<Duration>) -> EvictionOutcome {
    EvictionOutcome::Failed {
        status_code,
        message,
        retry_after,
    }
}

/// Maps an Eviction API answer to an outcome: 2xx evicted; 404, or 409 from the UID
/// precondition, means the pod is gone; anything else failed.
pub fn classify(
    status: StatusCode,
    message: String,
    retry_after: Option<Duration>,
) -> EvictionOutcome {
    if status.is_success() {
        EvictionOutcome::Evicted
    } else if status == StatusCode::NOT_FOUND
        || (status == StatusCode::CONFLICT && message.contains("Precondition failed"))
    {
        EvictionOutcome::PodGone
    } else {
        failed(status.as_u16(), message, retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_version_from_core_discovery() {
        let doc = |text: &str| -> APIResourceList { serde_json::from_str(text).unwrap() };
        for (server, text, expected) in [
            (
                "1.20.2 (recorded)",
                include_str!("../../tests/data/discovery/api-v1-1.20.2.json"),
                POLICY_V1BETA1,
            ),
            (
                "1.21: policy/v1 PDBs, v1beta1 evictions",
                include_str!("../../tests/data/discovery/api-v1-pods-1.21.excerpt.json"),
                POLICY_V1BETA1,
            ),
            (
                "1.22",
                include_str!("../../tests/data/discovery/api-v1-pods-1.22.excerpt.json"),
                POLICY_V1,
            ),
            (
                "1.34",
                include_str!("../../tests/data/discovery/api-v1-pods-1.34.excerpt.json"),
                POLICY_V1,
            ),
            (
                "no group/version",
                include_str!("../../tests/data/discovery/api-v1-pods-old.excerpt.json"),
                POLICY_V1BETA1,
            ),
            (
                "no pods/eviction",
                r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[]}"#,
                POLICY_V1BETA1,
            ),
        ] {
            assert_eq!(eviction_version(&doc(text)), expected, "{server}");
        }
    }

    #[test]
    fn classification() {
        assert_eq!(
            classify(StatusCode::CREATED, String::new(), None),
            EvictionOutcome::Evicted
        );
        assert_eq!(
            classify(StatusCode::NOT_FOUND, "pods \"p\" not found".into(), None),
            EvictionOutcome::PodGone
        );
        assert_eq!(
            classify(
                StatusCode::CONFLICT,
                "Precondition failed: UID in precondition: a, UID in object meta: b".into(),
                None
            ),
            EvictionOutcome::PodGone
        );
        assert!(matches!(
            classify(
                StatusCode::TOO_MANY_REQUESTS,
                "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                Some(Duration::from_secs(10))
            ),
            EvictionOutcome::Failed {
                status_code: 429,
                retry_after: Some(_),
                ..
            }
        ));
    }
}
