//! The I/O shell of `kubelet.k8s.io` on active requests: read the static pod directory under its
//! lock, take [`on_request`]'s step (holding manifests through [`Store::hold`]), and report.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracing::info;

use super::Error;
use super::decide::{RequestInput, Step, after_hold, on_request};
use super::held::Record;
use super::report::{Context, MANIFEST_HELD, count_move};
use crate::api::{
    EvictionRequest, KUBELET_INTERCEPTOR, NODE_MAINTENANCE_REQUESTER, REQUESTED_FOR_NODE_ANNOTATION,
};
use crate::interceptor::{BoxError, Interceptor, Progress};
use crate::recorder::EventType;

/// The `kubelet.k8s.io` interceptor of one node.
pub struct KubeletInterceptor {
    ctx: Arc<Context>,
}

impl KubeletInterceptor {
    /// The interceptor of the context's node.
    pub fn new(ctx: Arc<Context>) -> Self {
        Self { ctx }
    }

    /// Decides under the directory's lock and holds what the decision says; returns the step
    /// and the records it held.
    async fn step(
        &self,
        request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<(Step, Vec<Record>), Error> {
        let ctx = self.ctx.clone();
        let pod = pod.cloned();
        let requested_by_maintenance = request.has_requester(NODE_MAINTENANCE_REQUESTER);
        let maintenances = ctx.maintenances();
        tokio::task::spawn_blocking(move || {
            let store = &ctx.store;
            let _lock = store.lock()?;
            let snapshot = store.scan()?;
            let dir = store.dir().display().to_string();
            let step = on_request(&RequestInput {
                node: &ctx.node,
                dir: &dir,
                pod: pod.as_ref(),
                maintenances: &maintenances,
                snapshot: &snapshot,
                requested_by_maintenance,
                now: Timestamp::now(),
            });
            match step {
                Step::Hold(records) => {
                    for r in &records {
                        store.hold(r)?;
                    }
                    Ok((after_hold(&records, &dir), records))
                }
                other => Ok((other, Vec::new())),
            }
        })
        .await?
    }
}

impl Interceptor for KubeletInterceptor {
    fn name(&self) -> &str {
        KUBELET_INTERCEPTOR
    }

    /// The mirror pods of this node; once the pod is gone, the requests the node maintenance
    /// controller made for this node.
    fn accepts(&self, request: &EvictionRequest, pod: Option<&Pod>) -> bool {
        match pod {
            Some(p) => {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.ctx.node.as_str())
            }
            None => {
                request.annotations().get(REQUESTED_FOR_NODE_ANNOTATION) == Some(&self.ctx.node)
            }
        }
    }

    async fn progress(
        &self,
        request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        let (step, held) = self.step(request, pod).await?;
        for r in &held {
            count_move("held");
            let note = format!(
                "Moved static pod manifest {} out of the kubelet's directory for node maintenance {} (pod {}/{}, request {})",
                r.file,
                r.maintenance,
                r.pod.namespace,
                r.pod.name,
                request.name_any()
            );
            info!(file = %r.file, maintenance = %r.maintenance, "{note}");
            self.ctx.event(EventType::Normal, MANIFEST_HELD, note).await;
        }
        if !held.is_empty() {
            self.ctx.wake.notify_one();
        }
        Ok(match step {
            Step::Complete(message) => Progress::complete(message),
            Step::Wait {
                message,
                expected_finish,
            } => Progress::InProgress {
                message,
                expected_finish,
            },
            // on_request's Hold is carried out above and reported as a Wait.
            Step::Hold(_) => Progress::in_progress("holding the static pod's manifest"),
        })
    }
}
