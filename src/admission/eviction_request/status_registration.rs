//! What interceptor registration (SPEC 5.5) adds to the status rules under
//! `--interceptor-registration=enforce`:
//!
//! - the third proof of rule S2 that an active interceptor may be handed over: no
//!   `EvictionInterceptor` registers it and `--unregistered-interceptor-grace` has passed since its
//!   activation ([`not_registered_proof`]), the same proof the controller's pass-over rests on;
//! - rule S7 ([`s7_entry_writers`]): a status write that changes the `status.interceptors` entry of
//!   a registered interceptor comes from one of its `spec.serviceAccounts` or from evictord itself
//!   (`Settings::own_user`). The entry of `imperative-eviction.k8s.io`, which evictord is, only
//!   evictord changes.
//!
//! A registration the view cannot tell (offline, cache not synced) never denies on its own: the
//! hand-over is admitted once the grace has passed, and S7 is skipped, each with a warning.

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;

use super::status_interceptors::as_read;
use crate::admission::Settings;
use crate::api::{
    EvictionRequest, EvictionRequestStatus, InterceptorStatus, Registration, is_built_in,
};
use crate::cluster::{ClusterView, Lookup, registration};

/// Why an unregistered interceptor may be handed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum NotRegistered {
    /// Confirmed: no object, grace passed.
    Confirmed,
    /// The grace passed but whether an object exists is unknown: admitted with this warning.
    Unknown(String),
}

/// The S2 proof for handing over `entry` (active, not completed, heartbeat not expired): under
/// `enforce`, no registration and the grace passed (with the clock skew in the writer's favour,
/// as for the deadline). `None` when the proof does not hold.
pub(super) fn not_registered_proof(
    old: &EvictionRequest,
    entry: &InterceptorStatus,
    now: Timestamp,
    view: &dyn ClusterView,
    settings: &Settings,
) -> Option<NotRegistered> {
    if !settings.interceptor_registration.enforces() {
        return None;
    }
    let end = old.unregistered_grace_end_at(entry, settings.unregistered_interceptor_grace)?;
    if now
        .checked_add(settings.clock_skew)
        .unwrap_or(Timestamp::MAX)
        < end
    {
        return None;
    }
    match registration(view, &entry.name) {
        Registration::Registered => None,
        Registration::NotRegistered => Some(NotRegistered::Confirmed),
        Registration::Unknown => Some(NotRegistered::Unknown(format!(
            "rule S2: {:?} handed over for want of registration {} after its activation, but \
             whether an EvictionInterceptor registers it is unknown (registrations not synced)",
            entry.name,
            humantime::format_duration(settings.unregistered_interceptor_grace)
        ))),
    }
}

/// S7 (under `enforce`): every changed entry of a registered interceptor is written by one of
/// its service accounts or by evictord. Returns the denial, if any, and warnings for the entries
/// whose registration is unknown.
pub(super) fn s7_entry_writers(
    user: &UserInfo,
    was: &EvictionRequestStatus,
    is: &EvictionRequestStatus,
    view: &dyn ClusterView,
    settings: &Settings,
) -> (Result<(), String>, Vec<String>) {
    let mut warnings = Vec::new();
    if !settings.interceptor_registration.enforces() {
        return (Ok(()), warnings);
    }
    let username = user.username.as_deref().unwrap_or_default();
    if settings.own_user.as_deref() == Some(username) && !username.is_empty() {
        return (Ok(()), warnings);
    }
    for (i, name) in changed_entries(was, is) {
        let field = format!("status.interceptors[{i}] ({name})");
        if is_built_in(name) {
            return (
                Err(format!(
                    "user {username:?} may not change {field} (rule S7): {name} is evictord itself, \
                     and only evictord writes its entry"
                )),
                warnings,
            );
        }
        match view.eviction_interceptor(name) {
            Lookup::Found(evi) if evi.run_by(username) => {}
            Lookup::Found(evi) => {
                let accounts: Vec<String> = evi
                    .spec
                    .service_accounts
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                return (
                    Err(format!(
                        "user {username:?} may not change {field} (rule S7): the EvictionInterceptor \
                         {name} registers the service accounts [{}]; only they and evictord write its \
                         entry",
                        accounts.join(", ")
                    )),
                    warnings,
                );
            }
            Lookup::Missing => {}
            Lookup::Unknown => warnings.push(format!(
                "rule S7 not checked: whether an EvictionInterceptor registers {name} is unknown \
                 (registrations not synced)"
            )),
        }
    }
    (Ok(()), warnings)
}

/// The entries the update changes, by index and name (the zero values of a typed client count
/// as unset, as in S4). Entries S4 refuses (wrong names) are S4's to report.
fn changed_entries<'a>(
    was: &EvictionRequestStatus,
    is: &'a EvictionRequestStatus,
) -> Vec<(usize, &'a str)> {
    is.interceptors
        .iter()
        .enumerate()
        .filter(|(i, new)| {
            let old = was
                .interceptors
                .get(*i)
                .filter(|o| o.name == new.name)
                .map(|o| as_read(o).into_owned())
                .unwrap_or_else(|| InterceptorStatus {
                    name: new.name.clone(),
                    ..InterceptorStatus::default()
                });
            old != *as_read(new)
        })
        .map(|(i, new)| (i, new.name.as_str()))
        .collect()
}

#[cfg(test)]
#[path = "status_registration_tests.rs"]
mod tests;
