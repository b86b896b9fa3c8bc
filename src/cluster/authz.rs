//! Access checks through SubjectAccessReview, with the requesting user's name, groups, uid and
//! extra, and a short-lived cache of verdicts (a burst of writes by one user costs one review).
//!
//! A check about one object is first asked about every object of the resource in the
//! namespace ([`namespace_wide`]): a SubjectAccessReview without a name asks about all names,
//! so "allowed" there means allowed for each one, and a drain that creates requests for
//! thousands of pods of a namespace costs one review per namespace and TTL instead of one per
//! pod. Only when the namespace-wide answer is no (permission limited by `resourceNames`, or
//! none at all) is the object itself asked about, and that answer is the verdict.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::{AccessCheck, Authorization};

/// How long a verdict is reused.
const TTL: Duration = Duration::from_secs(5);
/// Entries beyond which the cache is cleared (bounded memory under many users).
const MAX_ENTRIES: usize = 10_000;

/// Asks kube-apiserver whether a user may do something.
pub struct Authorizer {
    client: Client,
    cache: Mutex<HashMap<String, (Authorization, Instant)>>,
}

impl Authorizer {
    /// An authorizer using `client` (which needs `create` on subjectaccessreviews).
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for `check`, from the cache when fresh.
    ///
    /// # Errors
    /// When the SubjectAccessReview cannot be created.
    pub async fn check(&self, check: &AccessCheck) -> Result<Authorization, kube::Error> {
        if let Some(wide) = namespace_wide(check)
            && self.cached_or_reviewed(&wide).await? == Authorization::Allowed
        {
            return Ok(Authorization::Allowed);
        }
        self.cached_or_reviewed(check).await
    }

    async fn cached_or_reviewed(&self, check: &AccessCheck) -> Result<Authorization, kube::Error> {
        let key = format!("{check:?}");
        if let Some((verdict, at)) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned())
            && at.elapsed() < TTL
        {
            return Ok(verdict);
        }
        let verdict = self.review(check).await?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= MAX_ENTRIES {
                cache.clear();
            }
            cache.insert(key, (verdict.clone(), Instant::now()));
        }
        Ok(verdict)
    }

    async fn review(&self, check: &AccessCheck) -> Result<Authorization, kube::Error> {
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: check.user.username.clone(),
                groups: check.user.groups.clone(),
                uid: check.user.uid.clone(),
                extra: check.user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(check.verb.to_string()),
                    group: Some(check.group.to_string()),
                    resource: Some(check.resource.to_string()),
                    namespace: check.namespace.clone(),
                    name: check.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &sar).await?;
        let status = answer.status.unwrap_or_default();
        Ok(if status.allowed && status.denied != Some(true) {
            Authorization::Allowed
        } else {
            let reason = status
                .reason
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "no RBAC rule allows it".into());
            Authorization::Denied(reason)
        })
    }
}

/// The same check about every object of the resource (in the same namespace), when `check` is
/// about one object: allowed there implies allowed for that object.
pub fn namespace_wide(check: &AccessCheck) -> Option<AccessCheck> {
    check.name.as_ref()?;
    Some(AccessCheck {
        name: None,
        ..check.clone()
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn check(namespace: Option<&str>, name: Option<&str>) -> AccessCheck {
        AccessCheck {
            user: Default::default(),
            verb: "delete",
            group: "",
            resource: "pods",
            namespace: namespace.map(String::from),
            name: name.map(String::from),
        }
    }

    #[rstest]
    #[case::one_pod_asks_its_namespace_first(
        check(Some("shop"), Some("web-1")),
        Some(check(Some("shop"), None))
    )]
    #[case::one_node_asks_all_nodes_first(check(None, Some("node-1")), Some(check(None, None)))]
    #[case::already_namespace_wide(check(Some("shop"), None), None)]
    fn namespace_wide_rows(#[case] given: AccessCheck, #[case] expected: Option<AccessCheck>) {
        assert_eq!(namespace_wide(&given), expected);
    }
}
