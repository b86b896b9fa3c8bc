//! Admission of Pods: the rules on the interceptor annotation `evictord.dev/eviction-interceptors`
//! (SPEC 1), which stands in for the KEP's `pod.spec.evictionInterceptors`.
//!
//! Rules (CREATE, and UPDATE through P7):
//! - P1 no empty item (`a.example.com,,b.example.com`).
//! - P2 every name is a fully qualified domain name.
//! - P3 no name appears twice.
//! - P4 at most 15 names (the controller appends the default interceptor, and a request holds
//!   at most 16).
//! - P5 `imperative-eviction.k8s.io` is never declared by a pod: only the controller places it.
//! - P6 other `*.k8s.io` names only if allowlisted (built-in list plus the operator's).
//! - P7 the annotation is immutable: an UPDATE may not add, remove or change it. Changes of
//!   white space only are not changes. Because of P7, an UPDATE that keeps the annotation is not
//!   checked against P1–P6 again, so pods admitted before evictord was installed stay updatable.
//! - P8 (a warning, never a denial; SPEC 5.5): on CREATE, each declared interceptor that no
//!   `EvictionInterceptor` registers is named, unless `--interceptor-registration=off`. An
//!   unknown registration (offline, cache not synced) warns about nothing.
//!
//! Most pods carry no annotation: for them the review returns before parsing anything.

use kube::core::admission::Operation;

use crate::admission::names::{k8s_io_interceptor_allowed, validate_fqdn};
use crate::admission::partial::InterceptorAnnotation;
use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::{
    IMPERATIVE_INTERCEPTOR, INTERCEPTORS_ANNOTATION, Registration, parse_interceptor_list,
};
use crate::cluster::{ClusterView, registration};

/// Most interceptors a pod may declare.
pub const MAX_POD_INTERCEPTORS: usize = 15;

/// Validates the interceptor annotation of a created or updated pod (rules P1–P7, see the module
/// docs). The webhook decodes pods as [`AdmittedPod`](crate::admission::partial::AdmittedPod),
/// which keeps only the annotation; any pod type that exposes it is reviewed the same way.
///
/// # Guarantees
/// A pod without the annotation on both the old and the new object is allowed at once, without
/// allocation. DELETE and CONNECT are always allowed. Never warns.
pub fn review_pod<P: InterceptorAnnotation>(
    req: &ReviewRequest<'_, P>,
    settings: &Settings,
) -> Verdict {
    let new = req.object.and_then(P::interceptor_annotation);
    let old = req.old_object.and_then(P::interceptor_annotation);
    if new.is_none() && old.is_none() {
        return Verdict::allow();
    }
    let result = match req.operation {
        Operation::Create => new.map_or(Ok(()), |value| check_interceptors(value, settings)),
        Operation::Update => check_unchanged(old, new),
        Operation::Delete | Operation::Connect => Ok(()),
    };
    match result {
        Ok(()) => Verdict::allow(),
        Err(message) => Verdict::deny(message),
    }
}

/// [`review_pod`] and, for an allowed CREATE, the warnings of rule P8 (the declared
/// interceptors no `EvictionInterceptor` registers): what the Pod webhook answers.
pub fn review_pod_with_registrations<P: InterceptorAnnotation>(
    req: &ReviewRequest<'_, P>,
    view: &dyn ClusterView,
    settings: &Settings,
) -> Verdict {
    let mut verdict = review_pod(req, settings);
    if !verdict.allowed()
        || req.operation != Operation::Create
        || !settings.interceptor_registration.reports()
    {
        return verdict;
    }
    if let Some(value) = req.object.and_then(P::interceptor_annotation) {
        for name in parse_interceptor_list(value) {
            if registration(view, &name) == Registration::NotRegistered {
                verdict.warn(p8_unregistered(&name, settings));
            }
        }
    }
    verdict
}

/// The number of P8 warnings in a verdict of [`review_pod_with_registrations`] (for the
/// `evictord_unregistered_interceptors` metric of the Pod webhook).
pub fn p8_warnings(verdict: &Verdict) -> usize {
    verdict
        .warnings
        .iter()
        .filter(|w| w.contains(P8_MARK))
        .count()
}

const P8_MARK: &str = "; rule P8): ";

