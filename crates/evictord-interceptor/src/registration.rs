//! The runner's registration of its interceptor (SPEC 5.5): it creates the interceptor's
//! `EvictionInterceptor` when none exists and renews `status.heartbeatTime` while it runs.
//!
//! - The object is created with the service accounts the runner was given, else with the one
//!   the process runs as (the subject of its mounted service account token), else with none (then
//!   only evictord's own writes pass rule S7 for it: right for the interceptors evictord runs
//!   itself, and the log says so).
//! - An object that exists is the administrator's: its `spec` is never rewritten; only the status
//!   heartbeat is renewed.
//! - Registration is best effort: without the CRD or without permission to create the object the
//!   interceptor runs as before (unregistered, which `--interceptor-registration` reports), and
//!   the runner tries again at the next renewal. Each change of that state is logged once.

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tracing::{debug, info, warn};

use evictord_api::identity::{SERVICE_ACCOUNT_TOKEN_PATH, token_subject};
use evictord_api::{EvictionInterceptor, EvictionInterceptorSpec, ServiceAccountReference};

/// How often the runner renews its interceptor's heartbeat by default.
pub const DEFAULT_RENEWAL: Duration = Duration::from_secs(60);

/// What one renewal achieved (logged when it changes).
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Registered (created or found) and the heartbeat renewed.
    Renewed,
    /// The object could not be created or renewed; the reason.
    Failed(String),
}

/// The service accounts of a registration the runner creates: `given`, else the process's own
/// service account (`own_user`, when it is one), else none.
pub fn service_accounts_for(
    given: Option<&[ServiceAccountReference]>,
    own_user: Option<&str>,
) -> Vec<ServiceAccountReference> {
    match given {
        Some(accounts) => accounts.to_vec(),
        None => own_user
            .and_then(ServiceAccountReference::from_username)
            .into_iter()
            .collect(),
    }
}

/// The user the process runs as in a pod: the subject of its mounted service account token.
pub fn own_service_account_user() -> Option<String> {
    std::fs::read_to_string(SERVICE_ACCOUNT_TOKEN_PATH)
        .ok()
        .as_deref()
        .and_then(token_subject)
}

/// Who renews the heartbeat: the pod (`POD_NAME`) or host name.
fn runner_identity() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("pid-{}", std::process::id()))
}

/// Keeps `name` registered until `shutdown`: one renewal at once, then one every `every`.
pub async fn keep_registered(
    client: Client,
    name: String,
    given: Option<Vec<ServiceAccountReference>>,
    every: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let accounts = service_accounts_for(given.as_deref(), own_service_account_user().as_deref());
    let runner = runner_identity();
    let api: Api<EvictionInterceptor> = Api::all(client);
    let mut last: Option<State> = None;
    loop {
        let state = match renew(&api, &name, &accounts, &runner).await {
            Ok(created) => {
                if created {
                    info!(interceptor = %name, service_accounts = ?accounts, "registered the interceptor (EvictionInterceptor created)");
                    if accounts.is_empty() {
                        info!(interceptor = %name, "no service account identity: registered without service accounts, so only evictord's own writes change its entries under --interceptor-registration=enforce; give the runner its service accounts");
                    }
                }
                State::Renewed
            }
            Err(reason) => State::Failed(reason),
        };
        if last.as_ref() != Some(&state) {
            match &state {
                State::Renewed => debug!(interceptor = %name, "registration renewed"),
                State::Failed(reason) => {
                    warn!(interceptor = %name, %reason, "interceptor not registered; it runs unregistered and the runner tries again")
                }
            }
            last = Some(state);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Renews the heartbeat, creating the object first when it is missing (a renewal is one PATCH;
/// the object is read by nobody). `Ok(true)` when it was created.
async fn renew(
    api: &Api<EvictionInterceptor>,
    name: &str,
    accounts: &[ServiceAccountReference],
    runner: &str,
) -> Result<bool, String> {
    match heartbeat(api, name, runner).await {
        Ok(()) => return Ok(false),
        // Missing (or its CRD is: creating it says which).
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(describe("renewing the heartbeat of", name, &e)),
    }
    let obj = EvictionInterceptor::new(
        name,
        EvictionInterceptorSpec {
            service_accounts: accounts.to_vec(),
        },
    );
    let created = match api.create(&PostParams::default(), &obj).await {
        Ok(_) => true,
        // Another runner of the same interceptor was first.
        Err(kube::Error::Api(s)) if s.code == 409 => false,
        Err(e) => return Err(describe("creating", name, &e)),
    };
    heartbeat(api, name, runner)
        .await
        .map_err(|e| describe("renewing the heartbeat of", name, &e))?;
    Ok(created)
}

/// Writes `status.heartbeatTime` (now, whole seconds) and `status.runner`.
async fn heartbeat(
    api: &Api<EvictionInterceptor>,
    name: &str,
    runner: &str,
) -> Result<(), kube::Error> {
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::now());
    let patch = json!({"status": {"heartbeatTime": now.to_string(), "runner": runner}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

fn describe(what: &str, name: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => format!(
            "{what} EvictionInterceptor {name}: the EvictionInterceptor CRD is not installed (apply the chart's crds/)"
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "{what} EvictionInterceptor {name}: forbidden ({}); grant the runner's account create on \
             evictioninterceptors and patch on evictioninterceptors/status, or have an administrator create it",
            s.message
        ),
        e => format!("{what} EvictionInterceptor {name}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(ns: &str, name: &str) -> ServiceAccountReference {
        ServiceAccountReference {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn given_accounts_win_then_the_own_service_account_then_none() {
        let given = [sa("db", "operator")];
        assert_eq!(
            service_accounts_for(Some(&given), Some("system:serviceaccount:x:y")),
            given
        );
        assert_eq!(
            service_accounts_for(None, Some("system:serviceaccount:x:y")),
            [sa("x", "y")]
        );
        assert!(service_accounts_for(None, Some("admin")).is_empty());
        assert!(service_accounts_for(None, None).is_empty());
        assert!(service_accounts_for(Some(&[]), Some("system:serviceaccount:x:y")).is_empty());
    }
}
