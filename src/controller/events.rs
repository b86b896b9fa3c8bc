//! Events are recorded off the reconcile path, as client-go's event broadcaster does: a reconcile
//! queues its events and goes on to its next write (the Eviction API call, the next request)
//! instead of waiting for kube-apiserver to store each event first.
//!
//! - Order per object is kept: events are spread over [`SHARDS`] queues by the involved object,
//!   and each queue is written one event at a time, so `InterceptorSelected` is always stored
//!   before the `Evicted` that followed it.
//! - Bounded: each queue holds at most [`CAPACITY`] events; when kube-apiserver cannot keep up,
//!   further events are dropped and counted (`evictord_events_dropped_total`), never the
//!   reconcile blocked — an event is a report, the status is the record.
//! - When the controllers stop, the queued events are still written, for at most
//!   [`FLUSH_TIMEOUT`].

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::mpsc;
use tracing::warn;

use crate::metrics::metrics;
use crate::recorder::{Event, Recorder};

/// Queues written in parallel (events of one object always go to the same queue).
pub const SHARDS: usize = 4;

/// Events each queue holds before it drops.
pub const CAPACITY: usize = 1024;

/// How long queued events are still written once the controllers stop.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// One queued event.
struct Queued {
    event: Event,
    reference: ObjectReference,
}

/// The sending side; cheap to clone. Dropping every clone lets the writers finish the queues.
#[derive(Clone)]
pub struct EventQueue {
    shards: Arc<[mpsc::Sender<Queued>]>,
}

/// The queue of `reference`: the same object always maps to the same queue.
pub fn shard_of(reference: &ObjectReference, shards: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    reference.uid.hash(&mut h);
    reference.namespace.hash(&mut h);
    reference.name.hash(&mut h);
    (h.finish() % shards.max(1) as u64) as usize
}

impl EventQueue {
    /// Starts the writers: events go to kube-apiserver through `recorder`.
    pub fn start(recorder: Recorder) -> Self {
        let recorder = Arc::new(recorder);
        Self::with_writer(SHARDS, CAPACITY, move |event, reference| {
            let recorder = recorder.clone();
            async move {
                recorder
                    .publish(&event, &reference)
                    .await
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// Starts `shards` writers, each writing its queue of at most `capacity` events in order
    /// with `write`.
    pub fn with_writer<W, F>(shards: usize, capacity: usize, write: W) -> Self
    where
        W: Fn(Event, ObjectReference) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        let senders: Vec<_> = (0..shards.max(1))
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Queued>(capacity.max(1));
                let write = write.clone();
                tokio::spawn(async move {
                    while let Some(q) = rx.recv().await {
                        let reason = q.event.reason.clone();
                        let written = tokio::time::timeout(
                            FLUSH_TIMEOUT.max(Duration::from_secs(10)),
                            write(q.event, q.reference),
                        )
                        .await;
                        match written {
                            Ok(Ok(())) => {}
                            Ok(Err(error)) => warn!(%error, %reason, "could not record event"),
                            Err(_) => warn!(%reason, "recording the event timed out"),
                        }
                    }
                });
                tx
            })
            .collect();
        Self {
            shards: senders.into(),
        }
    }

    /// Queues `event` about `reference`; drops it (counted) when its queue is full.
    pub fn publish(&self, event: Event, reference: ObjectReference) {
        let shard = shard_of(&reference, self.shards.len());
        let reason = event.reason.clone();
        if self.shards[shard]
            .try_send(Queued { event, reference })
            .is_err()
        {
            metrics().events_dropped.inc();
            warn!(%reason, "event queue full; event dropped");
        }
    }

    /// Waits until every queued event was written, for at most [`FLUSH_TIMEOUT`].
    pub async fn flush(self) {
        let shards = self.shards.clone();
        drop(self);
        let all_closed = async {
            for tx in shards.iter() {
                tx.closed().await;
            }
        };
        // The writers end (and close their receivers) once every sender is gone and the queue
        // is empty; other clones still alive keep them running, then the timeout ends the wait.
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, all_closed).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use kube::runtime::events::EventType;

    use super::*;

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    #[test]
    fn one_object_always_maps_to_one_queue() {
        let a = object("a");
        assert_eq!(shard_of(&a, 4), shard_of(&a.clone(), 4));
        assert!(shard_of(&a, 4) < 4);
        assert_eq!(shard_of(&a, 0), 0);
        // Spread: 64 objects use every queue.
        let used: std::collections::BTreeSet<usize> = (0..64)
            .map(|i| shard_of(&object(&i.to_string()), 4))
            .collect();
        assert_eq!(used.len(), 4);
    }

    #[tokio::test]
    async fn per_object_order_is_kept_across_parallel_queues() {
        let written = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let w = written.clone();
        let queue = EventQueue::with_writer(4, 64, move |e: Event, r: ObjectReference| {
            let w = w.clone();
            async move {
                // Slow writes, so that the queues run in parallel and interleave.
                tokio::time::sleep(Duration::from_millis(5)).await;
                w.lock()
                    .unwrap()
                    .push((r.name.unwrap_or_default(), e.reason));
                Ok(())
            }
        });
        for i in 0..10 {
            for name in ["a", "b", "c", "d"] {
                queue.publish(event(&format!("R{i}")), object(name));
            }
        }
        queue.flush().await;
        let written = written.lock().unwrap().clone();
        assert_eq!(written.len(), 40, "every queued event is written by flush");
        for name in ["a", "b", "c", "d"] {
            let order: Vec<&str> = written
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, r)| r.as_str())
                .collect();
            let expected: Vec<String> = (0..10).map(|i| format!("R{i}")).collect();
            assert_eq!(order, expected, "events of {name} out of order");
        }
    }

    #[tokio::test]
    async fn a_blocked_writer_never_blocks_publish_a_full_queue_drops_and_counts() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let g = gate.clone();
        let queue = EventQueue::with_writer(1, 2, move |_e, _r| {
            let g = g.clone();
            async move {
                g.notified().await;
                Ok(())
            }
        });
        let before = metrics().events_dropped.get();
        // One is taken by the (blocked) writer, two wait in the queue, the rest are dropped.
        for _ in 0..10 {
            queue.publish(event("R"), object("a"));
            tokio::task::yield_now().await;
        }
        let dropped = metrics().events_dropped.get() - before;
        assert!(
            (7..=8).contains(&dropped),
            "dropped {dropped} of 10 with room for 3"
        );
        gate.notify_waiters();
    }
}
