//! Webhook configurations that register a server by URL (`evictord webhook-config`): the same
//! webhooks, rules and policies as the chart, which uses a Service reference instead.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::ObjectMeta;

use crate::api::INTERCEPTORS_ANNOTATION;

/// Path of the EvictionRequest validating webhook.
pub const PATH_VALIDATE_EVICTION_REQUESTS: &str = "/validate/evictionrequests";
/// Path of the NodeMaintenance validating webhook.
pub const PATH_VALIDATE_NODE_MAINTENANCES: &str = "/validate/nodemaintenances";
/// Path of the NodeMaintenance mutating webhook.
pub const PATH_MUTATE_NODE_MAINTENANCES: &str = "/mutate/nodemaintenances";
/// Path of the EvictionInterceptor validating webhook.
pub const PATH_VALIDATE_EVICTION_INTERCEPTORS: &str = "/validate/evictioninterceptors";
/// Path of the MaintenanceBudget validating webhook.
pub const PATH_VALIDATE_MAINTENANCE_BUDGETS: &str = "/validate/maintenancebudgets";
/// Path of the Pod mutating webhook (the `evictord.dev/serving` readiness gate, rule P9).
pub const PATH_MUTATE_PODS: &str = "/mutate/pods";
/// Path of the Pod validating webhook.
pub const PATH_VALIDATE_PODS: &str = "/validate/pods";
/// Path of the Eviction API bridge (`pods/eviction` CREATE).
pub const PATH_VALIDATE_POD_EVICTIONS: &str = "/validate/pods-eviction";
/// Timeout of the Eviction API bridge: short, since a drainer waits on it and an outage must
/// cost it little (failurePolicy Ignore).
pub const POD_EVICTION_TIMEOUT_SECONDS: i32 = 3;

/// The CEL expression that sends only annotated pods (Kubernetes ≥ 1.28).
pub fn pod_match_condition() -> String {
    let a = INTERCEPTORS_ANNOTATION;
    format!(
        "(has(object.metadata.annotations) && '{a}' in object.metadata.annotations) || \
         (request.operation == 'UPDATE' && has(oldObject.metadata.annotations) && '{a}' in oldObject.metadata.annotations)"
    )
}

/// The CEL expression that sends the pod mutating webhook only the pods whose interceptor
/// annotation mentions `endpoints.evictord.dev` (Kubernetes ≥ 1.28; the server checks the list
/// exactly).
pub fn serving_match_condition() -> String {
    let a = INTERCEPTORS_ANNOTATION;
    format!(
        "has(object.metadata.annotations) && '{a}' in object.metadata.annotations && \
         object.metadata.annotations['{a}'].contains('{}')",
        crate::serving::ENDPOINTS_INTERCEPTOR
    )
}

fn rule(group: &str, resources: &[&str], operations: &[&str]) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![group.into()]),
        api_versions: Some(vec![if group.is_empty() {
            "v1".into()
        } else {
            crate::api::VERSION.into()
        }]),
        operations: Some(operations.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        scope: None,
    }
}

fn client(url_base: &str, path: &str, ca: &[u8]) -> WebhookClientConfig {
    WebhookClientConfig {
        url: Some(format!("{}{path}", url_base.trim_end_matches('/'))),
        ca_bundle: Some(ByteString(ca.to_vec())),
        service: None,
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/name".to_string(),
            "evictord".to_string(),
        )])),
        ..Default::default()
    }
}

