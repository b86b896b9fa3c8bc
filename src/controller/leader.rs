//! Leader election on a coordination.k8s.io/v1 Lease (kube-lease-manager): the controllers run
//! while this replica holds the lease and stop when it is lost; the lease is released on
//! shutdown so that a standby takes over at once.
//!
//! Fencing: kube-lease-manager keeps saying "leader" while its renewals fail (kube-apiserver or
//! etcd unreachable), and a standby takes the lease once it has not been renewed for its duration.
//! So this replica also reads the lease itself (every eighth of the duration, at most every second)
//! and stops its controllers once the last renewal it saw is three quarters of the duration old
//! ([`may_lead`]), before a standby can take over; it starts them again when a renewal shows up.
//! The manager renews at half the duration. Reconciles still running when the controllers stop
//! make no new Eviction API call (the eviction request controller checks its token first). (Found by the etcd pause
//! fault test: after a 30 s pause both replicas called the Eviction API for about 2 s.)

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The renewal time of `lease` when `identity` holds it.
pub fn renewed_by(lease: &Lease, identity: &str) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    spec.renew_time.as_ref().map(|t| t.0)
}

/// When this replica stops acting on a lease of `duration` it has not seen renewed: a quarter of
/// the duration before a standby may take it. The lease manager renews at half the duration, so
/// a healthy lease is never that old.
pub fn fence_after(duration: Duration) -> Duration {
    duration.saturating_sub(duration / 4)
}

/// How often the lease is read for fencing: an eighth of its duration, between 250 ms and 1 s.
pub fn fence_check(duration: Duration) -> Duration {
    (duration / 8).clamp(Duration::from_millis(250), Duration::from_secs(1))
}

/// Whether this replica may act as the leader at `now`: the lease manager says it leads, and the
/// latest renewal it was seen to hold is younger than `fence` ([`fence_after`]).
pub fn may_lead(
    manager_says: bool,
    last_renewal: Option<Timestamp>,
    now: Timestamp,
    fence: Duration,
) -> bool {
    manager_says
        && last_renewal.is_some_and(|r| {
            now.duration_since(r)
                .try_into()
                .is_ok_and(|age: Duration| age < fence)
                // A renewal in the future (clock skew) counts as fresh.
                || now < r
        })
}

