//! What a Kubernetes API request is, as kube-apiserver names it in its audit log and its own
//! metrics (`RequestInfo` in k8s.io/apiserver `endpoints/request/requestinfo.go`): the verb
//! (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`) and the
//! resource (the plural, with its subresource: `pods/eviction`, `nodemaintenances/status`).
//! Names and namespaces are read past and never kept: the result is a metric label.

use http::Method;

/// The verb and resource of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestKind {
    /// kube-apiserver's verb. For a request outside `/api` and `/apis/<group>` (discovery,
    /// `/version`), the method in lower case, as kube-apiserver's audit log has it.
    pub verb: &'static str,
    /// `pods`, `pods/eviction`; for a request outside the resource paths, the path's first
    /// segment with its slash (`/version`, `/apis`, `/api`), so that the label's values stay as
    /// few as the paths evictord builds.
    pub resource: String,
}

/// The verb and resource of a request with `method` to `path` (without the cluster URL's own
/// prefix) and `query`, by kube-apiserver's rules: a GET without a name is a `list`, or a
/// `watch` with `watch` set to anything but `0`, `f` or `false`; a DELETE without a name is a
/// `deletecollection`; `/watch/` after the version is the older spelling of a watch.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> RequestKind {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let non_resource = || RequestKind {
        verb: method_verb(method),
        resource: format!("/{}", parts[0]),
    };
    // `/api/{version}/...` and `/apis/{group}/{version}/...`, at least one part after them.
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => rest,
        ["apis", _group, _version, rest @ ..] if !rest.is_empty() => rest,
        _ => return non_resource(),
    };
    let (mut verb, rest) = match rest {
        ["watch", rest @ ..] if !rest.is_empty() => ("watch", rest),
        ["proxy", rest @ ..] if !rest.is_empty() => ("proxy", rest),
        _ => (resource_verb(method), rest),
    };
    // `namespaces/{ns}/{resource}/...`; but `namespaces/{ns}`, `namespaces/{ns}/status` and
    // `namespaces/{ns}/finalize` are the namespace itself.
    let rest = match rest {
        ["namespaces", _ns, next, rest @ ..] if !matches!(*next, "status" | "finalize") => {
            let mut parts = vec![*next];
            parts.extend_from_slice(rest);
            parts
        }
        _ => rest.to_vec(),
    };
    let resource = match (rest.as_slice(), verb) {
        ([resource, _name, sub, ..], v) if v != "proxy" => format!("{resource}/{sub}"),
        ([resource, ..], _) => (*resource).to_string(),
        ([], _) => String::new(),
    };
    let named = rest.len() >= 2;
    if !named && verb == "get" {
        verb = if watch_requested(query) {
            "watch"
        } else {
            "list"
        };
    }
    if !named && verb == "delete" {
        verb = "deletecollection";
    }
    RequestKind { verb, resource }
}

fn resource_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

fn method_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "other",
    }
}

/// The query's first `watch` parameter as kube-apiserver decodes a boolean: anything but `0`,
/// `f` and `false` (any case) is true, an empty value too.
fn watch_requested(query: Option<&str>) -> bool {
    let Some(query) = query else { return false };
    query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some(("watch", value)) => Some(value),
            None if pair == "watch" => Some(""),
            _ => None,
        })
        .is_some_and(|value| {
            !(value == "0"
                || value.eq_ignore_ascii_case("f")
                || value.eq_ignore_ascii_case("false"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `METHOD path[?query] verb resource`, one request a line.
    const ROWS: &str = "
        # core, namespaced
        GET    /api/v1/namespaces/ns/pods/p                          get    pods
        GET    /api/v1/namespaces/ns/pods                            list   pods
        GET    /api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=5 list  pods
        GET    /api/v1/pods?watch=true&resourceVersion=10            watch  pods
        GET    /api/v1/pods?resourceVersion=10&watch=1               watch  pods
        GET    /api/v1/pods?watch=false                              list   pods
        GET    /api/v1/pods?watch=0                                  list   pods
        GET    /api/v1/pods?watch                                    watch  pods
        GET    /api/v1/pods?allowWatchBookmarks=true                 list   pods
        # a field selector on the name is still a list or a watch
        GET    /api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp&watch=true watch pods
        POST   /api/v1/namespaces/ns/pods/p/eviction                 create pods/eviction
        PATCH  /api/v1/namespaces/ns/pods/p/status                   patch  pods/status
        PUT    /api/v1/namespaces/ns/pods/p                          update pods
        DELETE /api/v1/namespaces/ns/pods/p                          delete pods
        DELETE /api/v1/namespaces/ns/pods                            deletecollection pods
        POST   /api/v1/namespaces/ns/events                          create events
        HEAD   /api/v1/namespaces/ns/pods/p                          get    pods
        # cluster-scoped, and the namespaces themselves
        PATCH  /api/v1/nodes/n1                                      patch  nodes
        GET    /api/v1/nodes                                         list   nodes
        GET    /api/v1/namespaces?watch=true                         watch  namespaces
        GET    /api/v1/namespaces/ns                                 get    namespaces
        PUT    /api/v1/namespaces/ns/status                          update namespaces/status
        PUT    /api/v1/namespaces/ns/finalize                        update namespaces/finalize
        # groups, custom resources and their subresources
        GET    /apis/evictord.dev/v1alpha1/nodemaintenances/m1       get    nodemaintenances
        PATCH  /apis/evictord.dev/v1alpha1/nodemaintenances/m1/status patch nodemaintenances/status
        POST   /apis/evictord.dev/v1alpha1/namespaces/ns/evictionrequests create evictionrequests
        GET    /apis/evictord.dev/v1alpha1/evictionrequests?watch=1  watch  evictionrequests
        PATCH  /apis/apps/v1/namespaces/ns/deployments/d/scale       patch  deployments/scale
        PUT    /apis/coordination.k8s.io/v1/namespaces/ns/leases/l   update leases
        POST   /apis/authorization.k8s.io/v1/subjectaccessreviews    create subjectaccessreviews
        PATCH  /apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/e patch validatingwebhookconfigurations
        # the older spelling of a watch
        GET    /api/v1/watch/namespaces/ns/pods                      watch  pods
        GET    /apis/apps/v1/watch/deployments                       watch  deployments
        # discovery and the version: not resources
        GET    /version                                              get    /version
        GET    /version/                                             get    /version
        GET    /apis                                                 get    /apis
        GET    /api                                                  get    /api
        GET    /api/v1                                               get    /api
        GET    /apis/autoscaling                                     get    /apis
        GET    /apis/discovery.k8s.io/v1                             get    /apis
        GET    /openapi/v2                                           get    /openapi
        POST   /healthz                                              post   /healthz
    ";

    #[test]
    fn requests_are_named_as_kube_apiserver_names_them() {
        let rows = ROWS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        for row in rows {
            let [method, target, verb, resource] = row
                .split_whitespace()
                .collect::<Vec<_>>()
                .try_into()
                .unwrap_or_else(|r| panic!("row {r:?}"));
            let (path, query) = match target.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (target, None),
            };
            let method: Method = method.parse().unwrap();
            let kind = classify(&method, path, query);
            assert_eq!(
                (kind.verb, kind.resource.as_str()),
                (verb, resource),
                "{row}"
            );
        }
    }
}