/// The P8 warning for one name, short enough for kube-apiserver to pass on whole (it may cut
/// warnings beyond 256 characters).
fn p8_unregistered(name: &str, settings: &Settings) -> String {
    let cost = if settings.interceptor_registration.enforces() {
        format!(
            "passed over {} after it becomes active",
            humantime::format_duration(settings.unregistered_interceptor_grace)
        )
    } else {
        format!(
            "holds each eviction of this pod up to {} unless it reports",
            humantime::format_duration(settings.interceptor_deadline)
        )
    };
    format!("interceptor {name:?} is not registered (no EvictionInterceptor {name}{P8_MARK}{cost}")
}

/// Rules P1–P6 on one annotation value; the first violated rule is reported.
fn check_interceptors(value: &str, settings: &Settings) -> Result<(), String> {
    let names = parse_interceptor_list(value);
    check_no_empty_items(&names)?;
    check_fqdns(&names)?;
    check_unique(&names)?;
    check_count(&names)?;
    check_not_imperative(&names)?;
    check_k8s_io_allowlisted(&names, settings)
}

fn field() -> String {
    format!("metadata.annotations[{INTERCEPTORS_ANNOTATION:?}]")
}

/// Rule P1: no empty item.
fn check_no_empty_items(names: &[String]) -> Result<(), String> {
    match names.iter().position(String::is_empty) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{}: item {i} is empty (rule P1); write the interceptor names separated by single commas",
            field()
        )),
    }
}

/// Rule P2: every name is a fully qualified domain name.
fn check_fqdns(names: &[String]) -> Result<(), String> {
    let problems: Vec<String> = names
        .iter()
        .filter_map(|n| validate_fqdn(n).err())
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: {} (rule P2); interceptor names are fully qualified domain names such as interceptor.example.com",
        field(),
        problems.join("; ")
    ))
}

/// Rule P3: no name twice.
fn check_unique(names: &[String]) -> Result<(), String> {
    for (j, name) in names.iter().enumerate() {
        if names[..j].contains(name) {
            return Err(format!(
                "{}: {name:?} appears more than once (rule P3); list each interceptor once",
                field()
            ));
        }
    }
    Ok(())
}

/// Rule P4: at most [`MAX_POD_INTERCEPTORS`] names.
fn check_count(names: &[String]) -> Result<(), String> {
    if names.len() <= MAX_POD_INTERCEPTORS {
        return Ok(());
    }
    Err(format!(
        "{}: {} interceptors, more than the {MAX_POD_INTERCEPTORS} allowed (rule P4); remove some",
        field(),
        names.len()
    ))
}

/// Rule P5: the default interceptor is reserved for the controller.
fn check_not_imperative(names: &[String]) -> Result<(), String> {
    if !names.iter().any(|n| n == IMPERATIVE_INTERCEPTOR) {
        return Ok(());
    }
    Err(format!(
        "{}: {IMPERATIVE_INTERCEPTOR:?} is reserved (rule P5): the controller appends it to every eviction request; remove it",
        field()
    ))
}

/// Rule P6: `*.k8s.io` names only if allowlisted.
fn check_k8s_io_allowlisted(names: &[String], settings: &Settings) -> Result<(), String> {
    let Some(name) = names
        .iter()
        .find(|n| !k8s_io_interceptor_allowed(n, &settings.extra_k8s_io_interceptors, false))
    else {
        return Ok(());
    };
    Err(format!(
        "{}: {name:?} is a *.k8s.io name that is not in the allowlist (rule P6); use a name in your own domain, \
         or ask the cluster operator to add it to evictord's *.k8s.io allowlist",
        field()
    ))
}

