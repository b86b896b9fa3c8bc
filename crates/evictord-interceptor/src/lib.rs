//! The evictord interceptor SDK (SPEC 5.2): write an EvictionRequest interceptor as a small
//! program, against the Kubernetes API alone.
//!
//! An interceptor implements [`Interceptor`]: given the EvictionRequest and its pod, it says how
//! far it got ([`Progress`]). The [`Runner`] does the protocol around it:
//!
//! - it watches EvictionRequests in every namespace (or one) and calls the interceptor only for
//!   requests whose `status.activeInterceptors` names it and that are neither `Evicted` nor
//!   `Canceled` (so work stops when a request is canceled or the pod is evicted);
//! - it writes the interceptor's own `status.interceptors[]` entry ([`next_write`], pure): the
//!   `startTime` with the first heartbeat, heartbeats no faster than the minimum interval and well
//!   before the deadline ([`heartbeat_due`]), the progress message, `expectedFinishTime` and,
//!   once, `completionTime`;
//! - each write is one JSON patch of the `status` subresource that tests the resourceVersion and
//!   the active interceptor and replaces only the interceptor's own entry, so it passes the
//!   webhook's rules S2–S4 and never clobbers a concurrent write (a conflict is retried);
//! - it looks at a request in progress again every poll interval, and at once when a wake names
//!   it ([`Runner::run_woken`]; an interceptor waiting on another object registers the request
//!   in [`Waiters`] and feeds that object's changes to [`Waiters::woken_by`]);
//! - it reads the target pod from a watch cache ([`PodCache`]: the pods of the nodes its requests'
//!   pods run on), live only when the cache lacks the pod, instead of a GET per look (it needs
//!   `list` and `watch` on pods for that; without, it reads each pod live, as before);
//! - it keeps no state in memory but caches: everything is read back from the request's status,
//!   so a restarted process carries on where the last one stopped;
//! - it registers the interceptor ([`registration`], SPEC 5.5): creates its `EvictionInterceptor`
//!   when none exists and renews the object's status heartbeat while it runs.
//!
//! The crate depends on [`evictord_api`] (the custom resource types) and kube; not on the
//! webhook server, its TLS stack, Prometheus or OpenTelemetry. evictord's own interceptors
//! (`deployment.apps.k8s.io`, `daemonset.apps.k8s.io`,
//! `horizontalpodautoscaler.autoscaling.k8s.io`, `kubelet.k8s.io`) are built on it.
//!
//! A complete interceptor (it needs a cluster, so the example is compiled, not run):
//!
//! ```no_run
//! use evictord_api::EvictionRequest;
//! use evictord_interceptor::{BoxError, Interceptor, Progress, Runner, Settings};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! /// Completes at once, saying so: the next interceptor (or the Eviction API) takes over.
//! struct Hello;
//!
//! impl Interceptor for Hello {
//!     fn name(&self) -> &str {
//!         "hello.example.com"
//!     }
//!
//!     async fn progress(
//!         &self,
//!         _request: &EvictionRequest,
//!         pod: Option<&Pod>,
//!     ) -> Result<Progress, BoxError> {
//!         Ok(match pod {
//!             Some(_) => Progress::complete("nothing to do before the pod goes"),
//!             None => Progress::complete("the pod is gone"),
//!         })
//!     }
//! }
//!
//! # async fn run() -> Result<(), kube::Error> {
//! let client = kube::Client::try_default().await?;
//! Runner::new(client, Settings::default())
//!     .run(Hello, async {
//!         let _ = tokio::signal::ctrl_c().await;
//!     })
//!     .await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod pods;
mod progress;
pub mod registration;
mod runner;
mod waiters;

pub use pods::{NodeHint, PodCache};
pub use progress::{
    EntryPatch, Progress, Settings, heartbeat_due, held_until, next_wakeup, next_write,
    whole_seconds,
};
pub use runner::{BoxError, Error, Interceptor, Runner};
pub use waiters::Waiters;
