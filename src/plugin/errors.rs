//! The plugin's errors, and how an API failure reads to a person: a missing object by name, the
//! missing CRDs as "install the chart first", a refusal with the permission it lacks.

/// Exit code when a timeout stopped the command (the maintenance or request goes on).
pub const EXIT_TIMEOUT: i32 = 3;
/// Exit code after Ctrl-C (nothing was undone).
pub const EXIT_INTERRUPTED: i32 = 130;

/// What the plugin was doing when the API answered: the permission it needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The verb, e.g. `create`.
    pub verb: &'static str,
    /// `resource.group` (core resources without group), e.g. `nodemaintenances.evictord.dev`.
    pub resource: &'static str,
    /// The namespace, for namespaced resources.
    pub namespace: Option<String>,
    /// The object's name, when one object was meant.
    pub name: Option<String>,
}

impl Access {
    /// `verb` on `resource`, cluster-wide or in all namespaces.
    pub fn new(verb: &'static str, resource: &'static str) -> Self {
        Access {
            verb,
            resource,
            namespace: None,
            name: None,
        }
    }

    /// In one namespace.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// On one object.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    fn scope(&self) -> String {
        match &self.namespace {
            Some(ns) => format!(" in namespace {ns}"),
            None => String::new(),
        }
    }

    fn is_ours(&self) -> bool {
        self.resource.ends_with(".evictord.dev")
    }
}

/// Errors of the plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A node named on the command line does not exist.
    #[error("no such node: {0}")]
    NoSuchNode(String),
    /// The label selector matches no node.
    #[error("no node matches the selector {0:?}")]
    NoNodeMatches(String),
    /// The evictord.dev API group is not served.
    #[error(
        "the evictord.dev/v1alpha1 API is not served here: evictord's CRDs are not installed; install the chart first (helm install evictord charts/evictord)"
    )]
    CrdsMissing,
    /// The API refused: names the permission.
    #[error("forbidden: you need permission to {verb} {resource}{scope} ({message})")]
    Forbidden {
        /// Verb.
        verb: &'static str,
        /// `resource.group`.
        resource: &'static str,
        /// ` in namespace X` or empty.
        scope: String,
        /// The server's message.
        message: String,
    },
    /// The object does not exist.
    #[error("{resource} {name:?} not found{scope}")]
    NotFound {
        /// `resource.group`.
        resource: &'static str,
        /// Name.
        name: String,
        /// ` in namespace X` or empty.
        scope: String,
    },
    /// Any other API failure.
    #[error("{verb} {resource}{scope}: {source}")]
    Api {
        /// Verb.
        verb: &'static str,
        /// `resource.group`.
        resource: &'static str,
        /// ` in namespace X` or empty.
        scope: String,
        /// The failure.
        source: kube::Error,
    },
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The command line makes no sense.
    #[error("{0}")]
    Usage(String),
    /// A MaintenanceBudget would never admit the maintenance `drain` would create.
    #[error(
        "refused: MaintenanceBudget {budget} allows {allowed} unavailable node{} and this drain selects {selects} of its nodes, so its maintenance would never be admitted (TooLarge); nothing was created. Roll them {allowed} at a time instead, e.g.: kubectl evictord rollout NAME {nodes} --max-unavailable {allowed} (see kubectl evictord rollout --help)",
        if *allowed == 1 { "" } else { "s" }
    )]
    TooLarge {
        /// The budget.
        budget: String,
        /// How many unavailable nodes it allows.
        allowed: usize,
        /// How many of its nodes the drain selects.
        selects: usize,
        /// The drain's nodes, as command-line words.
        nodes: String,
    },
    /// Pods `kubectl drain` would refuse without `--force` or `--delete-emptydir-data`.
    #[error("{0}")]
    Unsafe(super::safety::Unsafe),
    /// The rollout cannot be resumed by this command.
    #[error("{0}")]
    Rollout(String),
    /// The step record of a maintenance does not parse.
    #[error("{0}")]
    StepRecord(String),
    /// evictord did not take the rollout's budget into account in time.
    #[error(
        "evictord has not reported on MaintenanceBudget {budget} within {seconds} s, so it may not count it yet; no maintenance was created. Is evictord running, at a version that serves MaintenanceBudgets? Run the same command again to go on, or delete the budget: kubectl delete maintenancebudget {budget}"
    )]
    BudgetNotObserved {
        /// The budget.
        budget: String,
        /// How long the plugin waited.
        seconds: u64,
    },
    /// The per-node step could not be started.
    #[error("cannot start the step on node {node}: {reason}")]
    StepSpawn {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
}

