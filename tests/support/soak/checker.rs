//! The soak's invariants, checked all the time by a task of their own, not only at the end:
//! every 200 ms from the played kubelet's pod cache (a watch) — no Deployment under the
//! zero-downtime goal below its desired available replicas at any sample (0 replica-seconds
//! lost, as [`crate::support::pool::measure`] counts them), no PodDisruptionBudget floor broken,
//! never more of the MaintenanceBudget's nodes cordoned than it allows —
//! and every second from kube-apiserver's audit log (read on from where it stopped) — no pod UID
//! evicted twice by evictord (two Eviction API calls answered 2xx, a UID told apart from a
//! StatefulSet pod of the same name by when each was first seen), and no eviction by a replica
//! that was not the leader (the identity in its user agent against the leadership changes in
//! every replica's log: another replica had acquired the lease later). A violation is recorded
//! with when it happened and the objects involved, and, once the checker stops, with every
//! removal of those pods that kube-apiserver's audit log shows in the 30 s before it (Eviction
//! API calls and deletes: who, when, the answer, how long it took, and whether a webhook failed
//! open) and what the logs say of them ([`super::evidence`]), so that a failed soak run says who
//! let a pod go.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::Store;

use super::evidence;
use super::replicas::Started;
use crate::support::pool::measure::{Availability, Tracked, available, floor_broken};
use crate::support::pool::workloads::WORKLOAD_LABEL;

/// The zero-downtime goal's check.
const GOAL: &str = "below desired (goal)";

/// How often the pods are sampled.
pub const EVERY: Duration = Duration::from_millis(200);

/// One broken invariant.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Seconds since the checker started.
    pub t: f64,
    pub what: String,
    /// When it was found.
    pub at: SystemTime,
    /// What explains it (filled when the checker stops): the removals of the pods it names in
    /// the 30 s before, then what the logs say of them ([`super::evidence`]).
    pub evidence: Vec<String>,
    /// The names of the pods it names and every UID each had (its EvictionRequests' names),
    /// filled when the checker stops.
    pub objects: Vec<String>,
}

/// How far back the removals of a violation's pods are looked up.
const REMOVALS_BEFORE: Duration = Duration::from_secs(30);

/// One removal of a pod of the namespace in the audit log: an Eviction API call or a delete.
#[derive(Clone, Debug)]
struct Removal {
    received: SystemTime,
    pod: String,
    verb: &'static str,
    user_agent: String,
    code: u64,
    /// What kube-apiserver answered, when not a success (`responseStatus.message`).
    message: String,
    /// How long kube-apiserver took to answer (a webhook's timeout shows here).
    took: Duration,
    /// The admission webhooks that failed open on this call (audit annotations `failed-open.*`,
    /// written from Kubernetes 1.21 on).
    failed_open: Vec<String>,
}

impl Removal {
    fn describe(&self) -> String {
        let failed = if self.failed_open.is_empty() {
            String::new()
        } else {
            format!(", webhook failed open: {}", self.failed_open.join(", "))
        };
        let message = if self.message.is_empty() {
            String::new()
        } else {
            format!(": {:?}", self.message)
        };
        format!(
            "removed before: {} {} {} by {:?} answered {} in {:.2} s{failed}{message}",
            stamp(self.received),
            self.verb,
            self.pod,
            self.user_agent,
            self.code,
            self.took.as_secs_f64()
        )
    }
}

