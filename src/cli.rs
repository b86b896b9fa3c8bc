//! The command line (clap): `serve`, `crds`, `webhook-config`, `review`, `node-agent`, and the
//! hidden `docs` (the book's generated reference pages).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

/// evictord: cooperative, observable and safe pod eviction and node maintenance.
#[derive(Debug, Parser)]
#[command(name = "evictord", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook and run the controllers.
    Serve(Box<ServeArgs>),
    /// Print the CustomResourceDefinitions (apiextensions.k8s.io/v1) as YAML.
    Crds,
    /// Print webhook configurations that register a locally running server by URL.
    WebhookConfig(WebhookConfigArgs),
    /// Review one AdmissionReview offline, exactly as the server would, and print the response.
    Review(ReviewArgs),
    /// Serve `kubelet.k8s.io` for the static pods of one node (run on each node, as a DaemonSet).
    NodeAgent(NodeAgentArgs),
    /// Print a generated reference page of the book (`make reference` writes them).
    #[command(hide = true)]
    Docs {
        /// Which page.
        #[arg(value_enum)]
        page: DocsPage,
    },
}

/// The generated reference pages of the book (`docs/src/reference/`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DocsPage {
    /// Every `evictord` command and flag.
    Flags,
    /// Every field of the custom resources.
    Crds,
}

/// Parses `90s`, `20m`, `1h`, `1h30m`.
///
/// # Errors
/// When the text is not a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 90s, 20m or 1h: {e}"))
}

/// Rule settings shared by `serve` and `review`.
#[derive(Debug, Clone, Args)]
pub struct RuleArgs {
    /// Heartbeat deadline of an interceptor when `spec.heartbeatDeadlineSeconds` is unset.
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    pub interceptor_deadline: Duration,
    /// Minimum step between two heartbeats of an interceptor.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub min_heartbeat_interval: Duration,
    /// `*.k8s.io` interceptor names accepted besides the built-in allowlist (comma-separated).
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub extra_k8s_io_interceptors: Vec<String>,
    /// How long the Eviction API bridge keeps its requester (`eviction-api.evictord.dev`) on a
    /// request after the last intercepted call; then the requester is removed, and the request
    /// canceled if it was the only one. Keep it above the longest pause of your slowest drainer:
    /// Kubernetes' in-tree `imperative-eviction.k8s.io/evictor` responder waits up to 10m
    /// between two calls.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub eviction_api_requester_ttl: Duration,
    /// What an interceptor without an EvictionInterceptor object costs: `off` (nothing),
    /// `warn` (warnings at pod admission, events, node status messages, `kubectl evictord plan`)
    /// or `enforce` (in addition, passed over `--unregistered-interceptor-grace` after its
    /// activation; only a registered interceptor's service accounts or evictord change its entry,
    /// rule S7).
    #[arg(long, default_value = "warn")]
    pub interceptor_registration: crate::api::RegistrationMode,
    /// Under `--interceptor-registration=enforce`, how long an unregistered interceptor keeps its
    /// turn after its activation.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub unregistered_interceptor_grace: Duration,
    /// The user name evictord's own API calls arrive under (rule S7 lets evictord write every
    /// interceptor entry). Default: read from evictord's credentials (the impersonated user, a
    /// service account token's subject, or the client certificate's common name).
    #[arg(long, env = "EVICTORD_OWN_USER")]
    pub own_user: Option<String>,
    /// How long the `endpoints.evictord.dev` interceptor keeps a pod out of every ready endpoint
    /// of its Services before it lets the eviction go on, for a pod without a valid
    /// `evictord.dev/deregistration-delay` annotation (at most 1h): the time your load balancers
    /// take to deregister a target.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub deregistration_delay: Duration,
}

impl RuleArgs {
    /// The admission settings these flags describe.
    pub fn settings(&self) -> crate::admission::Settings {
        crate::admission::Settings {
            extra_k8s_io_interceptors: self
                .extra_k8s_io_interceptors
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
            min_heartbeat_interval: self.min_heartbeat_interval,
            interceptor_deadline: self.interceptor_deadline,
            eviction_api_requester_ttl: self.eviction_api_requester_ttl,
            interceptor_registration: self.interceptor_registration,
            unregistered_interceptor_grace: self.unregistered_interceptor_grace,
            own_user: self.own_user.clone().filter(|u| !u.is_empty()),
            deregistration_delay: self.deregistration_delay,
            ..Default::default()
        }
    }
}

