//! The pool part's kube-apiserver requests by client (issue 44): kube-apiserver writes every
//! request at the Metadata level to its audit log while the part runs
//! ([`crate::support::TestCluster::set_request_audit`]), and each mode's requests received in its
//! drain's window (the window of kube-apiserver's own counters) are split by the user agent that
//! sent them ([`crate::support::audit::client_of`]): evictord (by component), kube-controller-manager,
//! kubectl, the played kubelet and scheduler, the benchmark's own harness, kube-apiserver's own
//! loopback requests, other. Per evicted pod; evictord's also charged to the pods they served
//! ([`crate::pool_attribution`]) and per pod of each class — *intercepted* (its EvictionRequest
//! had an interceptor besides `imperative-eviction.k8s.io`), without interceptors and never
//! refused, refused by a PodDisruptionBudget at least once — each class with its share of the
//! requests that served no single pod; and beside an idle baseline: evictord's requests on the
//! settled pool over a quiet window before the drain (`EVICTORD_BENCH_POOL_IDLE`), per second, so that its watches and lease renewals show apart
//! from the drain's work. Also the goals table's rows of issue 44, and kube-apiserver's own
//! histograms of the window's requests ([`top_histograms`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;

use crate::goal_row::{Goal, Verdict};
use crate::pool_attribution::{Attribution, PodClass, PodClasses};
use crate::pool_mode::Drainer;
use crate::pool_results::{ModeResult, PoolResults};
use crate::support::audit::{self, ClientCounts};
use crate::support::pool::workloads::Variant;

/// Issue 44's goal: evictord's own requests per intercepted pod at most this many (those that
/// served intercepted pods and their share of those that served no single pod).
pub const EVICTORD_PER_INTERCEPTED: f64 = 16.0;
/// Issue 44's goal: evictord's own requests per pod without interceptors whose eviction was
/// never refused at most this many (reckoned as [`EVICTORD_PER_INTERCEPTED`]).
pub const EVICTORD_PER_PLAIN: f64 = 6.0;
/// Issue 44's goal: all clients' requests per evicted pod at most this many times `kubectl
/// drain`'s alone, in the same form of the finishable pool.
pub const ALL_CLIENTS_RATIO: f64 = 1.5;

/// The clients of the split, in the report's order, with what each is.
pub const CLIENTS: [(&str, &str); 8] = [
    ("evictord", "evictord, every component"),
    ("kube-controller-manager", "kube-controller-manager"),
    ("kubectl", "kubectl (its own user agent)"),
    (
        "pool-kubelet",
        "the played kubelet (its watches of the pool's pods and nodes, shared with the played scheduler; pod status, removals)",
    ),
    ("pool-scheduler", "the played scheduler (bindings)"),
    (
        "test-harness",
        "the benchmark's harness (its samplers' watches, kube-apiserver's /metrics, the NodeMaintenance it creates and waits on)",
    ),
    ("kube-apiserver", "kube-apiserver's own loopback requests"),
    ("other", "any other user agent"),
];

/// The kinds of evictord's requests a mode's details name, most frequent first.
const MOST_FREQUENT: usize = 15;

/// evictord's components, in the report's order.
const COMPONENTS: [&str; 5] = [
    "webhook",
    "controller",
    "interceptor",
    "node-agent",
    "plugin",
];

/// A window's start and end.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub from: SystemTime,
    pub to: SystemTime,
}

impl Window {
    fn seconds(&self) -> f64 {
        self.to
            .duration_since(self.from)
            .unwrap_or_default()
            .as_secs_f64()
    }
}

/// One mode's requests by client.
#[derive(Clone, Debug, Serialize)]
pub struct ClientFigures {
    /// The drain's window, seconds (as kube-apiserver's counters).
    pub window_seconds: f64,
    /// The requests received in it.
    pub window: ClientCounts,
    pub evicted_pods: usize,
    /// Pods whose EvictionRequest had an interceptor besides `imperative-eviction.k8s.io`
    /// (evictord's modes).
    pub intercepted_pods: Option<usize>,
    /// evictord's requests in the window charged to the pods they served (evictord's modes).
    pub attribution: Option<Attribution>,
    /// The idle baseline before the drain (evictord's modes), seconds, and its requests.
    pub idle_seconds: Option<f64>,
    pub idle: Option<ClientCounts>,
}