/// `t` as an RFC 3339 time (empty when out of range).
fn stamp(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The removals of pods named in `what` received in the [`REMOVALS_BEFORE`] before `at` (and
/// up to 2 s after: the audit line of a call is written when it completes).
fn removals_for(removals: &[Removal], what: &str, at: SystemTime) -> Vec<String> {
    removals
        .iter()
        .filter(|r| r.received + REMOVALS_BEFORE >= at && r.received <= at + Duration::from_secs(2))
        .filter(|r| !r.pod.is_empty() && what.contains(&format!("{} (", r.pod)))
        .map(Removal::describe)
        .collect()
}

/// What the checker counted.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub samples: usize,
    pub eviction_calls: usize,
    pub evictions_2xx_by_evictord: usize,
    pub evictions_2xx_by_others: usize,
    pub evictord_calls_checked_for_leadership: usize,
    /// Replica-seconds lost by the Deployments under the goal (must stay 0).
    pub goal_replica_seconds: f64,
    /// Episodes of a Deployment under the goal below its desired replicas that began while the
    /// goal was suspended (not violations).
    pub goal_episodes_suspended: usize,
}

/// The running checker.
pub struct Checker {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    pub violations: Arc<Mutex<Vec<Violation>>>,
    pub counts: Arc<Mutex<Counts>>,
    pub started: Instant,
    found: Arc<AtomicUsize>,
}

/// Where the checker reads.
pub struct Inputs {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    /// The nodes of the MaintenanceBudget, and how many of them it lets be cordoned at once.
    pub budgeted: BTreeSet<String>,
    pub max_unavailable: usize,
    pub tracked: Vec<Tracked>,
    pub audit_log: PathBuf,
    /// Where kube-apiserver's log and the `kubectl drain` logs are (the control plane's
    /// directory).
    pub logs: PathBuf,
    /// While set, a Deployment under the goal below its desired replicas is not a violation
    /// (counted in [`Counts::goal_episodes_suspended`]), for the whole episode.
    pub goal_suspended: Option<Arc<AtomicBool>>,
    pub namespace: String,
    pub replicas: Arc<Mutex<Vec<Started>>>,
}

impl Checker {
    pub fn start(inputs: Inputs) -> Checker {
        let stop = Arc::new(AtomicBool::new(false));
        let violations = Arc::new(Mutex::new(Vec::new()));
        let counts = Arc::new(Mutex::new(Counts::default()));
        let found = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let state = State {
            inputs,
            availability: Vec::new(),
            below: HashMap::new(),
            uids: HashMap::new(),
            audit_offset: 0,
            partial: String::new(),
            evicted: HashMap::new(),
            removals: Vec::new(),
            violations: violations.clone(),
            counts: counts.clone(),
            found: found.clone(),
            started,
        };
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut state = state;
            state.availability = state
                .inputs
                .tracked
                .iter()
                .map(|t| Availability::new(t.desired))
                .collect();
            let mut tick = 0usize;
            // Bounded: a soak of 10 hours at most.
            while tick < 180_000 {
                state.sample();
                if tick.is_multiple_of(5) {
                    state.read_audit();
                }
                tick += 1;
                if s.load(Ordering::Acquire) {
                    break;
                }
                tokio::time::sleep(EVERY).await;
            }
            // The audit log's last calls.
            tokio::time::sleep(Duration::from_secs(2)).await;
            state.read_audit();
            let mut violations = state.violations.lock().unwrap();
            let replicas = state.inputs.replicas.lock().unwrap().clone();
            for v in violations.iter_mut() {
                v.evidence = removals_for(&state.removals, &v.what, v.at);
                let uids = |pod: &str| -> Vec<String> {
                    let seen = state.uids.get(pod).into_iter().flatten();
                    seen.map(|(_, uid)| uid.clone()).collect()
                };
                v.objects = evidence::pods_named(&v.what)
                    .into_iter()
                    .flat_map(|pod| {
                        let mut all = uids(&pod);
                        all.insert(0, pod);
                        all
                    })
                    .collect();
                v.evidence.extend(evidence::gather(
                    &state.inputs.logs,
                    &replicas,
                    &v.what,
                    uids,
                    v.at,
                ));
            }
        });
        Checker {
            stop,
            task,
            violations,
            counts,
            started,
            found,
        }
    }

    /// Violations found so far.
    pub fn violations_so_far(&self) -> usize {
        self.found.load(Ordering::Acquire)
    }

    /// Stops the checker after a last sample and a last read of the audit log.
    pub async fn stop(self) -> (Vec<Violation>, Counts) {
        self.stop.store(true, Ordering::Release);
        let _ = self.task.await;
        let v = self.violations.lock().unwrap().clone();
        let c = self.counts.lock().unwrap().clone();
        (v, c)
    }
}

