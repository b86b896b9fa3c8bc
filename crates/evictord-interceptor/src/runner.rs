//! The I/O shell of the SDK: a kube-runtime `Controller` on EvictionRequests that asks the
//! [`Interceptor`] for its progress while it is the active interceptor of a request, and writes
//! what [`next_write`] decides as one guarded JSON patch of the `status` subresource.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{Instrument, debug, info_span, warn};

use crate::pods::PodCache;
use crate::progress::{EntryPatch, Progress, Settings, held_until, next_wakeup, next_write};
use crate::registration::{DEFAULT_RENEWAL, keep_registered};
use evictord_api::{EvictionRequest, ServiceAccountReference};

/// The error type interceptors return from [`Interceptor::progress`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An EvictionRequest interceptor: a name and a progress report.
///
/// The runner calls [`Interceptor::progress`] whenever a request whose active interceptor is
/// [`Interceptor::name`] changes (but for the echo of the runner's own status write), and every
/// poll interval while it is in progress. It must be
/// idempotent and keep its state in the cluster (the request's status, annotations on the
/// objects it changes), never in memory: after a restart it is simply asked again.
pub trait Interceptor: Send + Sync + 'static {
    /// The interceptor's name as pods declare it in `evictord.dev/eviction-interceptors`.
    fn name(&self) -> &str;

    /// How far the interceptor got with `request`; `pod` is the target pod (`None` when it is
    /// gone or has another UID).
    ///
    /// # Errors
    /// Any failure (e.g. an API call): logged, and the request is looked at again shortly.
    fn progress(
        &self,
        request: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> impl Future<Output = Result<Progress, BoxError>> + Send;

    /// Whether this runner serves `request` at all; the runner neither asks for progress nor
    /// writes anything for a request it does not accept, and leaves it to another runner of the
    /// same interceptor. The default accepts every request; an interceptor run once per node
    /// (such as the node agent's `kubelet.k8s.io`) accepts only the pods of its node.
    fn accepts(&self, request: &EvictionRequest, pod: Option<&Pod>) -> bool {
        let _ = (request, pod);
        true
    }
}

