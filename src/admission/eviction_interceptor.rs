//! Admission of `EvictionInterceptor` writes (SPEC 5.5): the registration of an interceptor.
//!
//! Rules:
//! - R1 (CREATE) `metadata.name` is the interceptor's name: a fully qualified domain name
//!   (SPEC 1), not `imperative-eviction.k8s.io` (evictord itself, which needs no registration),
//!   and a `*.k8s.io` name only if allowlisted — the names a pod may declare.
//! - R2 (CREATE, UPDATE) `spec.serviceAccounts`: at most 32, each a namespace (DNS-1123 label)
//!   and a name (DNS-1123 subdomain), no account twice.
//! - R3 (CREATE, UPDATE, status included) `status.heartbeatTime` is not in the future (beyond
//!   the clock skew): a runner cannot claim to run ahead of time.
//!
//! Nothing here needs the cluster. Creating a registration is a cluster administrator's act
//! (the resource is cluster-scoped; RBAC decides who may).

use std::collections::BTreeSet;

use jiff::Timestamp;
use kube::core::admission::Operation;

use super::names::{k8s_io_interceptor_allowed, validate_fqdn};
use super::{ReviewRequest, Settings, Verdict};
use crate::api::{
    EvictionInterceptor, IMPERATIVE_INTERCEPTOR, MAX_INTERCEPTOR_SERVICE_ACCOUNTS,
    ServiceAccountReference,
};
use crate::selector::is_dns_label;

/// Reviews one write of an EvictionInterceptor (rules R1–R3; the first violation is reported).
pub fn review_eviction_interceptor(
    req: &ReviewRequest<'_, EvictionInterceptor>,
    settings: &Settings,
) -> Verdict {
    let Some(new) = req.object else {
        // DELETE (or a review without the object, which kube-apiserver never sends on a write).
        return Verdict::allow();
    };
    let mut verdict = Verdict::allow();
    let mut apply = |outcome: Result<(), String>| {
        if let Err(message) = outcome {
            verdict.deny_if_allowed(message);
        }
    };
    if req.operation == Operation::Create && !req.is_status() {
        apply(r1_name(req, new, settings));
    }
    if !req.is_status() {
        apply(r2_service_accounts(&new.spec.service_accounts));
    }
    apply(r3_heartbeat(new, req.now, settings));
    verdict
}

/// R1: the name is an interceptor name a pod may declare.
fn r1_name(
    req: &ReviewRequest<'_, EvictionInterceptor>,
    new: &EvictionInterceptor,
    settings: &Settings,
) -> Result<(), String> {
    let name = new.metadata.name.as_deref().unwrap_or(req.name);
    validate_fqdn(name).map_err(|problem| {
        format!("metadata.name: {problem} (rule R1): name the object after the interceptor")
    })?;
    if name == IMPERATIVE_INTERCEPTOR {
        return Err(format!(
            "metadata.name: {IMPERATIVE_INTERCEPTOR} is evictord itself and needs no registration (rule R1)"
        ));
    }
    if !k8s_io_interceptor_allowed(name, &settings.extra_k8s_io_interceptors, false) {
        return Err(format!(
            "metadata.name: {name:?} is a *.k8s.io name that is not in the allowlist (rule R1): no pod \
             may declare it; use a name in your own domain, or ask the operator to add it to \
             evictord's *.k8s.io allowlist"
        ));
    }
    Ok(())
}