impl ClientFigures {
    /// From the audit log at `log`, read after the mode's clean-up (kube-apiserver 1.20 logs a
    /// watch when it ends: evictord's and the played kubelet's have ended by then); `classes`:
    /// the pods of the mode's EvictionRequests (evictord's modes).
    pub fn read(
        log: &Path,
        window: Window,
        idle: Option<Window>,
        evicted_pods: usize,
        intercepted_pods: Option<usize>,
        classes: Option<&PodClasses>,
    ) -> ClientFigures {
        let with_objects = audit::requests_with_objects(log);
        let requests: Vec<audit::AuditedRequest> =
            with_objects.iter().map(|(r, _)| r.clone()).collect();
        ClientFigures {
            window_seconds: window.seconds(),
            window: audit::count_by_client(&requests, window.from, window.to),
            evicted_pods,
            intercepted_pods,
            attribution: classes.map(|c| {
                crate::pool_attribution::attribute(&with_objects, window.from, window.to, c)
            }),
            idle_seconds: idle.map(|w| w.seconds()),
            idle: idle.map(|w| audit::count_by_client(&requests, w.from, w.to)),
        }
    }

    fn per_evicted(&self, n: usize) -> f64 {
        n as f64 / self.evicted_pods.max(1) as f64
    }

    /// Every client's requests per evicted pod.
    pub fn all_per_evicted(&self) -> f64 {
        self.per_evicted(self.window.total)
    }

    /// All of evictord's requests ÷ intercepted pods (the figure before the attribution, kept
    /// so that past reports compare; `None`: no intercepted pod).
    pub fn evictord_all_per_intercepted(&self) -> Option<f64> {
        self.intercepted_pods
            .filter(|n| *n > 0)
            .map(|n| self.window.of("evictord") as f64 / n as f64)
    }

