//! Leader election on a coordination.k8s.io/v1 Lease (kube-lease-manager): the controllers run
//! while this replica holds the lease and stop when it is lost; the lease is released on
//! shutdown so that a standby takes over at once.

use std::future::Future;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

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
    let identity =
        std::env::var("POD_NAME").unwrap_or_else(|_| format!("evictord-{}", std::process::id()));
    let duration = args.lease_duration.as_secs().max(2);
    let manager = LeaseManagerBuilder::new(client, &args.leader_election_id)
        .with_namespace(&namespace)
        .with_identity(&identity)
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
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
    let mut current: Option<(CancellationToken, tokio::task::JoinHandle<()>)> = None;
    loop {
        let leading = *is_leader.borrow_and_update();
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
        }
    }
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
