//! The pod Eviction API: POST `pods/{name}/eviction` with a UID precondition, as policy/v1
//! where the server serves it and policy/v1beta1 otherwise (Kubernetes < 1.22), keeping the
//! `Retry-After` header that kube-rs' typed calls drop.

use std::time::Duration;

use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use kube::Client;
use serde_json::json;
use tokio::sync::OnceCell;

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
                match client.list_api_group_resources("policy/v1").await {
                    Ok(list)
                        if list
                            .resources
                            .iter()
                            .any(|r| r.name == "poddisruptionbudgets") =>
                    {
                        "policy/v1"
                    }
                    _ => "policy/v1beta1",
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