struct State {
    inputs: Inputs,
    availability: Vec<Availability>,
    /// Workloads below their floor or desired now (index → since when), to report each
    /// episode once.
    below: HashMap<(usize, &'static str), f64>,
    /// Pod name → (first seen, UID), in order.
    uids: HashMap<String, Vec<(SystemTime, String)>>,
    audit_offset: u64,
    partial: String,
    /// Pod UID → the 2xx evictions by evictord (when, user agent).
    evicted: HashMap<String, Vec<(SystemTime, String)>>,
    /// Every removal of a pod of the namespace, in the order read.
    removals: Vec<Removal>,
    violations: Arc<Mutex<Vec<Violation>>>,
    counts: Arc<Mutex<Counts>>,
    found: Arc<AtomicUsize>,
    started: Instant,
}

impl State {
    fn t(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn violate(&mut self, what: String) {
        let t = self.t();
        eprintln!("SOAK VIOLATION at {t:.1} s: {what}");
        self.violations.lock().unwrap().push(Violation {
            t,
            what,
            at: SystemTime::now(),
            evidence: Vec::new(),
            objects: Vec::new(),
        });
        self.found.fetch_add(1, Ordering::Release);
    }

    fn sample(&mut self) {
        let t = self.t();
        let pods = self.inputs.pods.state();
        let now = SystemTime::now();
        let mut counts = vec![0i32; self.inputs.tracked.len()];
        let mut by_workload: HashMap<&str, Vec<String>> = HashMap::new();
        for p in &pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let seen = self.uids.entry(name.clone()).or_default();
            if seen.last().is_none_or(|(_, u)| *u != uid) && !seen.iter().any(|(_, u)| *u == uid) {
                seen.push((now, uid));
            }
            let Some(w) = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(WORKLOAD_LABEL))
            else {
                continue;
            };
            let Some(i) = self.inputs.tracked.iter().position(|t| &t.name == w) else {
                continue;
            };
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            by_workload
                .entry(self.inputs.tracked[i].name.as_str())
                .or_default()
                .push(format!(
                    "{name} ({phase}{}{} on {node:?})",
                    if available(p) { ", available" } else { "" },
                    if p.metadata.deletion_timestamp.is_some() {
                        ", terminating"
                    } else {
                        ""
                    }
                ));
            if available(p) {
                counts[i] += 1;
            }
        }
        let mut found = Vec::new();
        let mut lost = 0.0;
        let suspended = self
            .inputs
            .goal_suspended
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Acquire));
        let mut suspended_episodes = 0;
        for (i, w) in self.inputs.tracked.iter().enumerate() {
            self.availability[i].observe(t, counts[i], w.budget);
            if w.goal {
                lost += self.availability[i].unavailable_replica_seconds;
            }
            let checks = [
                (GOAL, w.goal && counts[i] < w.desired),
                (
                    "PDB floor broken",
                    floor_broken(w.budget, w.desired, counts[i]),
                ),
            ];
            for (check, broken) in checks {
                let key = (i, check);
                if broken {
                    if let std::collections::hash_map::Entry::Vacant(e) = self.below.entry(key) {
                        e.insert(t);
                        if check == GOAL && suspended {
                            suspended_episodes += 1;
                            continue;
                        }
                        let pods = by_workload
                            .get(w.name.as_str())
                            .cloned()
                            .unwrap_or_default();
                        found.push(format!(
                            "{} {} ({}, {:?}): {} available of {} desired; pods: {}",
                            w.name,
                            check,
                            w.row,
                            w.budget,
                            counts[i],
                            w.desired,
                            pods.join(", ")
                        ));
                    }
                } else {
                    self.below.remove(&key);
                }
            }
        }
        let cordoned: Vec<String> = self
            .inputs
            .nodes
            .state()
            .iter()
            .filter(|n| {
                n.metadata
                    .name
                    .as_ref()
                    .is_some_and(|x| self.inputs.budgeted.contains(x))
                    && n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let key = (usize::MAX, "budget exceeded");
        if cordoned.len() > self.inputs.max_unavailable {
            if let std::collections::hash_map::Entry::Vacant(e) = self.below.entry(key) {
                e.insert(t);
                found.push(format!(
                    "MaintenanceBudget exceeded: {} of its nodes cordoned at once (max {}): {cordoned:?}",
                    cordoned.len(),
                    self.inputs.max_unavailable
                ));
            }
        } else {
            self.below.remove(&key);
        }
        for f in found {
            self.violate(f);
        }
        let mut c = self.counts.lock().unwrap();
        c.samples += 1;
        c.goal_replica_seconds = lost;
        c.goal_episodes_suspended += suspended_episodes;
    }

    /// Reads the audit log on from where the last read stopped.
    fn read_audit(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.inputs.audit_log) else {
            return;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return;
        };
        if len < self.audit_offset {
            self.audit_offset = 0;
            self.partial.clear();
        }
        if file.seek(SeekFrom::Start(self.audit_offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return;
        }
        self.audit_offset += bytes.len() as u64;
        let text = std::mem::take(&mut self.partial) + &String::from_utf8_lossy(&bytes);
        let mut lines: Vec<&str> = text.split('\n').collect();
        // The last piece is a line kube-apiserver has not finished writing.
        self.partial = lines.pop().unwrap_or_default().to_string();
        let first_new = self.removals.len();
        for line in lines {
            let delete = line.contains("\"verb\":\"delete\"") && line.contains("\"pods\"");
            if !(delete || line.contains("\"eviction\"")) {
                continue;
            }
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let Some(removal) = removal(&event, &self.inputs.namespace) else {
                continue;
            };
            self.removals.push(removal);
        }
        let mut calls = self.removals[first_new..]
            .iter()
            .filter(|r| r.verb == "evict")
            .peekable();
        if calls.peek().is_none() {
            return;
        }
        let changes = leadership_changes(&self.inputs.replicas.lock().unwrap());
        let mut found = Vec::new();
        {
            let mut c = self.counts.lock().unwrap();
            for call in calls {
                let (pod, ua, code, received) =
                    (&call.pod, &call.user_agent, call.code, call.received);
                c.eviction_calls += 1;
                let identity = evictord_identity(ua);
                if (200..300).contains(&code) {
                    if identity.is_none() {
                        c.evictions_2xx_by_others += 1;
                    } else {
                        c.evictions_2xx_by_evictord += 1;
                        let uid = self.uid_at(pod, received);
                        let before = self.evicted.entry(uid.clone()).or_default();
                        if !before.is_empty() {
                            found.push(format!(
                                "pod {pod} (UID {uid}) evicted twice by evictord: earlier {before:?}, again at {} by {ua:?}",
                                stamp(received)
                            ));
                        }
                        before.push((received, ua.clone()));
                    }
                }
                if let Some(identity) = identity {
                    c.evictord_calls_checked_for_leadership += 1;
                    let leader = changes
                        .iter()
                        .rfind(|(t, _)| *t <= received)
                        .map(|(_, who)| who.as_str());
                    if leader != Some(identity) {
                        found.push(format!(
                            "Eviction API call for {pod} (answered {code}) by replica {identity}, \
                             received at {} while the last replica to acquire the lease was {leader:?}",
                            stamp(received)
                        ));
                    }
                }
            }
        }
        for f in found {
            self.violate(f);
        }
    }

    /// The UID the pod named `name` had when a call was received at `at`: the last one first
    /// seen before `at` + 0.5 s (the watch's delay; a StatefulSet's next pod of that name is
    /// created only once the evicted one is gone, seconds later).
    fn uid_at(&self, name: &str, at: SystemTime) -> String {
        self.uids
            .get(name)
            .and_then(|seen| {
                seen.iter()
                    .rfind(|(t, _)| *t <= at + Duration::from_millis(500))
                    .or(seen.first())
            })
            .map_or_else(|| format!("{name}@unseen"), |(_, uid)| uid.clone())
    }
}

