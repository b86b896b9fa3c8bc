//! What the node maintenance controller's shell shares: its [`Context`], the events it records
//! on a maintenance once its writes succeeded ([`Note`], [`publish`]), and keeping the first of
//! several failed writes ([`keep`]).

use std::sync::Arc;

use kube::{Client, Resource};
use tracing::warn;

use super::pacing::StatusWrites;
use super::writes::Error;
use crate::api::NodeMaintenance;
use crate::cluster::Caches;
use crate::controller::own_writes::{OwnWrites, Remembered};
use crate::recorder::{Event, EventType, Recorder};

/// What the reconciler needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Shared caches.
    pub caches: Arc<Caches>,
    /// Event recorder.
    pub recorder: Recorder,
    /// `daemonset.apps.k8s.io` runs (`--daemonset-interceptor`): DaemonSet pods leave through it.
    pub daemonset_interceptor: bool,
    /// `--interceptor-registration`: node messages name unregistered interceptors unless `off`.
    pub interceptor_registration: crate::api::RegistrationMode,
    /// `--exclude-from-external-load-balancers` (SPEC 6.4): held nodes carry the exclusion label.
    pub exclude_from_load_balancers: bool,
    /// When each maintenance's status was last written (its progress is paced).
    pub status_writes: StatusWrites,
    /// The maintenance writes of this controller and of the admission loop that the shared cache
    /// has not shown yet (shared with [`admission::Context`](super::admission::Context)).
    pub own_writes: Arc<OwnWrites>,
    /// The EvictionRequests this controller created (`namespace/name`) that the shared cache
    /// has not shown yet, with when: a reconcile before the watch shows them does not create
    /// them again (each such create is refused, 409).
    pub created_requests: Arc<Remembered>,
}

/// An event to record on the maintenance once its writes succeeded.
pub struct Note {
    /// Event reason (PascalCase).
    pub reason: &'static str,
    /// Event note.
    pub message: String,
    /// A Warning event.
    pub warning: bool,
}

impl Note {
    /// A Normal event.
    pub fn normal(reason: &'static str, message: String) -> Self {
        Note {
            reason,
            message,
            warning: false,
        }
    }
}

/// Keeps the first error, so that one failed write does not stop the others.
pub fn keep(first: &mut Option<Error>, result: Result<(), Error>) {
    if let Err(e) = result {
        warn!(error = %e, "write failed");
        first.get_or_insert(e);
    }
}

/// Records `notes` as events on the maintenance.
pub async fn publish(ctx: &Context, nm: &NodeMaintenance, notes: &[Note]) {
    let reference = nm.object_ref(&());
    for n in notes {
        let event = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.to_string(),
            note: Some(n.message.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let result = ctx.recorder.publish(&event, &reference).await;
        if let Err(err) = result {
            warn!(error = %err, reason = n.reason, "could not record event");
        }
    }
}