/// `evictord serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Kubeconfig file. Default: in-cluster configuration or `$KUBECONFIG`/`~/.kube/config`;
    /// when none works, offline mode (only the rules that need no cluster are served).
    #[arg(long, env = "EVICTORD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the HTTPS admission webhook server.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,
    /// Address of the plain-HTTP server for `/livez`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub probe_addr: SocketAddr,
    /// Directory with `tls.crt`, `tls.key`, `ca.crt`; generated with rcgen when missing.
    #[arg(long, default_value = "certs")]
    pub cert_dir: PathBuf,
    /// Secret (in `--service-namespace`) holding the certificates; takes precedence over
    /// `--cert-dir` when connected to a cluster. Created when missing.
    #[arg(long)]
    pub tls_secret: Option<String>,
    /// Service name of the webhook (for the certificate's DNS names).
    #[arg(long)]
    pub service_name: Option<String>,
    /// Namespace of the Service, the Secret and the lease.
    #[arg(long, env = "POD_NAMESPACE")]
    pub service_namespace: Option<String>,
    /// Name of evictord's Validating/MutatingWebhookConfiguration whose `caBundle` to patch.
    #[arg(long)]
    pub webhook_config_name: Option<String>,
    /// Patch the generated CA into the webhook configurations' `caBundle`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub patch_ca_bundle: bool,
    /// Validity of generated serving certificates (renewed at two thirds).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// How often certificates are checked for rotation (files or Secret changed, renewal due).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,
    /// After SIGTERM, how long the webhook goes on serving every connection, new ones too (each
    /// HTTP/1 answer with `Connection: close`), while `/readyz` answers 503 and the controllers
    /// stop, before it closes its connections gracefully. kube-apiserver keeps its connections
    /// to a replica, and a Service routes new ones to it until its endpoints are updated: a
    /// webhook call cut by the close fails open (`failurePolicy: Ignore`), and an Eviction API
    /// call that does goes past the pod's interceptors. A second SIGTERM or SIGINT ends the wait.
    #[arg(
        long,
        env = "EVICTORD_SHUTDOWN_DELAY",
        default_value = "5s",
        value_parser = parse_duration
    )]
    pub shutdown_delay: Duration,
    /// Controllers to run: `all`, `none`, or a comma list of `evictionrequest`, `nodemaintenance`.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub controllers: Vec<String>,
    /// First retry delay after a failed Eviction API call (doubles up to the cap).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub eviction_backoff_base: Duration,
    /// Largest retry delay after failed Eviction API calls.
    #[arg(long, default_value = "1000s", value_parser = parse_duration)]
    pub eviction_backoff_cap: Duration,
    /// How long an EvictionRequest is kept after it ended (`Evicted` or `Canceled`) before the
    /// controller deletes it, like a Job's `ttlSecondsAfterFinished` (`0s`: at once).
    #[arg(long, default_value = "4h", value_parser = parse_duration)]
    pub ended_request_retention: Duration,
    /// Run the controllers only on the replica holding the coordination.k8s.io Lease.
    #[arg(long, default_value_t = false)]
    pub leader_election: bool,
    /// Namespace of the leader election Lease (default: `--service-namespace`, else `default`).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "evictord-controllers")]
    pub leader_election_id: String,
    /// Lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Run the `deployment.apps.k8s.io` interceptor (surge Deployments before their pods are
    /// evicted) with the controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub deployment_interceptor: bool,
    /// Run the `horizontalpodautoscaler.autoscaling.k8s.io` interceptor (raise an autoscaler's
    /// `minReplicas` before the pods of its workload are evicted) with the controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub hpa_interceptor: bool,
    /// Run the `daemonset.apps.k8s.io` interceptor with the controllers: a node maintenance in
    /// Drain removes DaemonSet pods in plan order and keeps them off the node (the
    /// `evictord.dev/maintenance` taint) until it completes. `=false`: DaemonSet pods stay, as
    /// with `kubectl drain --ignore-daemonsets`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub daemonset_interceptor: bool,
    /// While a NodeMaintenance holds a node (Cordon, Drain), label it
    /// `node.kubernetes.io/exclude-from-external-load-balancers=true` so that the service
    /// controller takes it out of node-targeted load balancers first; its previous value is
    /// restored at Complete.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub exclude_from_external_load_balancers: bool,
    /// Run the `endpoints.evictord.dev` interceptor with the controllers (take a pod out of its
    /// Services' ready endpoints, wait until it is out and for its deregistration delay, then let
    /// the eviction go on), and have the pod webhook add the `evictord.dev/serving` readiness gate
    /// to the pods that declare it (rule P9).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub endpoints_interceptor: bool,
    /// How long the `endpoints.evictord.dev` interceptor waits for a pod it made unready to leave
    /// the ready endpoints of every Service that selects it, before it goes on with the delay
    /// anyway (a Warning event names the Services).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub endpoints_wait_timeout: Duration,
    /// How long after `endpoints.evictord.dev` completed an eviction may still be refused before
    /// the pod is given back to its Services (`evictord.dev/serving` set `True` again, on every
    /// replica).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub serving_restore_after: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Rule settings.
    #[command(flatten)]
    pub rules: RuleArgs,
    /// Client-side rate limit of the Kubernetes API requests.
    #[command(flatten)]
    pub kube_api: KubeApiArgs,
}

