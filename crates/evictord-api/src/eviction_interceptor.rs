//! `EvictionInterceptor` (SPEC 5.5, beyond the seeds): the registration of an interceptor. A
//! cluster-scoped object named after the interceptor says that it exists and which service
//! accounts run it; its status carries a heartbeat that the SDK's runner renews.
//!
//! What registration changes depends on `--interceptor-registration` ([`RegistrationMode`]):
//! nothing (`off`), warnings where a pod names an interceptor nobody registered (`warn`, the
//! default), or in addition (`enforce`) such an interceptor is passed over
//! `--unregistered-interceptor-grace` after its activation, and only a registered interceptor's
//! service accounts (or evictord) may change its entry of an EvictionRequest's status (rule S7).

use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{EvictionRequest, IMPERATIVE_INTERCEPTOR, InterceptorStatus};

/// At most this many service accounts per interceptor.
pub const MAX_INTERCEPTOR_SERVICE_ACCOUNTS: usize = 32;
/// The user name prefix kube-apiserver gives service accounts: `system:serviceaccount:NS:NAME`.
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";

/// Spec of an EvictionInterceptor. The object is named after the interceptor (an FQDN, as pods
/// declare it in `evictord.dev/eviction-interceptors`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "evictord.dev",
    version = "v1alpha1",
    kind = "EvictionInterceptor",
    plural = "evictioninterceptors",
    shortname = "evi",
    status = "EvictionInterceptorStatus",
    printcolumn = r#"{"name":"Service accounts","type":"string","jsonPath":".spec.serviceAccounts[*].name"}"#,
    printcolumn = r#"{"name":"Last heartbeat","type":"date","jsonPath":".status.heartbeatTime"}"#,
    printcolumn = r#"{"name":"Runner","type":"string","jsonPath":".status.runner","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EvictionInterceptorSpec {
    /// The service accounts that run the interceptor. Under `--interceptor-registration=enforce`
    /// only they, and evictord itself, may change the interceptor's entry in an EvictionRequest's
    /// `status.interceptors` (rule S7). Empty: only evictord (the interceptors it runs itself).
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub service_accounts: Vec<ServiceAccountReference>,
}

/// A service account, by namespace and name.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct ServiceAccountReference {
    /// Namespace of the service account.
    #[schemars(length(max = 63))]
    pub namespace: String,
    /// Name of the service account.
    #[schemars(length(max = 253))]
    pub name: String,
}

/// Status of an EvictionInterceptor, renewed by the interceptor's runner.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvictionInterceptorStatus {
    /// When a runner of the interceptor last said it runs. Informative: a registered interceptor
    /// whose runner stopped keeps the normal heartbeat deadline of every request (it may be
    /// restarting).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::time::opt_time"
    )]
    pub heartbeat_time: Option<Time>,
    /// Who renewed the heartbeat last (a pod or host name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub runner: Option<String>,
}

impl ServiceAccountReference {
    /// The user name kube-apiserver gives the account's tokens:
    /// `system:serviceaccount:NAMESPACE:NAME`.
    pub fn username(&self) -> String {
        format!(
            "{SERVICE_ACCOUNT_USER_PREFIX}{}:{}",
            self.namespace, self.name
        )
    }

    /// The account of a service account user name; `None` for any other user.
    pub fn from_username(user: &str) -> Option<Self> {
        let (namespace, name) = user
            .strip_prefix(SERVICE_ACCOUNT_USER_PREFIX)?
            .split_once(':')?;
        (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then(|| Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for ServiceAccountReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl EvictionInterceptor {
    /// True when `user` is one of the interceptor's service accounts.
    pub fn run_by(&self, user: &str) -> bool {
        ServiceAccountReference::from_username(user)
            .is_some_and(|sa| self.spec.service_accounts.contains(&sa))
    }
}

/// `--interceptor-registration`: what an interceptor without an `EvictionInterceptor` object
/// costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RegistrationMode {
    /// Registration is not looked at.
    Off,
    /// Warnings (pod admission, events, `kubectl evictord plan`, node status messages); the
    /// drain behaves as without registration.
    #[default]
    Warn,
    /// Warnings, and unregistered interceptors are passed over after the grace; rule S7 guards
    /// the entries of registered ones.
    Enforce,
}

impl RegistrationMode {
    /// Every mode, in order.
    pub const ALL: [RegistrationMode; 3] = [
        RegistrationMode::Off,
        RegistrationMode::Warn,
        RegistrationMode::Enforce,
    ];

    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            RegistrationMode::Off => "off",
            RegistrationMode::Warn => "warn",
            RegistrationMode::Enforce => "enforce",
        }
    }

    /// True unless `off`: registrations are looked up and missing ones reported.
    pub fn reports(self) -> bool {
        self != RegistrationMode::Off
    }

    /// True for `enforce`.
    pub fn enforces(self) -> bool {
        self == RegistrationMode::Enforce
    }
}

impl fmt::Display for RegistrationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RegistrationMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not one of off, warn, enforce"))
    }
}

