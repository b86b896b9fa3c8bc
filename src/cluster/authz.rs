//! Access checks through SubjectAccessReview, with the requesting user's name, groups, uid and
//! extra, and a short-lived cache of verdicts (a burst of writes by one user costs one review):
//! "allowed" is reused for 30 s, "denied" for 5 s. Equal checks that miss the cache at the same
//! moment wait for one review: a controller's writes of twenty maintenances arrive together, and
//! once the verdict has expired each of them used to ask again (twelve reviews a burst, about
//! every 30 s of a pool rollout).
//!
//! A check about one object is first asked about every object of the resource in the
//! namespace ([`namespace_wide`]): a SubjectAccessReview without a name asks about all names,
//! so "allowed" there means allowed for each one, and a drain that creates requests for
//! thousands of pods of a namespace costs one review per namespace and TTL instead of one per
//! pod. Only when the namespace-wide answer is no (permission limited by `resourceNames`, or
//! none at all) is the object itself asked about, and that answer is the verdict.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::{AccessCheck, Authorization};

/// How long an "allowed" verdict is reused. kube-apiserver's own webhook authorizer keeps one
/// for 5 minutes (`--authorization-webhook-cache-authorized-ttl`); 30 s keeps a revoked
/// permission effective here within half a minute, while a drain's steady stream of writes by
/// one user (the garbage collector deleting requests, a controller creating them) costs one
/// review per namespace every 30 s instead of every 5 s.
const ALLOWED_TTL: Duration = Duration::from_secs(30);
/// How long a "denied" verdict is reused: short, so that a permission just granted takes
/// effect within seconds (kube-apiserver's webhook authorizer: 30 s).
const DENIED_TTL: Duration = Duration::from_secs(5);

/// How long `verdict` is reused.
fn ttl(verdict: &Authorization) -> Duration {
    match verdict {
        Authorization::Allowed => ALLOWED_TTL,
        Authorization::Denied(_) | Authorization::Skipped(_) => DENIED_TTL,
    }
}
/// Entries beyond which the cache is cleared (bounded memory under many users).
const MAX_ENTRIES: usize = 10_000;
/// Locks a check that missed the cache takes (by its hash) before it asks: equal checks wait for
/// one review; different checks rarely share a lock, and then only wait for one review.
const MISS_LOCKS: usize = 16;

/// Asks kube-apiserver whether a user may do something.
pub struct Authorizer {
    client: Client,
    cache: Mutex<Verdicts>,
    misses: [tokio::sync::Mutex<()>; MISS_LOCKS],
}

/// Which object a check asks about: the one it names, or every object of its resource in its
/// namespace ([`namespace_wide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Named,
    Wide,
}

/// Fresh verdicts by check. A lookup neither allocates nor formats: checks are hashed field by
/// field into buckets and compared in full, so two checks share a verdict only when equal.
#[derive(Default)]
struct Verdicts {
    hasher: RandomState,
    buckets: HashMap<u64, Vec<(AccessCheck<'static>, Authorization, Instant)>>,
    len: usize,
}

impl Verdicts {
    fn hash(&self, check: &AccessCheck<'_>, scope: Scope) -> u64 {
        let mut h = self.hasher.build_hasher();
        let u = &check.user;
        (&u.username, &u.uid, &u.groups).hash(&mut h);
        if let Some(extra) = &u.extra {
            for (k, v) in extra {
                (k, v).hash(&mut h);
            }
        }
        let namespace = check.namespace.as_deref();
        (check.verb, check.group, check.resource, namespace).hash(&mut h);
        match scope {
            Scope::Named => check.name.as_deref().hash(&mut h),
            Scope::Wide => None::<&str>.hash(&mut h),
        }
        h.finish()
    }

    fn get(
        &self,
        check: &AccessCheck<'_>,
        scope: Scope,
    ) -> Option<&(AccessCheck<'static>, Authorization, Instant)> {
        self.buckets
            .get(&self.hash(check, scope))?
            .iter()
            .find(|(stored, _, _)| same(stored, check, scope))
    }

