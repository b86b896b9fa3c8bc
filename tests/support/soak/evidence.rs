//! What a failed soak run says about a violation besides the audit log's removals: the lines
//! that name its pods in the logs of everyone who could have let them go, read once the checker
//! stops:
//! - kube-apiserver's own log: every admission webhook call that failed open ("Failed calling
//!   webhook, failing open …", with its error) in the window before the violation. Its audit log
//!   says so only from Kubernetes 1.21 on (the `failed-open.*` annotations); 1.20 logs it;
//! - the `kubectl drain` logs of the soak: the answers kubectl printed for the pod (the bridge's
//!   "Eviction triggered", a PodDisruptionBudget's refusal, its own errors);
//! - every evictord replica's log: the lines that name the pod (a bridge call not bridged, an
//!   interceptor's surge, the eviction);
//! - the Events of the pods and of their EvictionRequests (named by the pod's UID): what each
//!   interceptor and the controller said, and why a request ended.

use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use super::replicas::Started;

/// How far back kube-apiserver's log is read before a violation (as the audit log's removals).
pub const WINDOW: Duration = Duration::from_secs(30);

/// How many lines that name a pod are kept from each source (the last ones).
const LAST: usize = 6;

/// The pods a violation names: `…; pods: <name> (<state>), <name> (<state>)`.
pub fn pods_named(what: &str) -> Vec<String> {
    let Some((_, pods)) = what.split_once("pods: ") else {
        return Vec::new();
    };
    pods.split("), ")
        .filter_map(|p| p.split_once(" (").map(|(name, _)| name.trim().to_string()))
        .filter(|n| !n.is_empty())
        .collect()
}

/// When a klog line was written (`W1129 02:51:16.258526 …`: level, month and day, time of day
/// in the local time zone), the year taken from `near`.
pub fn klog_time(line: &str, near: SystemTime) -> Option<SystemTime> {
    let header = line.get(1..21)?;
    let (date, time) = header.split_once(' ')?;
    let (month, day) = (date.get(0..2)?.parse().ok()?, date.get(2..4)?.parse().ok()?);
    let time: jiff::civil::Time = time.parse().ok()?;
    let tz = jiff::tz::TimeZone::system();
    let year = jiff::Timestamp::try_from(near)
        .ok()?
        .to_zoned(tz.clone())
        .year();
    let at = jiff::civil::date(year, month, day)
        .to_datetime(time)
        .to_zoned(tz)
        .ok()?;
    Some(SystemTime::from(at.timestamp()))
}

/// kube-apiserver's lines about a webhook that failed open written in the [`WINDOW`] before
/// `at` (and up to 2 s after).
pub fn failed_open(log: &str, at: SystemTime) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("failing open"))
        .filter(|l| {
            klog_time(l, at).is_some_and(|t| t + WINDOW >= at && t <= at + Duration::from_secs(2))
        })
        .map(|l| format!("kube-apiserver: {}", shorten(l)))
        .collect()
}

/// The last [`LAST`] lines of `text` that name `pod`, each after `source`.
pub fn naming(text: &str, pod: &str, source: &str) -> Vec<String> {
    let mut found: Vec<String> = text
        .lines()
        .filter(|l| l.contains(pod))
        .map(|l| format!("{source}: {}", shorten(l)))
        .collect();
    let skip = found.len().saturating_sub(LAST);
    found.drain(..skip);
    found
}

/// A log line cut to a readable length.
fn shorten(line: &str) -> String {
    const MAX: usize = 400;
    match line.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// Everything the logs under `dir` (kube-apiserver's `apiserver.err`, the soak's
/// `soak-kubectl-drain-*.log`) and the replicas' logs say about the pods `what` names (the
/// replicas' logs also by the pods' UIDs, `uids` of a name: evictord names a request by its
/// pod's UID), up to `at`.
pub fn gather(
    dir: &Path,
    replicas: &[Started],
    what: &str,
    uids: impl Fn(&str) -> Vec<String>,
    at: SystemTime,
) -> Vec<String> {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let mut out = failed_open(&read(&dir.join("apiserver.err")), at);
    let mut kubectl: Vec<(SystemTime, std::path::PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("soak-kubectl-drain-"))
        })
        .map(|p| {
            let modified = p
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (modified, p)
        })
        .collect();
    kubectl.sort();
    let drains: String = kubectl.iter().map(|(_, p)| read(p)).collect();
    let logs: Vec<(String, String)> = replicas
        .iter()
        .map(|r| (format!("evictord {}", r.identity), read(&r.log)))
        .collect();
    for pod in pods_named(what) {
        out.extend(naming(&drains, &pod, "kubectl drain"));
        for (source, log) in &logs {
            out.extend(naming(log, &pod, source));
            for uid in uids(&pod) {
                out.extend(naming(log, &uid, source));
            }
        }
    }
    out
}

/// The events about the objects `names` (pods by name, EvictionRequests by UID), oldest first.
pub fn event_lines(events: &[Event], names: &[String]) -> Vec<String> {
    let mut about: Vec<(String, String)> = events
        .iter()
        .filter(|e| {
            e.involved_object
                .name
                .as_ref()
                .is_some_and(|n| names.contains(n))
        })
        .map(|e| {
            let when = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                .unwrap_or_default();
            let line = format!(
                "event: {when} {}/{} {} {}: {}",
                e.involved_object.kind.as_deref().unwrap_or_default(),
                e.involved_object.name.as_deref().unwrap_or_default(),
                e.type_.as_deref().unwrap_or_default(),
                e.reason.as_deref().unwrap_or_default(),
                shorten(e.message.as_deref().unwrap_or_default()),
            );
            (when, line)
        })
        .collect();
    about.sort();
    about.into_iter().map(|(_, line)| line).collect()
}

/// [`event_lines`] of the events of `namespace`, read from kube-apiserver (an error when it
/// cannot be read).
pub async fn events(client: &kube::Client, namespace: &str, names: &[String]) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    match api.list(&ListParams::default()).await {
        Ok(list) => event_lines(&list.items, names),
        Err(e) => vec![format!(
            "event: the events of {namespace} could not be read: {e}"
        )],
    }
}
