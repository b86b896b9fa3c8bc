//! evictord's Kubernetes clients: one connection pool per process, and one [`Client`] per
//! component on top of it that names the component in its `User-Agent` and counts its requests
//! (`evictord_kube_api_requests_total`).
//!
//! kube-rs sends no `User-Agent` of its own, so without this kube-apiserver's audit log and API
//! Priority and Fairness could not tell evictord's requests from anyone else's; and the replicas
//! (and the node agents) share a ServiceAccount, so the user agent also names the replica:
//!
//! ```text
//! evictord/<version> (<component>)
//! evictord/<version> (<component>; <identity>)
//! ```
//!
//! The component is one of [`Component`]'s names; the identity is the replica's leader election
//! identity for `evictord serve` (its pod name, `POD_NAME`), the node's name for the node agent,
//! and absent for the kubectl plugin.

mod rate_limit;
mod request_kind;

use std::task::{Context, Poll};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use http::header::USER_AGENT;
use http::{HeaderValue, Request, Response};
use kube::Client;
use kube::client::{Body, ClientBuilder};
use tower::{Layer, Service};

pub use self::rate_limit::{RateLimit, RateLimitLayer, TokenBucket};
pub use self::request_kind::{RequestKind, classify};
use crate::metrics::{KubeApiRequestLabels, metrics};

/// The parts of evictord that talk to kube-apiserver, as the user agent names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    /// The admission webhook's own reads (live lookups, SubjectAccessReviews) and its
    /// certificates.
    Webhook,
    /// The controllers, their shared watch caches, leader election, events and the serving
    /// gate's keeper.
    Controller,
    /// The interceptors `evictord serve` runs (Deployment, HorizontalPodAutoscaler, DaemonSet,
    /// endpoints) and their watches.
    Interceptor,
    /// `evictord node-agent` (the `kubelet.k8s.io` interceptor).
    NodeAgent,
    /// `kubectl evictord`.
    Plugin,
}

impl Component {
    /// Every component, in the order of the documentation.
    pub const ALL: [Component; 5] = [
        Component::Webhook,
        Component::Controller,
        Component::Interceptor,
        Component::NodeAgent,
        Component::Plugin,
    ];

    /// The component's name in the user agent and in the metric's `component` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Webhook => "webhook",
            Component::Controller => "controller",
            Component::Interceptor => "interceptor",
            Component::NodeAgent => "node-agent",
            Component::Plugin => "plugin",
        }
    }
}

/// The `User-Agent` of `component` (see the module's documentation). An identity that cannot
/// be sent in a header (not visible ASCII) or is empty is left out.
pub fn user_agent(component: Component, identity: Option<&str>) -> HeaderValue {
    let version = env!("CARGO_PKG_VERSION");
    let component = component.as_str();
    let with_identity = identity.filter(|i| !i.is_empty()).and_then(|i| {
        HeaderValue::from_str(&format!("evictord/{version} ({component}; {i})")).ok()
    });
    with_identity.unwrap_or_else(|| {
        HeaderValue::from_str(&format!("evictord/{version} ({component})"))
            .unwrap_or_else(|_| HeaderValue::from_static("evictord"))
    })
}

/// The identity of this replica of `evictord serve`: its pod's name (`POD_NAME`), else
/// `evictord-<process id>`. Leader election holds the lease under it, and the user agent names it.
pub fn replica_identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("evictord-{}", std::process::id()))
}

/// The clients of one process: one connection pool and one client-side rate limit (when set),
/// shared by the [`Client`]s [`KubeClients::client`] builds for each component.
#[derive(Clone)]
pub struct KubeClients {
    shared: Client,
    identity: Option<String>,
}

impl KubeClients {
    /// The clients of `config`, whose user agents name `identity`, their requests held to
    /// `limit` all together.
    ///
    /// # Errors
    /// When kube-rs cannot build a client from `config` (TLS, credentials).
    pub fn new(
        config: kube::Config,
        identity: Option<String>,
        limit: Option<RateLimit>,
    ) -> kube::Result<Self> {
        let builder = ClientBuilder::try_from(config)?;
        let shared = match limit {
            Some(limit) => builder.with_layer(&RateLimitLayer(limit)).build(),
            None => builder.build(),
        };
        Ok(Self { shared, identity })
    }