    /// One line for the benchmark's log.
    pub fn summary(&self) -> String {
        let mut o = format!(
            "kube-apiserver requests by client per evicted pod: all {:.1}, {}",
            self.all_per_evicted(),
            CLIENTS
                .iter()
                .map(|(c, _)| format!("{c} {:.1}", self.per_evicted(self.window.of(c))))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(a) = &self.attribution {
            o += &format!("; evictord by pod served: {}", attributed(a));
        }
        if let Some(x) = self.evictord_all_per_intercepted() {
            o += &format!(
                "; all of evictord's requests ÷ intercepted pods {x:.1}, idle {}/s",
                self.idle_evictord_per_second()
                    .map_or("-".into(), |r| format!("{r:.2}"))
            );
        }
        o
    }

    /// evictord's requests per second over the idle baseline.
    pub fn idle_evictord_per_second(&self) -> Option<f64> {
        let (idle, seconds) = (self.idle.as_ref()?, self.idle_seconds?);
        (seconds > 0.0).then(|| idle.of("evictord") as f64 / seconds)
    }

    /// evictord's [`MOST_FREQUENT`] most frequent kinds of request, `component verb resource answer n`.
    fn most_frequent(counts: &ClientCounts) -> String {
        most_frequent(&counts.evictord_by_request, MOST_FREQUENT)
    }

    /// evictord's requests per component, `name n`.
    fn components(counts: &ClientCounts) -> String {
        let mut parts: Vec<String> = COMPONENTS
            .iter()
            .filter_map(|c| {
                counts
                    .evictord_by_component
                    .get(*c)
                    .map(|n| format!("{c} {n}"))
            })
            .collect();
        parts.extend(
            counts
                .evictord_by_component
                .iter()
                .filter(|(c, _)| !COMPONENTS.contains(&c.as_str()))
                .map(|(c, n)| format!("{c} {n}")),
        );
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The `n` most frequent kinds of `by_kind`, `kind count`, the most frequent first (ties by
/// kind), comma-separated.
pub fn most_frequent(by_kind: &BTreeMap<String, usize>, n: usize) -> String {
    let mut kinds: Vec<(&String, &usize)> = by_kind.iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    kinds
        .iter()
        .take(n)
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the report calls a class of pods.
fn label(class: PodClass) -> &'static str {
    match class {
        PodClass::Intercepted => "intercepted pods",
        PodClass::Plain => "pods without interceptors never refused",
        PodClass::Refused => "pods without interceptors refused at least once",
    }
}

/// evictord's requests per pod of `class`, `**x** (n pods)`, or `-` without such pods.
fn per_pod_cell(a: Option<&Attribution>, class: PodClass) -> String {
    a.and_then(|a| Some((a.per_pod(class)?, a.pods.get(class))))
        .map_or("-".into(), |(x, n)| format!("**{x:.1}** ({n} pods)"))
}

/// `(own + shared × pods ÷ all pods) ÷ pods = x` for `class`.
fn per_pod_sum(a: &Attribution, class: PodClass, x: f64) -> String {
    let n = a.pods.get(class);
    format!(
        "({} + {} × {n}/{}) ÷ {n} = **{x:.1}**",
        a.charged.get(class),
        a.shared,
        a.pods.total()
    )
}

/// The attribution in words: each class's own requests, its share, per pod; the shared ones.
fn attributed(a: &Attribution) -> String {
    let mut parts: Vec<String> = PodClass::ALL
        .iter()
        .map(|c| match a.per_pod(*c) {
            Some(x) => format!(
                "{}: {} own + {:.0} shared = {x:.1} per pod ({} pods)",
                label(*c),
                a.charged.get(*c),
                a.share(*c),
                a.pods.get(*c)
            ),
            None => format!("{}: none ({} own requests)", label(*c), a.charged.get(*c)),
        })
        .collect();
    parts.push(format!(
        "shared: {} ({} per pod with an EvictionRequest, {} pods)",
        a.shared,
        a.shared_per_pod().map_or("-".into(), |x| format!("{x:.1}")),
        a.pods.total()
    ));
    let mut o = parts.join(", ");
    if a.unnamed_creates > 0 {
        o += &format!(
            "; {} EvictionRequest creates named no object in the audit log: charged one per EvictionRequest of each class, the rest shared",
            a.unnamed_creates
        );
    }
    o
}

/// The table of requests by client, one row per mode (in the pool section of `REPORT.md`).
pub fn table(p: &PoolResults) -> String {
    let mut o = String::from(
        "kube-apiserver's requests by client (its audit log, Metadata level, requests received in each mode's window, split by user agent; a watch counts once), **per evicted pod**; evictord's also per pod of each class (below), and its idle baseline: its requests per second on the settled pool before the drain, with nothing to do (watches, lease), and that rate × the window. evictord's requests **per pod of a class** are its own plus its share of the shared ones: (the requests that served the class's pods + the shared requests × the class's pods ÷ all pods with an EvictionRequest) ÷ the class's pods. A request serves a pod when it names its EvictionRequest (named after the pod's UID), the pod itself (`pods/eviction` included), or is an event about either; the Deployments, ReplicaSets and HorizontalPodAutoscalers evictord writes, and the interceptors' lists and watches of one namespace's pods (a surged workload's readiness), serve the intercepted pods (their surges). The rest is shared: nodes, NodeMaintenances, MaintenanceBudgets, leases, lists and watches, SubjectAccessReviews. The classes: *intercepted* (its EvictionRequest had an interceptor besides `imperative-eviction.k8s.io`), *plain* (no other interceptor, no Eviction API call refused), *refused* (no other interceptor, refused by a PodDisruptionBudget at least once: each refusal adds its retry).\n\n| mode | all clients | evictord (webhook / controller / interceptor / plugin) | kube-controller-manager | kubectl | played kubelet | played scheduler | benchmark harness | kube-apiserver | other | evictord per intercepted pod (own + share of shared) | evictord per plain pod (own + share of shared) | evictord per refused pod (own + share of shared) | evictord's shared requests per pod with an EvictionRequest | evictord idle: requests/s (× window) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for outcome in &p.modes {
        let Ok(m) = &outcome.result else { continue };
        let Some(f) = &m.clients else {
            o += &format!("| `{}` | not measured ||||||||||||||\n", m.id);
            continue;
        };
        let per = |client: &str| format!("{:.1}", f.per_evicted(f.window.of(client)));
        let component =
            |c: &str| f.per_evicted(f.window.evictord_by_component.get(c).copied().unwrap_or(0));
        o += &format!(
            "| `{}` | **{:.1}** | **{}** ({:.1} / {:.1} / {:.1} / {:.1}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            m.id,
            f.all_per_evicted(),
            per("evictord"),
            component("webhook"),
            component("controller"),
            component("interceptor"),
            component("plugin"),
            per("kube-controller-manager"),
            per("kubectl"),
            per("pool-kubelet"),
            per("pool-scheduler"),
            per("test-harness"),
            per("kube-apiserver"),
            per("other"),
            per_pod_cell(f.attribution.as_ref(), PodClass::Intercepted),
            per_pod_cell(f.attribution.as_ref(), PodClass::Plain),
            per_pod_cell(f.attribution.as_ref(), PodClass::Refused),
            f.attribution
                .and_then(|a| a.shared_per_pod())
                .map_or("-".into(), |x| format!("{x:.1}")),
            f.idle_evictord_per_second().map_or("-".into(), |r| format!(
                "{r:.2} ({:.0})",
                r * f.window_seconds
            )),
        );
    }
    o + "\n"
}

/// One mode's line in its section of `REPORT.md`.
pub fn details(m: &ModeResult) -> String {
    let Some(f) = &m.clients else {
        return String::new();
    };
    let w = &f.window;
    let clients: Vec<String> = CLIENTS
        .iter()
        .filter(|(c, _)| w.of(c) > 0)
        .map(|(c, _)| format!("{c} {}", w.of(c)))
        .collect();
    let mut o = format!(
        "- kube-apiserver's requests by client (audit log, received in the {:.0} s window): {} in all for {} evicted pods ({:.1} each): {}; evictord's by component: {}",
        f.window_seconds,
        w.total,
        f.evicted_pods,
        f.all_per_evicted(),
        clients.join(", "),
        ClientFigures::components(w),
    );
    if let Some(x) = f.evictord_all_per_intercepted() {
        o += &format!(
            "; evictord {:.1} per evicted pod; all of evictord's requests ÷ intercepted pods: {} ÷ {} = {x:.1}",
            f.per_evicted(w.of("evictord")),
            w.of("evictord"),
            f.intercepted_pods.unwrap_or(0)
        );
    }
    if let Some(a) = &f.attribution {
        o += &format!(
            "; evictord's requests by the pods they served (each class's own + its share of the shared ones, ÷ its pods): {}",
            attributed(a)
        );
    }
    if !w.evictord_by_request.is_empty() {
        o += &format!(
            "; evictord's most frequent requests (component verb resource answer: count): {}",
            ClientFigures::most_frequent(w)
        );
    }
    if !w.other_user_agents.is_empty() {
        o += &format!(
            "; other user agents: {}",
            w.other_user_agents
                .iter()
                .take(5)
                .map(|(ua, n)| format!("`{}` {n}", ua.replace('|', "\\|")))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let (Some(idle), Some(seconds), Some(rate)) =
        (&f.idle, f.idle_seconds, f.idle_evictord_per_second())
    {
        o += &format!(
            ". Idle baseline ({seconds:.0} s on the settled pool before the drain): evictord {} requests ({}), {rate:.2}/s, × the window ≈ {:.0}; every client {:.2}/s",
            idle.of("evictord"),
            ClientFigures::components(idle),
            rate * f.window_seconds,
            idle.total as f64 / seconds.max(1e-9)
        );
    }
    o + ".\n"
}

fn goal(what: String, measured: String, target: &str, verdict: Verdict) -> Goal {
    Goal {
        goal: "44".into(),
        what,
        measured,
        target: target.into(),
        verdict,
    }
}

/// Issue 44's goals on evictord's own requests per pod: (what the goal is about, its class, its
/// target).
const PER_POD_GOALS: [(&str, PodClass, f64); 2] = [
    (
        "evictord's own requests per intercepted pod (its own + its share of the shared ones)",
        PodClass::Intercepted,
        EVICTORD_PER_INTERCEPTED,
    ),
    (
        "evictord's own requests per pod without interceptors, never refused (its own + its share of the shared ones)",
        PodClass::Plain,
        EVICTORD_PER_PLAIN,
    ),
];

/// Issue 44's rows of the goals table for one mode: evictord's own requests per intercepted pod
/// and per pod without interceptors never refused, each with its share of the requests that
/// served no single pod (every evictord mode; the refused pods reported beside), and every
/// client's requests per evicted pod against `kubectl drain`'s alone in the same form
/// (`counterpart`; judged on the finishable pool, reported on the full one, where `kubectl
/// drain` alone never finishes).
pub fn goals(m: &ModeResult, counterpart: Option<&ModeResult>, out: &mut Vec<Goal>) {
    let Some(f) = &m.clients else {
        if m.mode.evictord {
            for (what, _, target) in PER_POD_GOALS {
                out.push(goal(
                    format!("pool `{}`: {what}", m.id),
                    "no audit log".into(),
                    &format!("≤ {target}"),
                    Verdict::NotMeasured,
                ));
            }
        }
        return;
    };
    if !m.mode.evictord {
        out.push(goal(
            format!(
                "pool `{}`: every client's requests per evicted pod ({} alone)",
                m.id,
                if m.mode.drainer == Drainer::ScriptEach {
                    "the script"
                } else {
                    "kubectl drain"
                }
            ),
            format!(
                "**{:.1}** (kubectl {:.1}, kube-controller-manager {:.1})",
                f.all_per_evicted(),
                f.per_evicted(f.window.of("kubectl")),
                f.per_evicted(f.window.of("kube-controller-manager"))
            ),
            "reported",
            Verdict::Reported,
        ));
        return;
    }
    let idle = f.idle_evictord_per_second().map_or(String::new(), |r| {
        format!(
            "; idle {r:.2}/s × {:.0} s ≈ {:.0} of them",
            f.window_seconds,
            r * f.window_seconds
        )
    });
    for (what, class, target) in PER_POD_GOALS {
        let beside = match class {
            PodClass::Intercepted => format!(
                "all of evictord's requests ÷ intercepted pods: {} ÷ {} = {}; {}{idle}",
                f.window.of("evictord"),
                f.intercepted_pods.unwrap_or(0),
                f.evictord_all_per_intercepted()
                    .map_or("-".into(), |x| format!("{x:.1}")),
                ClientFigures::components(&f.window)
            ),
            _ => format!(
                "pods without interceptors refused at least once, reported apart: {}",
                f.attribution
                    .map_or("-".into(), |a| match a.per_pod(PodClass::Refused) {
                        Some(x) => format!(
                            "{} ({} pods)",
                            per_pod_sum(&a, PodClass::Refused, x),
                            a.pods.refused
                        ),
                        None => "none".into(),
                    })
            ),
        };
        let measured = match f.attribution {
            Some(a) => a
                .per_pod(class)
                .map(|x| (format!("{} ({beside})", per_pod_sum(&a, class, x)), x)),
            None => None,
        };
        out.push(match measured {
            Some((text, x)) => goal(
                format!("pool `{}`: {what}", m.id),
                text,
                &format!("≤ {target}"),
                Verdict::of(x <= target),
            ),
            None => goal(
                format!("pool `{}`: {what}", m.id),
                format!(
                    "{}; evictord {} requests",
                    if f.attribution.is_none() {
                        "no EvictionRequests seen".to_string()
                    } else {
                        format!("no {}", label(class))
                    },
                    f.window.of("evictord")
                ),
                &format!("≤ {target}"),
                Verdict::NotMeasured,
            ),
        });
    }
    let what = |k: &str| {
        format!(
            "pool `{}`: every client's requests per evicted pod ÷ `{k}`'s",
            m.id
        )
    };
    let alone = counterpart.and_then(|k| Some((k, k.clients.as_ref()?)));
    let finishable = m.mode.variant == Variant::Finishable;
    out.push(match alone {
        Some((k, kf)) => {
            let ratio = f.all_per_evicted() / kf.all_per_evicted().max(1e-9);
            goal(
                what(&k.id),
                format!(
                    "{:.1} ÷ {:.1} = **{ratio:.2}**",
                    f.all_per_evicted(),
                    kf.all_per_evicted()
                ),
                &if finishable {
                    format!("≤ {ALL_CLIENTS_RATIO}")
                } else {
                    "reported (full pool)".into()
                },
                if finishable {
                    Verdict::of(ratio <= ALL_CLIENTS_RATIO)
                } else {
                    Verdict::Reported
                },
            )
        }
        None => goal(
            what("kubectl drain alone"),
            format!(
                "{:.1}; no `kubectl drain` alone in the same form in this run",
                f.all_per_evicted()
            ),
            &format!("≤ {ALL_CLIENTS_RATIO}"),
            if finishable {
                Verdict::NotMeasured
            } else {
                Verdict::Reported
            },
        ),
    });
}

/// kube-apiserver's request durations and webhook calls over the window, the ten series that
/// took the most time in all.
pub fn top_histograms(
    before: &BTreeMap<String, crate::prom::Series>,
    after: &BTreeMap<String, crate::prom::Series>,
) -> Vec<crate::prom::Delta> {
    let mut v = crate::prom::deltas(before, after, |k| {
        k.starts_with("apiserver_request_duration_seconds{")
            || k.starts_with("apiserver_admission_webhook_admission_duration_seconds{")
    });
    for d in &mut v {
        d.series = crate::pool_files::short_series(&d.series);
    }
    // Watches (and kube-rs's wait on the NodeMaintenance, a watch by name) last as long as they
    // are open: not requests anyone waited on.
    v.retain(|d| d.mean_ms < 5000.0);
    v.sort_by(|a, b| (b.count * b.mean_ms).total_cmp(&(a.count * a.mean_ms)));
    v.truncate(10);
    v
}