/// Errors of one look at a request (retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the target pod failed.
    #[error("reading pod {0}: {1}")]
    Pod(String, #[source] kube::Error),
    /// The interceptor failed.
    #[error("interceptor {0}: {1}")]
    Progress(String, #[source] BoxError),
    /// The status patch failed (409/422: the request changed meanwhile; looked at again).
    #[error("patching status of {0}: {1}")]
    Status(String, #[source] kube::Error),
    /// The status patch could not be encoded.
    #[error("encoding the status patch of {0}: {1}")]
    Encode(String, #[source] serde_json::Error),
}

/// Runs an [`Interceptor`] against a cluster, and keeps it registered (SPEC 5.5): it creates the
/// interceptor's `EvictionInterceptor` when none exists (with [`Runner::service_accounts`], else
/// the service account the process runs as) and renews its status heartbeat; it never rewrites
/// the spec of an object that exists.
#[derive(Clone)]
pub struct Runner {
    client: Client,
    settings: Settings,
    namespace: Option<String>,
    register: bool,
    service_accounts: Option<Vec<ServiceAccountReference>>,
    renewal: std::time::Duration,
    pods: Option<PodCache>,
    /// The cache of EvictionRequests the runner's watch fills ([`Runner::requests`]); the
    /// writer is taken by the first run.
    requests: Store<EvictionRequest>,
    writer: Arc<std::sync::Mutex<Option<Writer<EvictionRequest>>>>,
}

struct Context<I> {
    client: Client,
    settings: Settings,
    interceptor: I,
    pods: PodCache,
    echoes: Echoes,
}

/// The runner's own writes of requests, remembered per request:
/// - the watch's echo of a write wakes no look ([`Echoes::is_echo`]): the look that wrote already
///   knows that version and scheduled its next look from it. Any other version (another writer,
///   a version the watch skipped to) is looked at as before;
/// - a look woken before the echo has reached the watch cache (a wake of the interceptor's own,
///   the poll) reads the version written instead of the cache's older one
///   ([`Echoes::latest`]): from the older one it would propose the same write again, and fail
///   its resourceVersion test;
/// - when the runner last wrote it ([`Echoes::last_write`]), for [`held_until`].
#[derive(Clone, Default)]
struct Echoes {
    written: Arc<std::sync::Mutex<std::collections::HashMap<ObjectRef<EvictionRequest>, Written>>>,
}

/// The runner's last write of one request.
struct Written {
    /// The version the write was made from (its resourceVersion test).
    from: Option<String>,
    /// The version kube-apiserver answered with.
    request: Arc<EvictionRequest>,
    /// When.
    at: Timestamp,
    /// Whether the watch has delivered it.
    echoed: bool,
}

/// How many requests' writes are remembered before they are all forgotten (requests deleted,
/// echoes that never come: a watch that listed again past them).
const ECHOES_KEPT: usize = 4096;

impl Echoes {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<ObjectRef<EvictionRequest>, Written>>
    {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The runner wrote `request` (the version kube-apiserver answered with) over version
    /// `from` at `at`.
    fn wrote(&self, from: &EvictionRequest, request: &EvictionRequest, at: Timestamp) {
        let mut written = self.lock();
        if written.len() >= ECHOES_KEPT {
            written.clear();
        }
        written.insert(
            ObjectRef::from_obj(request),
            Written {
                from: from.resource_version(),
                request: Arc::new(request.clone()),
                at,
                echoed: false,
            },
        );
    }

    /// Whether `request` is the echo of the runner's own last write of it (once only).
    fn is_echo(&self, request: &EvictionRequest) -> bool {
        let mut written = self.lock();
        let Some(w) = written.get_mut(&ObjectRef::from_obj(request)) else {
            return false;
        };
        let echo = !w.echoed
            && request.resource_version().is_some()
            && request.resource_version() == w.request.resource_version();
        if echo {
            w.echoed = true;
        }
        echo
    }

    /// `request`, or the version the runner wrote over it when `request` is the version that
    /// write replaced (a cache behind the runner's own write).
    fn latest(&self, request: Arc<EvictionRequest>) -> Arc<EvictionRequest> {
        let written = self.lock();
        match written.get(&ObjectRef::from_obj(request.as_ref())) {
            Some(w) if w.from.is_some() && w.from == request.resource_version() => {
                w.request.clone()
            }
            _ => request,
        }
    }

    /// When the runner last wrote `request` (any version of it), if it remembers.
    fn last_write(&self, request: &EvictionRequest) -> Option<Timestamp> {
        self.lock().get(&ObjectRef::from_obj(request)).map(|w| w.at)
    }
}

impl Runner {
    /// A runner for the requests of every namespace.
    pub fn new(client: Client, settings: Settings) -> Self {
        let writer = Writer::default();
        Self {
            client,
            settings,
            namespace: None,
            register: true,
            service_accounts: None,
            renewal: DEFAULT_RENEWAL,
            pods: None,
            requests: writer.as_reader(),
            writer: Arc::new(std::sync::Mutex::new(Some(writer))),
        }
    }

    /// The runner's watch cache of the EvictionRequests it watches, filled once it runs: for
    /// whoever else in the process reads requests (evictord's settlers). Like any cache it can
    /// be behind; an object it lacks may exist.
    pub fn requests(&self) -> Store<EvictionRequest> {
        self.requests.clone()
    }

    /// Reads the target pods from `pods` (shared with other runners or readers of the process)
    /// instead of a cache of its own (default: one of the runner's namespace, or all).
    pub fn pods(mut self, pods: PodCache) -> Self {
        self.pods = Some(pods);
        self
    }

    /// The service accounts to register the interceptor with, when the runner creates its
    /// `EvictionInterceptor` (default: the one the process runs as, if any). An existing object
    /// keeps its own.
    pub fn service_accounts(mut self, accounts: Vec<ServiceAccountReference>) -> Self {
        self.service_accounts = Some(accounts);
        self
    }

    /// How often the registration's heartbeat is renewed (default one minute).
    pub fn renew_registration_every(mut self, every: std::time::Duration) -> Self {
        self.renewal = every;
        self
    }

    /// Neither creates nor renews the registration (an administrator manages it, or the
    /// runner's account may not write EvictionInterceptors).
    pub fn without_registration(mut self) -> Self {
        self.register = false;
        self
    }

    /// Only the requests of `namespace`.
    pub fn namespaced(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// Runs `interceptor` until `shutdown` completes (a runner runs once: the cache of
    /// [`Runner::requests`] is filled by its first run).
    pub async fn run<I: Interceptor>(
        self,
        interceptor: I,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        self.run_woken(interceptor, futures::stream::empty(), shutdown)
            .await;
    }

    /// [`Runner::run`], and a look at each request `wakes` yields as soon as it yields it,
    /// besides the poll interval: an interceptor waiting on another object wakes its requests
    /// when that object changes ([`Waiters`](crate::Waiters)). A wake of a request the
    /// interceptor is not active on costs nothing but the check.
    pub async fn run_woken<I: Interceptor>(
        self,
        interceptor: I,
        wakes: impl Stream<Item = ObjectRef<EvictionRequest>> + Send + 'static,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        let api: Api<EvictionRequest> = match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let registration = self.register.then(|| {
            tokio::spawn(keep_registered(
                self.client.clone(),
                interceptor.name().to_string(),
                self.service_accounts.clone(),
                self.renewal,
                stop.clone(),
            ))
        });
        let pods = self
            .pods
            .unwrap_or_else(|| PodCache::with_namespace(self.client.clone(), self.namespace));
        let echoes = Echoes::default();
        let ctx = Arc::new(Context {
            client: self.client,
            settings: self.settings,
            interceptor,
            pods,
            echoes: echoes.clone(),
        });
        // The writer of `requests`; a second run of a clone of this runner fills a cache of
        // its own.
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        let store = writer.as_reader();
        let changes = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .reflect(writer)
            .applied_objects()
            .filter(move |r| std::future::ready(!r.as_ref().is_ok_and(|r| echoes.is_echo(r))));
        Controller::for_stream(changes, store)
            .reconcile_on(wakes)
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, ctx)
            .for_each(|result| async move {
                if let Err(e) = result {
                    debug!(error = %e, "interceptor reconcile did not complete");
                }
            })
            .await;
        stop.cancel();
        if let Some(task) = registration {
            let _ = task.await;
        }
    }
}

fn error_policy<I: Interceptor>(
    _req: Arc<EvictionRequest>,
    error: &Error,
    ctx: Arc<Context<I>>,
) -> Action {
    match error {
        Error::Status(_, kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            debug!(%error, "concurrent write; looking again");
            Action::requeue(std::time::Duration::from_millis(200))
        }
        _ => {
            warn!(%error, interceptor = ctx.interceptor.name(), "interceptor step failed; retrying");
            Action::requeue(std::time::Duration::from_secs(2))
        }
    }
}

async fn reconcile<I: Interceptor>(
    req: Arc<EvictionRequest>,
    ctx: Arc<Context<I>>,
) -> Result<Action, Error> {
    let span = info_span!(
        "interceptor",
        interceptor = ctx.interceptor.name(),
        request = %format!("{}/{}", req.namespace().unwrap_or_default(), req.name_any())
    );
    reconcile_inner(req, &ctx).instrument(span).await
}

async fn reconcile_inner<I: Interceptor>(
    req: Arc<EvictionRequest>,
    ctx: &Context<I>,
) -> Result<Action, Error> {
    let name = ctx.interceptor.name();
    let req = ctx.echoes.latest(req);
    let status = req.status.clone().unwrap_or_default();
    if status.is_terminal() || !status.active_interceptors.iter().any(|a| a == name) {
        return Ok(Action::await_change());
    }
    // Completed: not asked again while the controller hands the request on (progress may act).
    if status
        .interceptor(name)
        .is_some_and(|e| e.completion_time.is_some())
    {
        return Ok(Action::await_change());
    }
    let ns = req.namespace().unwrap_or_default();
    let target = &req.spec.target.pod;
    // From the watch cache; live when it lacks the pod (see `PodCache`).
    let pod = ctx
        .pods
        .get(&ns, &target.name, &target.uid)
        .await
        .map_err(|e| Error::Pod(target.name.clone(), e))?;
    if !ctx.interceptor.accepts(&req, pod.as_ref()) {
        return Ok(Action::await_change());
    }
    let progress = ctx
        .interceptor
        .progress(&req, pod.as_ref())
        .await
        .map_err(|e| Error::Progress(name.to_string(), e))?;
    let mut current = (*req).clone();
    let now = Timestamp::now();
    let mut held = None;
    if let Some(patch) = next_write(&req, name, &progress, now, &ctx.settings) {
        held = held_until(
            &req,
            name,
            &progress,
            now,
            ctx.echoes.last_write(&req),
            &ctx.settings,
        );
        if held.is_none() {
            debug!(
                message = patch.entry.message.as_deref().unwrap_or_default(),
                complete = patch.entry.completion_time.is_some(),
                "writing the interceptor's status"
            );
            current = write_entry(&ctx.client, &req, name, &patch).await?;
            ctx.echoes.wrote(&req, &current, now);
        }
    }
    if matches!(progress, Progress::Complete { .. }) {
        return Ok(Action::await_change());
    }
    let mut wakeup = next_wakeup(&current, name, Timestamp::now(), &ctx.settings);
    if let Some(until) = held {
        // The held change is written at the interval's end, if it still holds then.
        let left = Duration::try_from(until.duration_since(Timestamp::now())).unwrap_or_default();
        wakeup = wakeup.min(left.max(Duration::from_millis(100)));
    }
    Ok(Action::requeue(wakeup))
}

/// One JSON patch of the status subresource: it fails (422) unless the request is still the
/// version read and `name` still active, and it replaces only `name`'s own entry.
async fn write_entry(
    client: &Client,
    req: &EvictionRequest,
    name: &str,
    patch: &EntryPatch,
) -> Result<EvictionRequest, Error> {
    let ns = req.namespace().unwrap_or_default();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let i = patch.index;
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": req.resource_version()},
        {"op": "test", "path": "/status/activeInterceptors/0", "value": name},
        {"op": "test", "path": format!("/status/interceptors/{i}/name"), "value": name},
        {"op": "replace", "path": format!("/status/interceptors/{i}"), "value": patch.entry},
    ]))
    .map_err(|e| Error::Encode(req.name_any(), e))?;
    api.patch_status(
        &req.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(ops),
    )
    .await
    .map_err(|e| Error::Status(req.name_any(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use evictord_api::EvictionRequestSpec;

    fn version(name: &str, rv: &str) -> EvictionRequest {
        let mut r = EvictionRequest::new(name, EvictionRequestSpec::default());
        r.metadata.namespace = Some("ns".into());
        r.metadata.resource_version = Some(rv.into());
        r
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn only_the_echo_of_the_own_write_is_one() {
        let e = Echoes::default();
        assert!(!e.is_echo(&version("a", "1")), "nothing written");
        e.wrote(&version("a", "4"), &version("a", "5"), at(0));
        assert!(!e.is_echo(&version("a", "4")), "an older version");
        assert!(!e.is_echo(&version("b", "5")), "another request");
        assert!(e.is_echo(&version("a", "5")));
        assert!(!e.is_echo(&version("a", "5")), "an echo is one-shot");
    }

    /// One row per case of [`Echoes::latest`]: the cache's version of request `a` after the
    /// runner wrote version 5 over version 4 → the version a look reads.
    #[rstest::rstest]
    #[case::cache_behind_the_write("a", "4", "5")]
    #[case::the_echo_itself("a", "5", "5")]
    #[case::someone_wrote_after("a", "6", "6")]
    #[case::another_request("b", "4", "4")]
    fn a_look_reads_at_least_its_own_write(
        #[case] name: &str,
        #[case] cached: &str,
        #[case] read: &str,
    ) {
        let e = Echoes::default();
        e.wrote(&version("a", "4"), &version("a", "5"), at(0));
        let got = e.latest(Arc::new(version(name, cached)));
        assert_eq!(got.resource_version().as_deref(), Some(read));
    }

    #[test]
    fn the_last_write_is_remembered_per_request() {
        let e = Echoes::default();
        assert_eq!(e.last_write(&version("a", "1")), None);
        e.wrote(&version("a", "4"), &version("a", "5"), at(3));
        assert_eq!(e.last_write(&version("a", "9")), Some(at(3)));
        assert_eq!(e.last_write(&version("b", "5")), None);
    }
}