/// Rule P7: the annotation cannot be added, removed or changed after creation.
fn check_unchanged(old: Option<&str>, new: Option<&str>) -> Result<(), String> {
    let what = match (old, new) {
        (None, Some(_)) => "added",
        (Some(_), None) => "removed",
        (Some(o), Some(n)) if parse_interceptor_list(o) != parse_interceptor_list(n) => "changed",
        _ => return Ok(()),
    };
    Err(format!(
        "{}: the annotation is immutable and cannot be {what} after the pod is created (rule P7); \
         recreate the pod (e.g. through its workload template) to declare other interceptors",
        field()
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use jiff::Timestamp;
    use k8s_openapi::api::authentication::v1::UserInfo;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use rstest::rstest;

    use super::*;
    use crate::api::RegistrationMode;
    use crate::cluster::CachedPod;

    fn pod(annotation: Option<&str>) -> CachedPod {
        let mut annotations = BTreeMap::from([("team".to_string(), "db".to_string())]);
        if let Some(a) = annotation {
            annotations.insert(INTERCEPTORS_ANNOTATION.into(), a.into());
        }
        CachedPod {
            metadata: ObjectMeta {
                name: Some("p1".into()),
                namespace: Some("default".into()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            ..CachedPod::default()
        }
    }

    fn review(op: Operation, old: Option<&str>, new: Option<&str>, settings: &Settings) -> Verdict {
        let user = UserInfo::default();
        let (old, new) = (pod(old), pod(new));
        let req = ReviewRequest {
            object: (op != Operation::Delete).then_some(&new),
            old_object: (op != Operation::Create).then_some(&old),
            operation: op,
            sub_resource: None,
            namespace: Some("default"),
            name: "p1",
            user: &user,
            dry_run: false,
            now: Timestamp::UNIX_EPOCH,
        };
        review_pod(&req, settings)
    }

    /// `n` distinct valid names (leaked: a test's `&'static str` case value).
    fn names(n: usize) -> &'static str {
        (0..n)
            .map(|i| format!("i{i}.example.com"))
            .collect::<Vec<_>>()
            .join(",")
            .leak()
    }

    #[rstest]
    #[case::no_annotation_allowed(None, None)]
    #[case::empty_annotation_declares_none(Some(" "), None)]
    #[case::p1_no_empty_item_allowed(Some(" a.example.com , b.example.com "), None)]
    #[case::p1_empty_item_denied(
        Some("a.example.com,,b.example.com"),
        Some("item 1 is empty (rule P1)")
    )]
    #[case::p1_trailing_comma_denied(Some("a.example.com,"), Some("rule P1"))]
    #[case::p2_fqdn_allowed(Some("team-a.interceptors.example.com"), None)]
    #[case::p2_single_label_denied(
        Some("interceptor"),
        Some("\"interceptor\" must be a fully qualified domain name")
    )]
    #[case::p2_uppercase_denied(Some("A.example.com"), Some("rule P2"))]
    #[case::p3_unique_allowed(Some("a.example.com,b.example.com"), None)]
    #[case::p3_duplicate_denied(
        Some("a.example.com, b.example.com, a.example.com"),
        Some("\"a.example.com\" appears more than once (rule P3)")
    )]
    #[case::p4_fifteen_allowed(Some(names(15)), None)]
    #[case::p4_sixteen_denied(
        Some(names(16)),
        Some("16 interceptors, more than the 15 allowed (rule P4)")
    )]
    #[case::p5_imperative_denied(
        Some("a.example.com,imperative-eviction.k8s.io"),
        Some("\"imperative-eviction.k8s.io\" is reserved (rule P5)")
    )]
    #[case::p6_builtin_k8s_io_allowed(Some("deployment.apps.k8s.io"), None)]
    #[case::p6_extra_k8s_io_allowed(Some("custom.k8s.io"), None)]
    #[case::p6_unlisted_k8s_io_denied(
        Some("other.k8s.io"),
        Some("\"other.k8s.io\" is a *.k8s.io name that is not in the allowlist (rule P6)")
    )]
    #[case::p6_bare_k8s_io_denied(Some("k8s.io"), Some("rule P6"))]
    fn create_rows(#[case] annotation: Option<&str>, #[case] denied: Option<&str>) {
        let settings = Settings {
            extra_k8s_io_interceptors: vec!["custom.k8s.io".into()],
            ..Settings::default()
        };
        let verdict = review(Operation::Create, None, annotation, &settings);
        assert!(verdict.warnings.is_empty() && verdict.patch.is_empty());
        match (denied, &verdict.denied) {
            (None, None) => {}
            (Some(want), Some(got)) => {
                assert!(got.contains(want), "{got}");
                assert!(
                    got.starts_with(
                        "metadata.annotations[\"evictord.dev/eviction-interceptors\"]: "
                    ),
                    "{got}"
                );
            }
            (want, got) => panic!("want denial {want:?}, got {got:?}"),
        }
    }

    #[rstest]
    #[case::p7_unchanged_allowed(
        Some("a.example.com,b.example.com"),
        Some("a.example.com,b.example.com"),
        None
    )]
    #[case::p7_whitespace_only_allowed(
        Some("a.example.com,b.example.com"),
        Some("a.example.com , b.example.com"),
        None
    )]
    #[case::p7_invalid_but_unchanged_allowed(Some("Legacy_Name"), Some("Legacy_Name"), None)]
    #[case::p7_absent_on_both_allowed(None, None, None)]
    #[case::p7_added_denied(
        None,
        Some("a.example.com"),
        Some("cannot be added after the pod is created (rule P7)")
    )]
    #[case::p7_removed_denied(Some("a.example.com"), None, Some("cannot be removed"))]
    #[case::p7_reordered_denied(
        Some("a.example.com,b.example.com"),
        Some("b.example.com,a.example.com"),
        Some("cannot be changed")
    )]
    fn update_rows(
        #[case] old: Option<&str>,
        #[case] new: Option<&str>,
        #[case] denied: Option<&str>,
    ) {
        let verdict = review(Operation::Update, old, new, &Settings::default());
        match (denied, &verdict.denied) {
            (None, None) => {}
            (Some(want), Some(got)) => assert!(got.contains(want), "{got}"),
            (want, got) => panic!("want denial {want:?}, got {got:?}"),
        }
    }

    /// Rule P8 per mode: a warning per declared interceptor nothing registers, on CREATE only,
    /// never with a denial, never when registrations are unknown or registration is off.
    #[rstest]
    #[case::p8_warn_names_the_unregistered(Operation::Create, "a.example.com,b.example.com", RegistrationMode::Warn, Some(&[][..]), &["interceptor \"a.example.com\" is not registered (no EvictionInterceptor a.example.com; rule P8): holds each eviction of this pod up to 20m unless it reports", "interceptor \"b.example.com\" is not registered"][..])]
    #[case::p8_registered_not_named(Operation::Create, "a.example.com,b.example.com", RegistrationMode::Warn, Some(&["b.example.com"][..]), &["\"a.example.com\" is not registered"][..])]
    #[case::p8_enforce_says_passed_over(Operation::Create, "a.example.com", RegistrationMode::Enforce, Some(&[][..]), &["(no EvictionInterceptor a.example.com; rule P8): passed over 1m after it becomes active"][..])]
    #[case::p8_off_silent(Operation::Create, "a.example.com", RegistrationMode::Off, Some(&[][..]), &[][..])]
    #[case::p8_unknown_silent(Operation::Create, "a.example.com", RegistrationMode::Warn, None, &[][..])]
    #[case::p8_update_silent(Operation::Update, "a.example.com", RegistrationMode::Warn, Some(&[][..]), &[][..])]
    #[case::p8_denied_pod_not_warned(Operation::Create, "a.example.com,drain", RegistrationMode::Warn, Some(&[][..]), &[][..])]
    fn p8_rows(
        #[case] op: Operation,
        #[case] annotation: &str,
        #[case] mode: RegistrationMode,
        #[case] registered: Option<&[&str]>,
        #[case] warnings: &[&str],
    ) {
        use crate::api::{EvictionInterceptor, EvictionInterceptorSpec};
        use crate::cluster::StaticView;
        let settings = Settings {
            interceptor_registration: mode,
            ..Settings::default()
        };
        let view = match registered {
            Some(names) => StaticView::with_objects([], [], [], []).with_interceptors(
                names
                    .iter()
                    .map(|n| EvictionInterceptor::new(n, EvictionInterceptorSpec::default())),
            ),
            None => StaticView::unknown(),
        };
        let user = UserInfo::default();
        let p = pod(Some(annotation));
        let req = ReviewRequest {
            object: Some(&p),
            old_object: (op == Operation::Update).then_some(&p),
            operation: op,
            sub_resource: None,
            namespace: Some("default"),
            name: "p1",
            user: &user,
            dry_run: false,
            now: Timestamp::UNIX_EPOCH,
        };
        let verdict = review_pod_with_registrations(&req, &view, &settings);
        assert_eq!(verdict.warnings.len(), warnings.len(), "{verdict:?}");
        for (got, want) in verdict.warnings.iter().zip(warnings) {
            assert!(got.contains(want), "{got:?} lacks {want:?}");
            assert!(got.len() <= 256, "kube-apiserver may cut {got:?}");
        }
    }

    #[test]
    fn delete_is_always_allowed() {
        assert!(review(Operation::Delete, Some("bad,,"), None, &Settings::default()).allowed());
    }
}