/// The crate-style result of the plugin.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How `err` reads, given what was being done.
pub fn api_error(access: Access, err: kube::Error) -> Error {
    let scope = access.scope();
    match &err {
        kube::Error::Api(s) if s.code == 403 => Error::Forbidden {
            verb: access.verb,
            resource: access.resource,
            scope,
            message: s.message.clone(),
        },
        // A 404 without the object's name in it is the resource itself missing.
        kube::Error::Api(s)
            if s.code == 404 && access.is_ours() && !named_in(&access, &s.message) =>
        {
            Error::CrdsMissing
        }
        kube::Error::Api(s) if s.code == 404 && access.resource == "nodes" => {
            Error::NoSuchNode(access.name.clone().unwrap_or_default())
        }
        kube::Error::Api(s) if s.code == 404 && access.name.is_some() => Error::NotFound {
            resource: access.resource,
            name: access.name.clone().unwrap_or_default(),
            scope,
        },
        _ => Error::Api {
            verb: access.verb,
            resource: access.resource,
            scope,
            source: err,
        },
    }
}

fn named_in(access: &Access, message: &str) -> bool {
    access
        .name
        .as_ref()
        .is_some_and(|n| message.contains(&format!("\"{n}\"")))
}

impl Error {
    /// The process exit code: 1 for failures of the command, 2 for usage and set-up problems a
    /// person must fix first.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::CrdsMissing
            | Error::Kubeconfig(_)
            | Error::Usage(_)
            | Error::Rollout(_)
            | Error::BudgetNotObserved { .. } => 2,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(message, "x").with_code(code),
        ))
    }

    #[rstest]
    #[case::forbidden(
        Access::new("create", "nodemaintenances.evictord.dev"),
        status(
            403,
            "nodemaintenances.evictord.dev is forbidden: User \"u\" cannot create resource"
        ),
        "forbidden: you need permission to create nodemaintenances.evictord.dev (nodemaintenances.evictord.dev is forbidden: User \"u\" cannot create resource)"
    )]
    #[case::forbidden_namespaced(
        Access::new("list", "poddisruptionbudgets.policy").in_namespace("web"),
        status(403, "no"),
        "forbidden: you need permission to list poddisruptionbudgets.policy in namespace web (no)"
    )]
    #[case::crds_missing(
        Access::new("list", "nodemaintenances.evictord.dev"),
        status(404, "the server could not find the requested resource"),
        "the evictord.dev/v1alpha1 API is not served here: evictord's CRDs are not installed; install the chart first (helm install evictord charts/evictord)"
    )]
    #[case::object_missing(
        Access::new("get", "nodemaintenances.evictord.dev").named("nm1"),
        status(404, "nodemaintenances.evictord.dev \"nm1\" not found"),
        "nodemaintenances.evictord.dev \"nm1\" not found"
    )]
    #[case::no_such_node(
        Access::new("get", "nodes").named("n9"),
        status(404, "nodes \"n9\" not found"),
        "no such node: n9"
    )]
    #[case::pod_missing(
        Access::new("get", "pods").in_namespace("web").named("p"),
        status(404, "pods \"p\" not found"),
        "pods \"p\" not found in namespace web"
    )]
    fn api_errors_read_well(#[case] access: Access, #[case] err: kube::Error, #[case] text: &str) {
        assert_eq!(api_error(access, err).to_string(), text);
    }
}
