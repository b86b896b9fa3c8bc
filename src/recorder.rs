//! Kubernetes events (`events.k8s.io/v1`), written as `kube::runtime::events::Recorder` writes
//! them — the same fields, the same [`Event`] and [`Reporter`] — with three differences:
//!
//! - **A repeat is the same event, note included.** An event identical in every field to one
//!   written in the last [`SERIES_WINDOW`] increments that event's `series` (one PATCH); any
//!   other is created. kube-runtime's recorder (like client-go's) keys a series without the
//!   note, so a second event with the same reason on the same object was stored as a repeat of
//!   the first, and its own note was never stored: `Evicted` when the Eviction API is called and
//!   again when the pod is gone, `StageStarted` for each stage of a maintenance, `NodeCordoned`
//!   for each of its nodes, `InterceptorCompleted` for each interceptor.
//! - **Cluster-scoped objects.** Their events go to `default`; kube-apiserver before v1.22 takes
//!   them only in `kube-system` (it refuses the others with "does not match event.namespace").
//!   The process decides from the server's version once it has read it
//!   ([`learn_server_version`], as `evictord serve` and the node agent do when they connect);
//!   without it, after the first such refusal they go there.
//! - **A repeat of an event that is gone** (deleted, or expired after kube-apiserver's event TTL)
//!   is created anew instead of failing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{Event, EventType, Reporter};
pub use namespace::{
    CLUSTER_SCOPED_NAMESPACE, OLD_CLUSTER_SCOPED_NAMESPACE, cluster_scoped_namespace,
    event_namespace, learn_server_version, refuses_namespace,
};

mod namespace;

/// How long after an event's last occurrence an identical one still counts as a repeat (as
/// kube-runtime and client-go: six minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// At most this many events are remembered for repeats; past it the memory starts over (a
/// repeat then creates a new event).
pub const MAX_REMEMBERED: usize = 8192;

/// How often remembered events older than [`SERIES_WINDOW`] are forgotten.
const FORGET_EVERY: SignedDuration = SignedDuration::from_mins(1);

/// What makes two events the same: every field the recorder writes but the time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventKey {
    type_: &'static str,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: ReferenceKey,
    related: Option<ReferenceKey>,
}

