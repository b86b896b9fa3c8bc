//! The words of the bridge's answers: what the 429 "Eviction triggered" message and the dry-run
//! warning tell the drainer about the pod's EvictionRequest.

use jiff::{Timestamp, Unit};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{EvictionRequest, IMPERATIVE_INTERCEPTOR, InterceptorStatus};
use crate::cluster::CachedPod;

/// At most this many characters of an interceptor's own message are quoted.
const QUOTED_MESSAGE_CHARS: usize = 200;

/// The 429 message: begins with "Eviction triggered" (the descheduler's convention for
/// "accepted, in progress") and says which request handles the pod and who is active since when.
pub fn in_progress(pod: &CachedPod, request: Option<&EvictionRequest>, now: Timestamp) -> String {
    format!(
        "Eviction triggered: EvictionRequest {}/{} handles pod {}/{}; {}. evictord evicts the pod once its interceptors are done; retry until the pod is gone",
        pod.namespace(),
        pod.uid(),
        pod.namespace(),
        pod.name(),
        state(pod, request, now)
    )
}

/// The dry-run warning: what a real call would do.
pub fn would_handle(pod: &CachedPod, request: Option<&EvictionRequest>) -> String {
    let how = match request {
        Some(_) => "join",
        None => "create",
    };
    format!(
        "dry run: evictord would {how} EvictionRequest {}/{} for pod {}/{} and answer 429 \"Eviction triggered\" until its interceptors ({}) are done",
        pod.namespace(),
        pod.uid(),
        pod.namespace(),
        pod.name(),
        pod.interceptors().join(", ")
    )
}

fn state(pod: &CachedPod, request: Option<&EvictionRequest>, now: Timestamp) -> String {
    let status = request.and_then(|r| r.status.as_ref());
    let Some(status) = status.filter(|s| !s.target_interceptors.is_empty()) else {
        return format!(
            "its interceptors {} take turns first",
            pod.interceptors().join(", ")
        );
    };
    let Some(active) = status.active_interceptors.first() else {
        return "waiting for the next interceptor to be selected".to_string();
    };
    let entry = status.interceptor(active);
    let mut s = if active == IMPERATIVE_INTERCEPTOR {
        format!("the interceptors are done and {IMPERATIVE_INTERCEPTOR} is evicting it")
    } else {
        format!("interceptor {active} active")
    };
    if let Some(e) = entry {
        s.push_str(&timing(e, now));
        if let Some(m) = e.message.as_deref().filter(|m| !m.is_empty()) {
            let quoted: String = m.chars().take(QUOTED_MESSAGE_CHARS).collect();
            s.push_str(&format!(" (\"{quoted}\")"));
        }
    }
    s
}

fn timing(e: &InterceptorStatus, now: Timestamp) -> String {
    let mut s = String::new();
    if let Some(t) = e.start_time.as_ref().or(e.activation_time.as_ref()) {
        s.push_str(&format!(" since {}", when(t, now)));
    }
    if let Some(t) = &e.heartbeat_time {
        s.push_str(&format!(", last heartbeat {}", when(t, now)));
    }
    s
}

fn when(t: &Time, now: Timestamp) -> String {
    let at = t.0.round(Unit::Second).unwrap_or(t.0);
    let ago = now.duration_since(t.0).as_secs().max(0);
    format!("{at} ({ago}s ago)")
}
