//! The pool part's modes (issue 35): which pool, what drains it, with or without evictord
//! ([`Mode`], as written in `EVICTORD_BENCH_POOL_MODES`), and the modes `make bench` runs
//! ([`DEFAULT_MODES`]).

use std::str::FromStr;

use serde::Serialize;

use crate::support::pool::workloads::Variant;

/// The modes `make bench` runs: the finishable pool first (kubectl drain alone finishes there:
/// the times to compare), then the full one.
pub const DEFAULT_MODES: &[&str] = &[
    "finishable/kubectl-each",
    "finishable/kubectl-all",
    "finishable/evictord+kubectl-each",
    "finishable/evictord+kubectl-all",
    "finishable/evictord+nodemaintenance",
    "full/kubectl-each",
    "full/kubectl-all",
    "full/evictord+kubectl-each",
    "full/evictord+kubectl-all",
    "full/evictord+nodemaintenance",
];

/// What drains the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Drainer {
    KubectlEach,
    KubectlAll,
    NodeMaintenance,
}

/// One mode of the part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mode {
    pub variant: Variant,
    pub drainer: Drainer,
    pub evictord: bool,
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (pool, drainer) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: want POOL/DRAINER"))?;
        let variant = match pool {
            "full" => Variant::Full,
            "finishable" => Variant::Finishable,
            other => return Err(format!("{other:?}: the pool is full or finishable")),
        };
        let (evictord, drainer) = match drainer.strip_prefix("evictord+") {
            Some(d) => (true, d),
            None => (false, drainer),
        };
        let drainer = match drainer {
            "kubectl-each" => Drainer::KubectlEach,
            "kubectl-all" => Drainer::KubectlAll,
            "nodemaintenance" if evictord => Drainer::NodeMaintenance,
            other => {
                return Err(format!(
                    "{other:?}: not a drainer (a NodeMaintenance needs evictord+)"
                ));
            }
        };
        Ok(Mode {
            variant,
            drainer,
            evictord,
        })
    }
}

impl Mode {
    /// As written in `EVICTORD_BENCH_POOL_MODES`.
    pub fn id(&self) -> String {
        let drainer = match self.drainer {
            Drainer::KubectlEach => "kubectl-each",
            Drainer::KubectlAll => "kubectl-all",
            Drainer::NodeMaintenance => "nodemaintenance",
        };
        format!(
            "{}/{}{drainer}",
            self.variant.label(),
            if self.evictord { "evictord+" } else { "" }
        )
    }

    /// For file names.
    pub fn slug(&self) -> String {
        self.id().replace(['/', '+'], "-")
    }
}