/// The identifying fields of an object reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ReferenceKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl From<&ObjectReference> for ReferenceKey {
    fn from(r: &ObjectReference) -> Self {
        Self {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

/// The key of `event` about `regarding`.
pub fn event_key(event: &Event, regarding: &ObjectReference) -> EventKey {
    EventKey {
        type_: type_name(event.type_),
        reason: event.reason.clone(),
        action: event.action.clone(),
        note: event.note.clone(),
        regarding: regarding.into(),
        related: event.secondary.as_ref().map(Into::into),
    }
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// A written event, remembered for its repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Where it is stored.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Occurrences so far (1 for an event without a series).
    pub count: i32,
    /// Its last occurrence.
    pub last: Timestamp,
}

/// The write an event needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// A new event.
    Create,
    /// The occurrence `count` of the event `name` in `namespace`.
    Repeat {
        /// Where it is stored.
        namespace: String,
        /// Its name.
        name: String,
        /// Its count after this occurrence.
        count: i32,
    },
}

/// Whether an event that last occurred as `written` is repeated at `now` or created.
pub fn next_write(written: Option<&Written>, now: Timestamp) -> Write {
    match written {
        Some(w) if now < w.last.saturating_add(SERIES_WINDOW).unwrap_or(w.last) => Write::Repeat {
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            count: w.count.saturating_add(1),
        },
        _ => Write::Create,
    }
}

/// The longest object name kube-apiserver takes (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The name of a new event about `regarding`: the object's name (else the controller's), the
/// time in nanoseconds and a per-process sequence number, in hexadecimal — unique even for two
/// events of one object in the same nanosecond. The object's name is shortened as far as the
/// whole must be (to an alphanumeric end, as a DNS subdomain label ends).
pub fn event_name(
    regarding: &ObjectReference,
    controller: &str,
    now: Timestamp,
    seq: u32,
) -> String {
    let suffix = format!(".{:x}{seq:04x}", now.as_nanosecond());
    let base = regarding.name.as_deref().unwrap_or(controller);
    let mut end = base.len().min(MAX_NAME.saturating_sub(suffix.len()));
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    let base = base[..end].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{base}{suffix}")
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// The reporter `controller` of this replica: the instance is the pod's name (`POD_NAME`, set
/// by the chart), else the controller's.
pub fn reporter(controller: &str) -> Reporter {
    Reporter {
        controller: controller.into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

/// Writes events; cheap to clone (clones share what they remember).
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    shared: Arc<Shared>,
}

struct Shared {
    remembered: Mutex<Remembered>,
    seq: AtomicU32,
}

#[derive(Default)]
struct Remembered {
    events: HashMap<EventKey, Written>,
    forgot_at: Option<Timestamp>,
}

impl Remembered {
    /// Forgets events whose series window has passed (once a [`FORGET_EVERY`]), and starts over
    /// past [`MAX_REMEMBERED`].
    fn forget_old(&mut self, now: Timestamp) {
        let due = self
            .forgot_at
            .is_none_or(|at| now >= at.saturating_add(FORGET_EVERY).unwrap_or(at));
        if due {
            self.events
                .retain(|_, w| matches!(next_write(Some(w), now), Write::Repeat { .. }));
            self.forgot_at = Some(now);
        }
        if self.events.len() >= MAX_REMEMBERED {
            self.events.clear();
        }
    }
}

impl Recorder {
    /// A recorder writing as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            shared: Arc::new(Shared {
                remembered: Mutex::new(Remembered::default()),
                seq: AtomicU32::new(0),
            }),
        }
    }

    /// Writes `event` about `regarding`: a new event, or one more occurrence of the identical
    /// event written in the last [`SERIES_WINDOW`].
    ///
    /// # Errors
    /// When kube-apiserver refuses the write.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = event_key(event, regarding);
        let write = {
            let mut remembered = self
                .shared
                .remembered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            remembered.forget_old(now);
            next_write(remembered.events.get(&key), now)
        };
        let written = match write {
            Write::Repeat {
                namespace,
                name,
                count,
            } => {
                match self.repeat(&namespace, &name, count, now).await {
                    Ok(()) => Written {
                        namespace,
                        name,
                        count,
                        last: now,
                    },
                    // Deleted, or expired after kube-apiserver's event TTL: a new one.
                    Err(e) if is_not_found(&e) => self.create(event, regarding, now).await?,
                    Err(e) => return Err(e),
                }
            }
            Write::Create => self.create(event, regarding, now).await?,
        };
        self.shared
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .events
            .insert(key, written);
        Ok(())
    }

    async fn repeat(
        &self,
        namespace: &str,
        name: &str,
        count: i32,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let series = serde_json::json!({
            "series": EventSeries { count, last_observed_time: MicroTime(now) },
        });
        Api::<K8sEvent>::namespaced(self.client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(&series))
            .await
            .map(drop)
    }

    async fn create(
        &self,
        event: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> Result<Written, kube::Error> {
        let cluster_scoped = namespace::cluster_scoped_now();
        let namespace = event_namespace(regarding, cluster_scoped);
        match self.create_in(event, regarding, &namespace, now).await {
            Err(e)
                if refuses_namespace(&e)
                    && cluster_scoped == CLUSTER_SCOPED_NAMESPACE
                    && regarding.namespace.as_deref().unwrap_or("").is_empty() =>
            {
                namespace::learn_refused();
                self.create_in(event, regarding, OLD_CLUSTER_SCOPED_NAMESPACE, now)
                    .await
            }
            other => other,
        }
    }

    async fn create_in(
        &self,
        event: &Event,
        regarding: &ObjectReference,
        namespace: &str,
        now: Timestamp,
    ) -> Result<Written, kube::Error> {
        let seq = self.shared.seq.fetch_add(1, Ordering::Relaxed);
        let name = event_name(regarding, &self.reporter.controller, now, seq);
        let k8s = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            type_: Some(type_name(event.type_).to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..K8sEvent::default()
        };
        Api::<K8sEvent>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), &k8s)
            .await?;
        Ok(Written {
            namespace: namespace.to_string(),
            name,
            count: 1,
            last: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn object(namespace: Option<&str>, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("evictord.dev/v1alpha1".into()),
            kind: Some("EvictionRequest".into()),
            namespace: namespace.map(Into::into),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn an_event_is_the_same_only_when_every_field_is() {
        let er = object(Some("ns"), "a");
        let base = event_key(&event("Evicted", "evicted"), &er);
        assert_eq!(base, event_key(&event("Evicted", "evicted"), &er.clone()));
        let mut warning = event("Evicted", "evicted");
        warning.type_ = EventType::Warning;
        let mut action = event("Evicted", "evicted");
        action.action = "Evict".into();
        let mut related = event("Evicted", "evicted");
        related.secondary = Some(object(None, "node-1"));
        let mut no_note = event("Evicted", "evicted");
        no_note.note = None;
        for (what, other) in [
            // The note: kube-runtime's recorder took these two for one event.
            (
                "note",
                event_key(&event("Evicted", "Target Pod ns/p was deleted."), &er),
            ),
            ("no note", event_key(&no_note, &er)),
            ("reason", event_key(&event("Canceled", "evicted"), &er)),
            ("type", event_key(&warning, &er)),
            ("action", event_key(&action, &er)),
            ("related", event_key(&related, &er)),
            (
                "regarding",
                event_key(&event("Evicted", "evicted"), &object(Some("ns"), "b")),
            ),
            (
                "regarding namespace",
                event_key(&event("Evicted", "evicted"), &object(Some("other"), "a")),
            ),
        ] {
            assert_ne!(base, other, "{what}");
        }
    }

    #[test]
    fn next_write_repeats_within_the_series_window_only() {
        let written = Written {
            namespace: "ns".into(),
            name: "a.1".into(),
            count: 1,
            last: ts("2026-01-01T00:00:00Z"),
        };
        let repeat = |count| Write::Repeat {
            namespace: "ns".into(),
            name: "a.1".into(),
            count,
        };
        let cases = [
            (None, "2026-01-01T00:00:00Z", Write::Create),
            (Some(&written), "2026-01-01T00:00:01Z", repeat(2)),
            (Some(&written), "2026-01-01T00:05:59Z", repeat(2)),
            (Some(&written), "2026-01-01T00:06:00Z", Write::Create),
            (Some(&written), "2026-01-02T00:00:00Z", Write::Create),
        ];
        for (w, now, want) in cases {
            assert_eq!(next_write(w, ts(now)), want, "{now}");
        }
        let many = Written {
            count: 41,
            ..written.clone()
        };
        assert_eq!(
            next_write(Some(&many), ts("2026-01-01T00:01:00Z")),
            repeat(42)
        );
        let saturated = Written {
            count: i32::MAX,
            ..written
        };
        assert_eq!(
            next_write(Some(&saturated), ts("2026-01-01T00:01:00Z")),
            repeat(i32::MAX)
        );
    }

    #[test]
    fn event_names_differ_within_one_nanosecond() {
        let now = ts("2026-01-01T00:00:00.000000001Z");
        let a = event_name(&object(Some("ns"), "er"), "evictord", now, 0);
        let b = event_name(&object(Some("ns"), "er"), "evictord", now, 1);
        assert_ne!(a, b);
        assert!(a.starts_with("er."), "{a}");
        let unnamed = ObjectReference::default();
        assert!(event_name(&unnamed, "evictord", now, 0).starts_with("evictord."));
        // A name of the longest kind: the event's name still fits, ending the label alphanumeric.
        let long = format!("{}-.{}", "a".repeat(230), "c".repeat(20));
        let name = event_name(&object(None, &long), "evictord", now, 0);
        assert!(name.len() <= 253, "{} characters", name.len());
        assert!(name.starts_with(&"a".repeat(230)), "{name}");
        let label_end = name.rfind('.').unwrap() - 1;
        assert!(name.as_bytes()[label_end].is_ascii_alphanumeric(), "{name}");
    }

    #[test]
    fn memory_forgets_passed_windows_and_starts_over_when_full() {
        let mut r = Remembered::default();
        let key = |i: usize| event_key(&event("R", &i.to_string()), &object(Some("ns"), "a"));
        let at = |s: &str| Written {
            namespace: "ns".into(),
            name: "n".into(),
            count: 1,
            last: ts(s),
        };
        r.events.insert(key(0), at("2026-01-01T00:00:00Z"));
        r.events.insert(key(1), at("2026-01-01T00:05:00Z"));
        r.forget_old(ts("2026-01-01T00:07:00Z"));
        assert_eq!(r.events.len(), 1, "the first window has passed");
        assert!(r.events.contains_key(&key(1)));
        // Not due again within a minute: nothing is scanned.
        r.forget_old(ts("2026-01-01T00:07:30Z"));
        assert_eq!(r.events.len(), 1);
        for i in 0..MAX_REMEMBERED {
            r.events.insert(key(i + 2), at("2026-01-01T00:07:30Z"));
        }
        r.forget_old(ts("2026-01-01T00:07:40Z"));
        assert!(r.events.is_empty(), "full: starts over");
    }
}