/// Reads the lease every `every` and publishes the latest renewal held by `identity` (reads that
/// fail or hang leave it unchanged).
async fn watch_renewals(
    api: Api<Lease>,
    name: String,
    identity: String,
    every: Duration,
    tx: watch::Sender<Option<Timestamp>>,
) {
    loop {
        match tokio::time::timeout(every, api.get_opt(&name)).await {
            Ok(Ok(Some(lease))) => {
                let renewed = renewed_by(&lease, &identity);
                tx.send_if_modified(|last| {
                    let newer = renewed.is_some_and(|r| last.is_none_or(|l| r > l));
                    if newer {
                        *last = renewed;
                    }
                    newer
                });
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => debug!(error = %e, "reading the leader lease failed"),
            Err(_) => debug!("reading the leader lease timed out"),
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(every).await;
    }
}

use crate::cli::ServeArgs;

/// Runs `work` whenever this replica is the leader, cancelling its token when leadership is
/// lost, until `shutdown`.
pub async fn run_while_leader<F, Fut>(
    client: Client,
    args: &ServeArgs,
    shutdown: CancellationToken,
    work: F,
) where
    F: Fn(CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let namespace = args
        .leader_election_namespace
        .clone()
        .or_else(|| args.service_namespace.clone())
        .unwrap_or_else(|| "default".into());
    // The identity the user agent names too (crate::kube_client).
    let identity = crate::kube_client::replica_identity();
    let duration = args.lease_duration.as_secs().max(2);
    // Renew at half the duration (the fencing below stops acting at three quarters).
    let grace = (duration / 2).max(1);
    let manager = LeaseManagerBuilder::new(client.clone(), &args.leader_election_id)
        .with_namespace(&namespace)
        .with_identity(&identity)
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await;
    let manager = match manager {
        Ok(m) => m,
        Err(e) => {
            warn!(error = %e, "leader election could not start; controllers are not running");
            return;
        }
    };
    info!(lease = %args.leader_election_id, %namespace, %identity, "waiting for leadership");
    let (mut is_leader, handle) = manager.watch().await;
    let duration = Duration::from_secs(duration);
    let (fence, every) = (fence_after(duration), fence_check(duration));
    let (renewal_tx, renewals) = watch::channel(None);
    let fencing = tokio::spawn(watch_renewals(
        Api::namespaced(client, &namespace),
        args.leader_election_id.clone(),
        identity.clone(),
        every,
        renewal_tx.clone(),
    ));
    let mut current: Option<(CancellationToken, tokio::task::JoinHandle<()>)> = None;
    let mut was_leader = false;
    loop {
        let manager_says = *is_leader.borrow_and_update();
        if manager_says && !was_leader {
            // Just acquired (or renewed after a loss): the manager wrote the lease now.
            renewal_tx.send_replace(Some(Timestamp::now()));
        }
        was_leader = manager_says;
        let leading = may_lead(manager_says, *renewals.borrow(), Timestamp::now(), fence);
        if manager_says && !leading && current.is_some() {
            warn!(%identity, "the leader lease was not seen renewed in time; stopping controllers until it is");
        }
        match (leading, current.is_some()) {
            (true, false) => {
                info!(%identity, "acquired leadership; starting controllers");
                let term = shutdown.child_token();
                current = Some((term.clone(), tokio::spawn(work(term))));
            }
            (false, true) => {
                warn!(%identity, "lost leadership; stopping controllers");
                if let Some((term, task)) = current.take() {
                    term.cancel();
                    let _ = task.await;
                }
            }
            _ => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = is_leader.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep(every) => {}
        }
    }
    fencing.abort();
    if let Some((term, task)) = current.take() {
        term.cancel();
        let _ = task.await;
    }
    // Dropping the receiver makes the manager release the lease.
    drop(is_leader);
    match handle.await {
        Ok(Ok(m)) => {
            let _ = m.release().await;
            info!("released the leader lease");
        }
        Ok(Err(e)) => warn!(error = %e, "leader election ended with an error"),
        Err(e) => warn!(error = %e, "leader election task failed"),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use rstest::rstest;

    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_000_000 + s).unwrap()
    }

    #[rstest]
    #[case::fresh_renewal(true, Some(0), 5, true)]
    #[case::renewal_overdue_but_in_time(true, Some(0), 11, true)]
    #[case::fenced_before_a_standby_may_take_over(true, Some(0), 12, false)]
    #[case::long_past(true, Some(0), 40, false)]
    #[case::never_seen(true, None, 0, false)]
    #[case::manager_says_no(false, Some(0), 1, false)]
    #[case::renewal_ahead_of_our_clock(true, Some(3), 0, true)]
    fn may_lead_rows(
        #[case] manager_says: bool,
        #[case] renewal: Option<i64>,
        #[case] now: i64,
        #[case] want: bool,
    ) {
        assert_eq!(
            may_lead(manager_says, renewal.map(at), at(now), fence_after(D)),
            want
        );
    }

    #[test]
    fn fence_and_check_scale_with_the_lease() {
        assert_eq!(fence_after(D), Duration::from_millis(11_250));
        assert_eq!(fence_check(D), Duration::from_secs(1));
        assert_eq!(fence_after(Duration::from_secs(4)), Duration::from_secs(3));
        assert_eq!(
            fence_check(Duration::from_secs(4)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn only_our_own_renewal_counts() {
        let lease = |holder: &str| Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(at(0))),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(renewed_by(&lease("a"), "a"), Some(at(0)));
        assert_eq!(renewed_by(&lease("b"), "a"), None);
        assert_eq!(renewed_by(&Lease::default(), "a"), None);
    }
}