    /// A client for `component`: every request it sends carries the component's user agent
    /// and is counted. Clone it rather than build another: each build starts a small task (the
    /// clients share the connections either way).
    pub fn client(&self, component: Component) -> Client {
        let shared = Shared(self.shared.clone());
        ClientBuilder::new(shared, self.shared.default_namespace())
            .with_layer(&AccountingLayer::new(component, self.identity.as_deref()))
            .with_valid_until(*self.shared.valid_until())
            .build()
    }
}

/// The longest wait for the answer to one request that is not a watch. kube-rs sets no read
/// timeout by default (`Config::read_timeout` is `None`, to keep long-lived connections), so a
/// call on a connection kube-apiserver no longer answers (a peer gone without a reset, a
/// network that drops packets) would wait for ever, holding whatever awaits it: an
/// interceptor's look at a request (and with it the request's heartbeats), a settler's pass, a
/// reconcile. kube-apiserver bounds each such request itself (`--request-timeout`, 60 s by
/// default: a 504 comes first), so this bound cuts only calls it can no longer answer. A watch
/// is bounded by the watcher's own idle timeout instead.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(65);

/// How long a request of `kind` may wait for its answer: [`CALL_TIMEOUT`], and no bound for a
/// watch (it streams until kube-apiserver ends it).
pub fn call_timeout(kind: &RequestKind) -> Option<std::time::Duration> {
    (kind.verb != "watch").then_some(CALL_TIMEOUT)
}

/// A request not answered within its [`call_timeout`].
#[derive(Debug, thiserror::Error)]
#[error("kube-apiserver did not answer {verb} {resource} within {after:?}")]
pub struct CallTimedOut {
    verb: &'static str,
    resource: String,
    after: std::time::Duration,
}

/// The shared client as a service (clones share its connection pool); every request but a
/// watch is bounded by [`call_timeout`].
#[derive(Clone)]
struct Shared(Client);

impl Service<Request<Body>> for Shared {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, kube::Result<Response<Body>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = self.0.clone();
        let kind = classify(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        async move {
            let Some(after) = call_timeout(&kind) else {
                return client.send(request).await;
            };
            match tokio::time::timeout(after, client.send(request)).await {
                Ok(answer) => answer,
                Err(_) => Err(kube::Error::Service(Box::new(CallTimedOut {
                    verb: kind.verb,
                    resource: kind.resource,
                    after,
                }))),
            }
        }
        .boxed()
    }
}

/// Sets a component's user agent on each request and counts it in
/// `evictord_kube_api_requests_total` by verb, resource and status code (`error` when no
/// response came).
#[derive(Clone)]
pub struct AccountingLayer {
    component: Component,
    user_agent: HeaderValue,
}

impl AccountingLayer {
    /// The layer of `component` on the replica `identity`.
    pub fn new(component: Component, identity: Option<&str>) -> Self {
        Self {
            component,
            user_agent: user_agent(component, identity),
        }
    }
}

impl<S> Layer<S> for AccountingLayer {
    type Service = Accounting<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Accounting {
            inner,
            component: self.component,
            user_agent: self.user_agent.clone(),
        }
    }
}