/// R2: the service accounts are few, well formed and unique.
fn r2_service_accounts(accounts: &[ServiceAccountReference]) -> Result<(), String> {
    if accounts.len() > MAX_INTERCEPTOR_SERVICE_ACCOUNTS {
        return Err(format!(
            "spec.serviceAccounts has {} entries; at most {MAX_INTERCEPTOR_SERVICE_ACCOUNTS} are allowed (rule R2)",
            accounts.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, sa) in accounts.iter().enumerate() {
        if !is_dns_label(&sa.namespace) {
            return Err(format!(
                "spec.serviceAccounts[{i}].namespace {:?} is not a namespace name (rule R2): 1-63 \
                 characters of [a-z0-9-], not starting or ending with '-'",
                sa.namespace
            ));
        }
        if sa.name.len() > 253 || !sa.name.split('.').all(is_dns_label) {
            return Err(format!(
                "spec.serviceAccounts[{i}].name {:?} is not a service account name (rule R2): a DNS-1123 \
                 subdomain of at most 253 characters",
                sa.name
            ));
        }
        if !seen.insert(sa) {
            return Err(format!(
                "spec.serviceAccounts[{i}] {sa} is listed twice (rule R2)"
            ));
        }
    }
    Ok(())
}

/// R3: the heartbeat is not in the future.
fn r3_heartbeat(
    new: &EvictionInterceptor,
    now: Timestamp,
    settings: &Settings,
) -> Result<(), String> {
    let Some(t) = new.status.as_ref().and_then(|s| s.heartbeat_time.as_ref()) else {
        return Ok(());
    };
    let latest = now
        .checked_add(settings.clock_skew)
        .unwrap_or(Timestamp::MAX);
    if t.0 <= latest {
        return Ok(());
    }
    Err(format!(
        "status.heartbeatTime {} is in the future (rule R3): it may be at most {} after now ({now})",
        t.0,
        humantime::format_duration(settings.clock_skew)
    ))
}

#[cfg(test)]
mod tests {
    use jiff::{SignedDuration, Timestamp};
    use k8s_openapi::api::authentication::v1::UserInfo;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use rstest::rstest;

    use super::*;
    use crate::api::{EvictionInterceptorSpec, EvictionInterceptorStatus};

    fn now() -> Timestamp {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn evi(name: &str, accounts: &[(&str, &str)], heartbeat: Option<i64>) -> EvictionInterceptor {
        let mut e = EvictionInterceptor::new(
            name,
            EvictionInterceptorSpec {
                service_accounts: accounts
                    .iter()
                    .map(|(namespace, name)| ServiceAccountReference {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    })
                    .collect(),
            },
        );
        e.status = heartbeat.map(|s| EvictionInterceptorStatus {
            heartbeat_time: Some(Time(
                now().checked_add(SignedDuration::from_secs(s)).unwrap(),
            )),
            runner: None,
        });
        e
    }

    fn review(op: Operation, sub: Option<&str>, new: &EvictionInterceptor) -> Verdict {
        let user = UserInfo::default();
        let settings = Settings {
            extra_k8s_io_interceptors: vec!["custom.k8s.io".into()],
            ..Settings::default()
        };
        let old = (op != Operation::Create).then_some(new);
        let req = ReviewRequest {
            operation: op,
            sub_resource: sub,
            namespace: None,
            name: new.metadata.name.as_deref().unwrap_or_default(),
            object: Some(new),
            old_object: old,
            user: &user,
            dry_run: false,
            now: now(),
        };
        review_eviction_interceptor(&req, &settings)
    }

    const SA: &[(&str, &str)] = &[("db", "operator")];

    #[rstest]
    #[case::r1_fqdn_allowed(evi("db.example.com", SA, None), None)]
    #[case::r1_allowlisted_k8s_io_allowed(evi("deployment.apps.k8s.io", &[], None), None)]
    #[case::r1_extra_k8s_io_allowed(evi("custom.k8s.io", SA, None), None)]
    #[case::r1_not_fqdn_denied(
        evi("db", SA, None),
        Some(
            "metadata.name: \"db\" must be a fully qualified domain name with at least two labels (e.g. example.com) (rule R1)"
        )
    )]
    #[case::r1_imperative_denied(
        evi(IMPERATIVE_INTERCEPTOR, SA, None),
        Some("imperative-eviction.k8s.io is evictord itself and needs no registration (rule R1)")
    )]
    #[case::r1_unlisted_k8s_io_denied(
        evi("other.k8s.io", SA, None),
        Some("\"other.k8s.io\" is a *.k8s.io name that is not in the allowlist (rule R1)")
    )]
    #[case::r2_empty_allowed(evi("db.example.com", &[], None), None)]
    #[case::r2_two_allowed(evi("db.example.com", &[("db", "operator"), ("db", "backup.v2")], None), None)]
    #[case::r2_bad_namespace_denied(evi("db.example.com", &[("Db", "operator")], None), Some("spec.serviceAccounts[0].namespace \"Db\" is not a namespace name (rule R2)"))]
    #[case::r2_bad_name_denied(evi("db.example.com", &[("db", "op_erator")], None), Some("spec.serviceAccounts[0].name \"op_erator\" is not a service account name (rule R2)"))]
    #[case::r2_empty_name_denied(evi("db.example.com", &[("db", "")], None), Some("(rule R2)"))]
    #[case::r2_duplicate_denied(evi("db.example.com", &[("db", "operator"), ("db", "operator")], None), Some("spec.serviceAccounts[1] db/operator is listed twice (rule R2)"))]
    #[case::r3_heartbeat_now_allowed(evi("db.example.com", SA, Some(10)), None)]
    #[case::r3_heartbeat_future_denied(
        evi("db.example.com", SA, Some(11)),
        Some("status.heartbeatTime 2030-01-01T00:00:11Z is in the future (rule R3)")
    )]
    fn create_rows(#[case] obj: EvictionInterceptor, #[case] denied: Option<&str>) {
        let v = review(Operation::Create, None, &obj);
        match (denied, &v.denied) {
            (None, None) => {}
            (Some(want), Some(got)) => assert!(got.contains(want), "{got}"),
            (want, got) => panic!("want {want:?}, got {got:?}"),
        }
        assert!(v.warnings.is_empty());
    }

    #[test]
    fn r2_too_many_denied() {
        let names: Vec<String> = (0..33).map(|i| format!("sa-{i}")).collect();
        let accounts: Vec<(&str, &str)> = names.iter().map(|n| ("db", n.as_str())).collect();
        let v = review(
            Operation::Create,
            None,
            &evi("db.example.com", &accounts, None),
        );
        assert!(
            v.denied
                .is_some_and(|m| m.contains("33 entries; at most 32 are allowed (rule R2)"))
        );
    }

    /// The name is checked on creation only (it cannot change); a status write is checked by R3
    /// alone (the spec cannot change through it).
    #[rstest]
    #[case::r1_not_rechecked_on_update(Operation::Update, None, evi("legacy", SA, None), None)]
    #[case::r2_on_update_denied(Operation::Update, None, evi("db.example.com", &[("db", "a"), ("db", "a")], None), Some("(rule R2)"))]
    #[case::r3_status_renewal_allowed(
        Operation::Update,
        Some("status"),
        evi("db.example.com", SA, Some(0)),
        None
    )]
    #[case::r3_status_future_denied(
        Operation::Update,
        Some("status"),
        evi("db.example.com", SA, Some(60)),
        Some("(rule R3)")
    )]
    #[case::delete_allowed(Operation::Delete, None, evi("db.example.com", SA, Some(600)), None)]
    fn other_rows(
        #[case] op: Operation,
        #[case] sub: Option<&str>,
        #[case] obj: EvictionInterceptor,
        #[case] denied: Option<&str>,
    ) {
        let v = if op == Operation::Delete {
            let user = UserInfo::default();
            let req = ReviewRequest {
                operation: op,
                sub_resource: None,
                namespace: None,
                name: "db.example.com",
                object: None,
                old_object: Some(&obj),
                user: &user,
                dry_run: false,
                now: now(),
            };
            review_eviction_interceptor(&req, &Settings::default())
        } else {
            review(op, sub, &obj)
        };
        match (denied, &v.denied) {
            (None, None) => {}
            (Some(want), Some(got)) => assert!(got.contains(want), "{got}"),
            (want, got) => panic!("want {want:?}, got {got:?}"),
        }
    }
}