/// The validating configuration: EvictionRequests (incl. status), NodeMaintenances,
/// EvictionInterceptors and MaintenanceBudgets with `failurePolicy: Fail`, Pods with `Ignore` (and `matchConditions` when asked), and the Eviction
/// API bridge on `pods/eviction` with `Ignore`, `sideEffects: NoneOnDryRun` and a short timeout.
pub fn validating(
    name: &str,
    url_base: &str,
    ca: &[u8],
    match_conditions: bool,
) -> ValidatingWebhookConfiguration {
    let hook = |hook_name: &str, path: &str, rules: Vec<RuleWithOperations>, fail: bool| {
        ValidatingWebhook {
            name: hook_name.into(),
            client_config: client(url_base, path, ca),
            rules: Some(rules),
            failure_policy: Some(if fail { "Fail" } else { "Ignore" }.into()),
            match_policy: Some("Equivalent".into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(5),
            ..Default::default()
        }
    };
    let crud = ["CREATE", "UPDATE", "DELETE"];
    let mut pods = hook(
        "pods.validate.evictord.dev",
        PATH_VALIDATE_PODS,
        vec![rule("", &["pods"], &["CREATE", "UPDATE"])],
        false,
    );
    if match_conditions {
        pods.match_conditions = Some(vec![MatchCondition {
            name: "has-interceptor-annotation".into(),
            expression: pod_match_condition(),
        }]);
    }
    let mut evictions = hook(
        "pods-eviction.validate.evictord.dev",
        PATH_VALIDATE_POD_EVICTIONS,
        vec![rule("", &["pods/eviction"], &["CREATE"])],
        false,
    );
    evictions.side_effects = "NoneOnDryRun".into();
    evictions.timeout_seconds = Some(POD_EVICTION_TIMEOUT_SECONDS);
    ValidatingWebhookConfiguration {
        metadata: meta(name),
        webhooks: Some(vec![
            hook(
                "evictionrequests.validate.evictord.dev",
                PATH_VALIDATE_EVICTION_REQUESTS,
                vec![rule(
                    crate::api::GROUP,
                    &["evictionrequests", "evictionrequests/status"],
                    &crud,
                )],
                true,
            ),
            hook(
                "nodemaintenances.validate.evictord.dev",
                PATH_VALIDATE_NODE_MAINTENANCES,
                vec![rule(
                    crate::api::GROUP,
                    &["nodemaintenances", "nodemaintenances/status"],
                    &crud,
                )],
                true,
            ),
            hook(
                "evictioninterceptors.validate.evictord.dev",
                PATH_VALIDATE_EVICTION_INTERCEPTORS,
                vec![rule(
                    crate::api::GROUP,
                    &["evictioninterceptors", "evictioninterceptors/status"],
                    &["CREATE", "UPDATE"],
                )],
                true,
            ),
            hook(
                "maintenancebudgets.validate.evictord.dev",
                PATH_VALIDATE_MAINTENANCE_BUDGETS,
                vec![rule(
                    crate::api::GROUP,
                    &["maintenancebudgets"],
                    &["CREATE", "UPDATE"],
                )],
                true,
            ),
            pods,
            evictions,
        ]),
    }
}

/// The mutating configuration: NodeMaintenance CREATE and UPDATE (`failurePolicy: Fail`; on
/// UPDATE it only restores a re-applied partial drain plan, rule M2), and Pod CREATE
/// (`failurePolicy: Ignore`, and `matchConditions` when asked: the readiness gate of rule P9).
pub fn mutating(
    name: &str,
    url_base: &str,
    ca: &[u8],
    match_conditions: bool,
) -> MutatingWebhookConfiguration {
    let pods = MutatingWebhook {
        name: "pods.mutate.evictord.dev".into(),
        client_config: client(url_base, PATH_MUTATE_PODS, ca),
        rules: Some(vec![rule("", &["pods"], &["CREATE"])]),
        failure_policy: Some("Ignore".into()),
        match_policy: Some("Equivalent".into()),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(5),
        reinvocation_policy: Some("Never".into()),
        match_conditions: match_conditions.then(|| {
            vec![MatchCondition {
                name: "declares-endpoints-interceptor".into(),
                expression: serving_match_condition(),
            }]
        }),
        ..Default::default()
    };
    MutatingWebhookConfiguration {
        metadata: meta(name),
        webhooks: Some(vec![
            MutatingWebhook {
                name: "nodemaintenances.mutate.evictord.dev".into(),
                client_config: client(url_base, PATH_MUTATE_NODE_MAINTENANCES, ca),
                rules: Some(vec![rule(
                    crate::api::GROUP,
                    &["nodemaintenances"],
                    &["CREATE", "UPDATE"],
                )]),
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(5),
                reinvocation_policy: Some("Never".into()),
                ..Default::default()
            },
            pods,
        ]),
    }
}

/// Both configurations as a multi-document YAML stream.
///
/// # Errors
/// Only if serialisation fails.
pub fn yaml(
    name: &str,
    url_base: &str,
    ca: &[u8],
    match_conditions: bool,
) -> Result<String, serde_norway::Error> {
    let mut v = serde_norway::to_value(validating(name, url_base, ca, match_conditions))?;
    let mut m = serde_norway::to_value(mutating(name, url_base, ca, match_conditions))?;
    // k8s-openapi types do not serialise apiVersion/kind on their own.
    for (obj, kind) in [
        (&mut v, "ValidatingWebhookConfiguration"),
        (&mut m, "MutatingWebhookConfiguration"),
    ] {
        if let serde_norway::Value::Mapping(map) = obj {
            map.insert(
                "apiVersion".into(),
                "admissionregistration.k8s.io/v1".into(),
            );
            map.insert("kind".into(), kind.into());
        }
    }
    Ok(format!(
        "---\n{}---\n{}",
        serde_norway::to_string(&v)?,
        serde_norway::to_string(&m)?
    ))
}