/// The service of [`AccountingLayer`].
#[derive(Clone)]
pub struct Accounting<S> {
    inner: S,
    component: Component,
    user_agent: HeaderValue,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Accounting<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        request
            .headers_mut()
            .insert(USER_AGENT, self.user_agent.clone());
        let kind = classify(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        let component = self.component.as_str();
        self.inner
            .call(request)
            .map(move |result| {
                let code = match &result {
                    Ok(response) => response.status().as_str().to_string(),
                    Err(_) => "error".to_string(),
                };
                metrics()
                    .kube_api_requests
                    .get_or_create(&KubeApiRequestLabels {
                        component,
                        verb: kind.verb,
                        resource: kind.resource,
                        code,
                    })
                    .inc();
                result
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request is bounded but a watch (both spellings), which streams.
    #[rstest::rstest]
    #[case::get("GET", "/api/v1/namespaces/ns/pods/p", None, true)]
    #[case::list("GET", "/apis/apps/v1/namespaces/ns/deployments", None, true)]
    #[case::patch(
        "PATCH",
        "/apis/evictord.dev/v1alpha1/namespaces/ns/evictionrequests/u/status",
        None,
        true
    )]
    #[case::eviction("POST", "/api/v1/namespaces/ns/pods/p/eviction", None, true)]
    #[case::watch("GET", "/api/v1/pods", Some("watch=true&resourceVersion=5"), false)]
    #[case::watch_path("GET", "/api/v1/watch/namespaces/ns/pods", None, false)]
    #[case::not_a_watch("GET", "/api/v1/pods", Some("watch=false"), true)]
    fn call_timeout_rows(
        #[case] method: &str,
        #[case] path: &str,
        #[case] query: Option<&str>,
        #[case] bounded: bool,
    ) {
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        let kind = classify(&method, path, query);
        assert_eq!(
            call_timeout(&kind),
            bounded.then_some(CALL_TIMEOUT),
            "{kind:?}"
        );
    }

    #[test]
    fn user_agent_names_the_component_and_the_replica() {
        let v = env!("CARGO_PKG_VERSION");
        let rows = [
            (
                Component::Controller,
                Some("evictord-7d9c-x2x4q"),
                format!("evictord/{v} (controller; evictord-7d9c-x2x4q)"),
            ),
            (Component::Webhook, None, format!("evictord/{v} (webhook)")),
            (
                Component::Interceptor,
                Some(""),
                format!("evictord/{v} (interceptor)"),
            ),
            (
                Component::NodeAgent,
                Some("node-1"),
                format!("evictord/{v} (node-agent; node-1)"),
            ),
            (Component::Plugin, None, format!("evictord/{v} (plugin)")),
            // not a header value: left out
            (
                Component::Controller,
                Some("a\nb"),
                format!("evictord/{v} (controller)"),
            ),
        ];
        for (component, identity, expected) in rows {
            assert_eq!(
                user_agent(component, identity),
                expected,
                "{component:?} {identity:?}"
            );
        }
    }

    /// The layer sets the user agent and counts each request by its answer's code, or `error`.
    #[tokio::test]
    async fn the_layer_names_and_counts_each_request() {
        use tower::ServiceExt as _;
        let inner = tower::service_fn(|request: Request<()>| async move {
            let agent = request.headers().get(USER_AGENT).cloned();
            match request.uri().path() {
                "/fail" => Err("connection refused"),
                _ => Ok(Response::builder()
                    .status(201)
                    .header("seen-user-agent", agent.unwrap())
                    .body(())
                    .unwrap()),
            }
        });
        let mut service = AccountingLayer::new(Component::Plugin, Some("r")).layer(inner);
        let path = "/apis/accounting.test/v1/namespaces/ns/widgets/w/eviction";
        let request = |uri: &str| Request::post(uri).body(()).unwrap();
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(path))
            .await
            .unwrap();
        let agent = format!("evictord/{} (plugin; r)", env!("CARGO_PKG_VERSION"));
        assert_eq!(response.headers()["seen-user-agent"], agent.as_str());
        assert!(
            service
                .ready()
                .await
                .unwrap()
                .call(request("/fail"))
                .await
                .is_err()
        );
        let count = |verb, resource: &str, code: &str| {
            metrics()
                .kube_api_requests
                .get_or_create(&KubeApiRequestLabels {
                    component: "plugin",
                    verb,
                    resource: resource.to_string(),
                    code: code.to_string(),
                })
                .get()
        };
        assert_eq!(count("create", "widgets/eviction", "201"), 1);
        assert_eq!(count("post", "/fail", "error"), 1);
    }
}