/// The removal of a pod of `namespace` an audit event records (its last stage only): an
/// Eviction API call (`evict`) or a delete.
fn removal(event: &serde_json::Value, namespace: &str) -> Option<Removal> {
    let done = matches!(event["stage"].as_str(), Some("ResponseComplete" | "Panic"));
    let object = &event["objectRef"];
    if !done || object["resource"] != "pods" || object["namespace"] != namespace {
        return None;
    }
    let verb = match (event["verb"].as_str(), object["subresource"].as_str()) {
        (Some("create"), Some("eviction")) => "evict",
        (Some("delete"), None) => "delete",
        _ => return None,
    };
    let time = |key: &str| {
        event[key]
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(SystemTime::from)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    let received = time("requestReceivedTimestamp");
    let failed_open = event["annotations"]
        .as_object()
        .map(|a| {
            a.iter()
                .filter(|(k, _)| k.starts_with("failed-open."))
                .map(|(_, v)| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    Some(Removal {
        received,
        pod: object["name"].as_str().unwrap_or_default().to_string(),
        verb,
        user_agent: event["userAgent"].as_str().unwrap_or_default().to_string(),
        code: event["responseStatus"]["code"].as_u64().unwrap_or(500),
        message: event["responseStatus"]["message"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(240)
            .collect(),
        took: time("stageTimestamp")
            .duration_since(received)
            .unwrap_or_default(),
        failed_open,
    })
}

/// The replica identity in an evictord user agent (`evictord/<version> (<component>;
/// <identity>)`), `None` for other clients.
pub fn evictord_identity(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("evictord/")?;
    let inside = rest.split_once('(')?.1;
    let identity = inside.split_once(';')?.1.trim_end_matches(')').trim();
    (!identity.is_empty()).then_some(identity)
}

/// When each replica acquired the lease, by the "acquired leadership" lines of the replicas'
/// logs, in order.
pub fn leadership_changes(replicas: &[Started]) -> Vec<(SystemTime, String)> {
    let mut changes: Vec<(SystemTime, String)> = replicas
        .iter()
        .flat_map(|r| {
            std::fs::read_to_string(&r.log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(crate::support::chaos::LEADING))
                .filter_map(|l| {
                    let t: jiff::Timestamp = l.split_whitespace().next()?.parse().ok()?;
                    Some((SystemTime::from(t), r.identity.clone()))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    changes.sort();
    changes
}