/// The client-side rate limit of a process's Kubernetes API requests, all components together
/// (`evictord serve`, `evictord node-agent`).
#[derive(Debug, Clone, Args)]
pub struct KubeApiArgs {
    /// Kubernetes API requests per second this process sends at most on average, all components
    /// together (a token bucket, as kube-controller-manager's `--kube-api-qps`; a watch takes one
    /// token when it starts). 0: no limit.
    #[arg(long, default_value_t = 0.0)]
    pub kube_api_qps: f64,
    /// Kubernetes API requests this process may send at once (the bucket's size, as
    /// kube-controller-manager's `--kube-api-burst`). Unused when `--kube-api-qps` is 0.
    #[arg(long, default_value_t = 100)]
    pub kube_api_burst: u32,
}

impl KubeApiArgs {
    /// The limit, `None` when `--kube-api-qps` is 0.
    pub fn rate_limit(&self) -> Option<crate::kube_client::RateLimit> {
        crate::kube_client::RateLimit::from_flags(self.kube_api_qps, self.kube_api_burst)
    }
}

impl ServeArgs {
    /// True when the named controller is enabled.
    pub fn controller_enabled(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c == "all" || c == name)
    }
}

/// `evictord node-agent`. A flag given twice takes the last value (`nodeAgent.extraArgs` can
/// override the chart's own flags).
#[derive(Debug, Clone, Args)]
#[command(args_override_self = true)]
pub struct NodeAgentArgs {
    /// Kubeconfig file. Default: in-cluster configuration or `$KUBECONFIG`/`~/.kube/config`.
    #[arg(long, env = "EVICTORD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The node this agent runs on (the downward API's `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The agent's name in the node's `evictord.dev/node-agent` annotation (its pod name).
    #[arg(long, env = "POD_NAME", default_value = "evictord-node-agent")]
    pub agent_name: String,
    /// The kubelet's static pod directory (`--pod-manifest-path`, `staticPodPath`).
    #[arg(long, default_value = "/etc/kubernetes/manifests")]
    pub static_pod_path: PathBuf,
    /// Address of the plain-HTTP server for `/livez`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub probe_addr: SocketAddr,
    /// How often the held manifests are checked against the NodeMaintenances besides on every
    /// change of one.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub check_interval: Duration,
    /// The webhook's `--interceptor-deadline` (heartbeat cadence).
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    pub interceptor_deadline: Duration,
    /// The webhook's `--min-heartbeat-interval`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub min_heartbeat_interval: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Client-side rate limit of the Kubernetes API requests.
    #[command(flatten)]
    pub kube_api: KubeApiArgs,
}

/// `evictord webhook-config`.
#[derive(Debug, Clone, Args)]
pub struct WebhookConfigArgs {
    /// Base URL of the running server, e.g. `https://127.0.0.1:8443`.
    #[arg(long)]
    pub url_base: String,
    /// PEM file of the CA that signed the server's certificate.
    #[arg(long)]
    pub ca_file: PathBuf,
    /// Name of both configurations.
    #[arg(long, default_value = "evictord")]
    pub name: String,
    /// Emit the Pod webhook's `matchConditions` (needs Kubernetes ≥ 1.28; older servers
    /// reject or drop the field).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub match_conditions: bool,
}

/// `evictord review`.
#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    /// AdmissionReview file (JSON or YAML); standard input when absent.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Multi-document YAML/JSON of Pods, Nodes, EvictionRequests, NodeMaintenances and
    /// EvictionInterceptors that forms the cluster view; without it, lookups are unknown.
    #[arg(long)]
    pub objects: Option<PathBuf>,
    /// The time of the review (RFC 3339); default now.
    #[arg(long)]
    pub now: Option<jiff::Timestamp>,
    /// Rule settings.
    #[command(flatten)]
    pub rules: RuleArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag's default is the one the settings use when no flag is given.
    #[test]
    fn requester_ttl_default_is_the_bridge_default() {
        let cli = Cli::try_parse_from(["evictord", "serve"]).expect("parses");
        let Command::Serve(serve) = cli.command else {
            panic!("serve");
        };
        let ttl = serve.rules.eviction_api_requester_ttl;
        assert_eq!(ttl, crate::admission::pod_eviction::DEFAULT_REQUESTER_TTL);
        assert_eq!(
            ttl,
            crate::admission::Settings::default().eviction_api_requester_ttl
        );
        assert_eq!(
            ttl,
            crate::controller::eviction_request::DecideSettings::default()
                .eviction_api_requester_ttl
        );
    }
}