/// What is known of one interceptor's registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// An `EvictionInterceptor` of that name exists, or the name is evictord's own
    /// (`imperative-eviction.k8s.io`, which no object may name).
    Registered,
    /// No object of that name exists (confirmed by a synced cache or a complete object list).
    NotRegistered,
    /// Nothing can be said (offline, or the cache has not synced): never acted upon.
    Unknown,
}

impl Registration {
    /// The registration of `name` given whether its object was found (`None`: unknown).
    pub fn of(name: &str, found: Option<bool>) -> Self {
        if is_built_in(name) {
            return Registration::Registered;
        }
        match found {
            Some(true) => Registration::Registered,
            Some(false) => Registration::NotRegistered,
            None => Registration::Unknown,
        }
    }
}

/// True for the interceptor evictord is itself and that needs no object:
/// `imperative-eviction.k8s.io` (reserved; rule R1 refuses an object of that name).
pub fn is_built_in(name: &str) -> bool {
    name == IMPERATIVE_INTERCEPTOR
}

impl EvictionRequest {
    /// The moment an interceptor without registration is passed over under
    /// `--interceptor-registration=enforce` (SPEC 5.5): `grace` after its `activationTime`, or
    /// after the request's `creationTimestamp` when it has none. Heartbeats do not extend it.
    /// `None` without either time (never for a stored object).
    ///
    /// The one definition shared by admission rule S2 and the eviction request controller.
    pub fn unregistered_grace_end_at(
        &self,
        entry: &InterceptorStatus,
        grace: std::time::Duration,
    ) -> Option<jiff::Timestamp> {
        let anchor = entry
            .activation_time
            .as_ref()
            .or(self.metadata.creation_timestamp.as_ref())?
            .0;
        Some(anchor.saturating_add(grace).unwrap_or(jiff::Timestamp::MAX))
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::service_account("system:serviceaccount:ns:runner", Some(("ns", "runner")))]
    #[case::not_a_service_account("alice", None)]
    #[case::group_prefix("system:serviceaccounts:ns", None)]
    #[case::no_name("system:serviceaccount:ns:", None)]
    #[case::no_namespace("system:serviceaccount::runner", None)]
    #[case::extra_colon("system:serviceaccount:ns:a:b", None)]
    fn service_account_user_names(#[case] user: &str, #[case] sa: Option<(&str, &str)>) {
        let parsed = ServiceAccountReference::from_username(user);
        assert_eq!(
            parsed
                .as_ref()
                .map(|s| (s.namespace.as_str(), s.name.as_str())),
            sa
        );
        if let Some(sa) = parsed {
            assert_eq!(sa.username(), user);
        }
    }

    #[test]
    fn run_by_its_service_accounts_only() {
        let evi = EvictionInterceptor::new(
            "db.example.com",
            EvictionInterceptorSpec {
                service_accounts: vec![ServiceAccountReference {
                    namespace: "db".into(),
                    name: "operator".into(),
                }],
            },
        );
        assert!(evi.run_by("system:serviceaccount:db:operator"));
        assert!(!evi.run_by("system:serviceaccount:other:operator"));
        assert!(!evi.run_by("operator"));
    }

    #[test]
    fn modes_parse_and_print() {
        for m in RegistrationMode::ALL {
            assert_eq!(m.as_str().parse::<RegistrationMode>(), Ok(m));
        }
        assert!("strict".parse::<RegistrationMode>().is_err());
        assert_eq!(RegistrationMode::default(), RegistrationMode::Warn);
    }

    #[rstest]
    #[case::found("a.example.com", Some(true), Registration::Registered)]
    #[case::missing("a.example.com", Some(false), Registration::NotRegistered)]
    #[case::unknown("a.example.com", None, Registration::Unknown)]
    #[case::imperative_is_built_in(IMPERATIVE_INTERCEPTOR, Some(false), Registration::Registered)]
    #[case::imperative_even_unknown(IMPERATIVE_INTERCEPTOR, None, Registration::Registered)]
    fn registration_of_a_name(
        #[case] name: &str,
        #[case] found: Option<bool>,
        #[case] expected: Registration,
    ) {
        assert_eq!(Registration::of(name, found), expected);
    }

    #[test]
    fn grace_runs_from_activation_else_creation() {
        use jiff::Timestamp;
        let at = |s: i64| Time(Timestamp::from_second(1_800_000_000 + s).unwrap());
        let mut er = EvictionRequest::new("uid", Default::default());
        let grace = std::time::Duration::from_secs(60);
        let mut entry = InterceptorStatus::default();
        assert_eq!(er.unregistered_grace_end_at(&entry, grace), None);
        er.metadata.creation_timestamp = Some(at(0));
        assert_eq!(er.unregistered_grace_end_at(&entry, grace), Some(at(60).0));
        entry.activation_time = Some(at(100));
        entry.heartbeat_time = Some(at(150));
        assert_eq!(
            er.unregistered_grace_end_at(&entry, grace),
            Some(at(160).0),
            "heartbeats do not extend the grace"
        );
    }
}