    fn insert(&mut self, check: &AccessCheck<'_>, scope: Scope, verdict: Authorization) {
        if self.len >= MAX_ENTRIES {
            self.buckets.clear();
            self.len = 0;
        }
        let key = self.hash(check, scope);
        let bucket = self.buckets.entry(key).or_default();
        let before = bucket.len();
        bucket.retain(|(stored, _, _)| !same(stored, check, scope));
        self.len -= before - bucket.len();
        let stored = match scope {
            Scope::Named => check.clone(),
            Scope::Wide => AccessCheck {
                name: None,
                ..check.clone()
            },
        }
        .into_owned();
        bucket.push((stored, verdict, Instant::now()));
        self.len += 1;
    }
}

/// Whether `stored` is `check` asked about `scope`.
fn same(stored: &AccessCheck<'_>, check: &AccessCheck<'_>, scope: Scope) -> bool {
    let name_matches = match scope {
        Scope::Named => stored.name == check.name,
        Scope::Wide => stored.name.is_none(),
    };
    name_matches
        && stored.verb == check.verb
        && stored.group == check.group
        && stored.resource == check.resource
        && stored.namespace == check.namespace
        && stored.user == check.user
}

impl Authorizer {
    /// An authorizer using `client` (which needs `create` on subjectaccessreviews).
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::new(Verdicts::default()),
            misses: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
        }
    }

    /// The verdict for `check`, from the cache when fresh.
    ///
    /// # Errors
    /// When the SubjectAccessReview cannot be created.
    pub async fn check(&self, check: &AccessCheck<'_>) -> Result<Authorization, kube::Error> {
        if check.name.is_some()
            && self.cached_or_reviewed(check, Scope::Wide).await? == Authorization::Allowed
        {
            return Ok(Authorization::Allowed);
        }
        self.cached_or_reviewed(check, Scope::Named).await
    }

    async fn cached_or_reviewed(
        &self,
        check: &AccessCheck<'_>,
        scope: Scope,
    ) -> Result<Authorization, kube::Error> {
        if let Some(verdict) = self.fresh(check, scope) {
            return Ok(verdict);
        }
        let lock = self
            .cache
            .lock()
            .map_or(0, |c| c.hash(check, scope) as usize % MISS_LOCKS);
        let _turn = self.misses[lock].lock().await;
        // An equal check that missed at the same moment may have asked meanwhile.
        if let Some(verdict) = self.fresh(check, scope) {
            return Ok(verdict);
        }
        let verdict = match scope {
            Scope::Named => self.review(check).await?,
            Scope::Wide => {
                self.review(&namespace_wide(check).unwrap_or_else(|| check.clone()))
                    .await?
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(check, scope, verdict.clone());
        }
        Ok(verdict)
    }

    /// The cached verdict of `check` about `scope`, if still fresh.
    fn fresh(&self, check: &AccessCheck<'_>, scope: Scope) -> Option<Authorization> {
        self.cache.lock().ok().and_then(|c| {
            c.get(check, scope)
                .filter(|(_, verdict, at)| at.elapsed() < ttl(verdict))
                .map(|(_, verdict, _)| verdict.clone())
        })
    }

    async fn review(&self, check: &AccessCheck<'_>) -> Result<Authorization, kube::Error> {
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
                    namespace: check.namespace.as_deref().map(String::from),
                    name: check.name.as_deref().map(String::from),
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
pub fn namespace_wide<'a>(check: &AccessCheck<'a>) -> Option<AccessCheck<'a>> {
    check.name.as_ref()?;
    Some(AccessCheck {
        name: None,
        ..check.clone()
    })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use k8s_openapi::api::authentication::v1::UserInfo;
    use rstest::rstest;

    use super::*;

    fn check(namespace: Option<&str>, name: Option<&str>) -> AccessCheck<'static> {
        AccessCheck {
            user: Default::default(),
            verb: "delete",
            group: "",
            resource: "pods",
            namespace: namespace.map(|n| n.to_string().into()),
            name: name.map(|n| n.to_string().into()),
        }
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..Default::default()
        }
    }

    fn by(user: UserInfo, check: AccessCheck<'static>) -> AccessCheck<'static> {
        AccessCheck {
            user: Cow::Owned(user),
            ..check
        }
    }

    /// A verdict is reused only for an equal check: every field of the user and of the
    /// resource counts, and a namespace-wide verdict answers only the namespace-wide question.
    #[rstest]
    #[case::the_same_check(check(Some("shop"), Some("web-1")), Scope::Named, true)]
    #[case::another_pod(check(Some("shop"), Some("web-2")), Scope::Named, false)]
    #[case::another_namespace(check(Some("bar"), Some("web-1")), Scope::Named, false)]
    #[case::another_user(by(user("bob", &["dev"]), check(Some("shop"), Some("web-1"))), Scope::Named, false)]
    #[case::another_group(by(user("alice", &["ops"]), check(Some("shop"), Some("web-1"))), Scope::Named, false)]
    #[case::another_verb(AccessCheck { verb: "get", ..check(Some("shop"), Some("web-1")) }, Scope::Named, false)]
    #[case::the_wide_question_is_another_one(
        check(Some("shop"), Some("web-1")),
        Scope::Wide,
        false
    )]
    fn verdicts_are_reused_only_for_equal_checks(
        #[case] asked: AccessCheck<'static>,
        #[case] scope: Scope,
        #[case] reused: bool,
    ) {
        let alice = |c| by(user("alice", &["dev"]), c);
        let mut v = Verdicts::default();
        v.insert(
            &alice(check(Some("shop"), Some("web-1"))),
            Scope::Named,
            Authorization::Allowed,
        );
        let asked = if *asked.user == UserInfo::default() {
            alice(asked)
        } else {
            asked
        };
        assert_eq!(v.get(&asked, scope).is_some(), reused);
    }

    #[test]
    fn a_wide_verdict_answers_the_wide_question_of_every_pod_of_the_namespace() {
        let mut v = Verdicts::default();
        v.insert(
            &check(Some("shop"), Some("web-1")),
            Scope::Wide,
            Authorization::Allowed,
        );
        let stored = v
            .get(&check(Some("shop"), Some("web-2")), Scope::Wide)
            .unwrap();
        assert_eq!(stored.0, check(Some("shop"), None));
        assert!(v.get(&check(Some("shop"), None), Scope::Named).is_some());
        assert!(
            v.get(&check(Some("bar"), Some("web-2")), Scope::Wide)
                .is_none()
        );
    }

    /// A review's check borrows from its request; the cache keeps its own copy, so a later
    /// request (another body, equal fields) finds the verdict.
    #[test]
    fn a_verdict_stored_from_a_borrowed_check_outlives_the_request() {
        let mut v = Verdicts::default();
        {
            let first = user("alice", &["dev"]);
            let borrowed = AccessCheck {
                user: Cow::Borrowed(&first),
                namespace: Some(Cow::Borrowed("shop")),
                ..check(None, Some("web-1"))
            };
            v.insert(&borrowed, Scope::Named, Authorization::Allowed);
        }
        let second = user("alice", &["dev"]);
        let asked = AccessCheck {
            user: Cow::Borrowed(&second),
            ..check(Some("shop"), Some("web-1"))
        };
        assert_eq!(
            v.get(&asked, Scope::Named).map(|e| &e.1),
            Some(&Authorization::Allowed)
        );
        assert!(matches!(
            v.get(&asked, Scope::Named).map(|e| &e.0.user),
            Some(Cow::Owned(_))
        ));
    }

    #[test]
    fn a_new_verdict_replaces_the_old_and_the_cache_stays_bounded() {
        let mut v = Verdicts::default();
        let c = check(Some("shop"), Some("web-1"));
        v.insert(&c, Scope::Named, Authorization::Allowed);
        v.insert(&c, Scope::Named, Authorization::Denied("no".into()));
        assert_eq!(v.len, 1);
        assert_eq!(
            v.get(&c, Scope::Named).unwrap().1,
            Authorization::Denied("no".into())
        );
        for i in 0..MAX_ENTRIES + 5 {
            v.insert(
                &check(Some("shop"), Some(&format!("p{i}"))),
                Scope::Named,
                Authorization::Allowed,
            );
        }
        assert!(v.len <= MAX_ENTRIES);
        assert_eq!(v.len, v.buckets.values().map(Vec::len).sum::<usize>());
    }

    #[rstest]
    #[case::one_pod_asks_its_namespace_first(
        check(Some("shop"), Some("web-1")),
        Some(check(Some("shop"), None))
    )]
    #[case::one_node_asks_all_nodes_first(check(None, Some("node-1")), Some(check(None, None)))]
    #[case::already_namespace_wide(check(Some("shop"), None), None)]
    fn namespace_wide_rows(
        #[case] given: AccessCheck<'static>,
        #[case] expected: Option<AccessCheck<'static>>,
    ) {
        assert_eq!(namespace_wide(&given), expected);
    }

    #[rstest]
    #[case::allowed_for_half_a_minute(Authorization::Allowed, ALLOWED_TTL)]
    #[case::denied_for_seconds(Authorization::Denied("no".into()), DENIED_TTL)]
    #[case::skipped_for_seconds(Authorization::Skipped("offline".into()), DENIED_TTL)]
    fn a_verdict_is_reused_for_its_own_time(
        #[case] verdict: Authorization,
        #[case] for_: Duration,
    ) {
        assert_eq!(ttl(&verdict), for_);
    }

    /// A kube-apiserver answering every SubjectAccessReview "allowed" after 50 ms, counting them.
    fn counting_client() -> (Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let reviews = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = reviews.clone();
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                let body = serde_json::json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {},
                    "status": {"allowed": true},
                });
                let body = http_body_util::Full::new(bytes::Bytes::from(body.to_string()));
                Ok::<_, std::convert::Infallible>(http::Response::new(body))
            }
        });
        (Client::new(service, "default"), reviews)
    }

    /// Checks that miss the cache together: equal ones wait for one review, different ones are
    /// each asked.
    #[rstest]
    #[case::twelve_equal_checks_at_once_one_review(12, 1)]
    #[case::two_different_checks_two_reviews(2, 2)]
    #[tokio::test]
    async fn equal_checks_missing_together_cost_one_review(
        #[case] checks: usize,
        #[case] reviews: usize,
    ) {
        let (client, counted) = counting_client();
        let authorizer = Authorizer::new(client);
        let asked: Vec<AccessCheck<'static>> = (0..checks)
            .map(|i| match reviews {
                1 => check(Some("shop"), None),
                _ => check(Some(if i == 0 { "shop" } else { "bar" }), None),
            })
            .collect();
        let verdicts = futures::future::join_all(asked.iter().map(|c| authorizer.check(c))).await;
        assert!(
            verdicts
                .into_iter()
                .all(|v| v.is_ok_and(|v| v == Authorization::Allowed))
        );
        assert_eq!(counted.load(std::sync::atomic::Ordering::SeqCst), reviews);
    }
}
