//! kube-controller-manager's requests by controller and mode (issue 44): each of its controllers
//! names itself in its user agent ([`crate::support::audit::controller_manager_controller`]), so
//! the part of all clients' bill that a drain's way of evicting puts on kube-controller-manager
//! (a surge's scale up and back down, the replacement a ReplicaSet starts while the surge still
//! holds, the PodDisruptionBudgets' status, the garbage collector's deletes of EvictionRequests)
//! reads per controller beside `kubectl drain`'s alone, from the same run.

use std::collections::BTreeMap;

use crate::pool_clients::{ClientFigures, most_frequent};
use crate::pool_report::ok_modes;
use crate::pool_results::{ModeResult, PoolResults};

/// How many of kube-controller-manager's most frequent kinds of request a mode's details name.
const MOST_FREQUENT: usize = 12;

/// `n` per evicted pod of the mode `f` measured.
fn per_evicted(f: &ClientFigures, n: usize) -> f64 {
    n as f64 / f.evicted_pods.max(1) as f64
}

/// The modes measured by client, with their figures.
fn measured(p: &PoolResults) -> Vec<(&ModeResult, &ClientFigures)> {
    ok_modes(p)
        .into_iter()
        .filter_map(|m| m.clients.as_ref().map(|f| (m, f)))
        .collect()
}

/// The controllers of `modes`, the one with the largest figure per evicted pod in any mode first.
fn controllers<'a>(modes: &[(&ModeResult, &'a ClientFigures)]) -> Vec<&'a str> {
    let mut largest: BTreeMap<&str, f64> = BTreeMap::new();
    for (_, f) in modes {
        for (c, n) in &f.window.controller_manager_by_controller {
            let x = per_evicted(f, *n);
            let e = largest.entry(c.as_str()).or_default();
            *e = e.max(x);
        }
    }
    let mut names: Vec<(&str, f64)> = largest.into_iter().collect();
    names.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    names.into_iter().map(|(c, _)| c).collect()
}

/// The report's table: kube-controller-manager's requests per evicted pod, by controller (rows)
/// and mode (columns); empty when no mode was measured by client.
pub fn table(p: &PoolResults) -> String {
    let modes = measured(p);
    if modes.is_empty() {
        return String::new();
    }
    let mut o = String::from(
        "kube-controller-manager's requests by controller (the last segment of its user agent), **per evicted pod**, in each mode's window:\n\n| controller |",
    );
    for (m, _) in &modes {
        o += &format!(" `{}` |", m.id);
    }
    o += "\n|---|";
    o += &"---|".repeat(modes.len());
    o += "\n";
    for c in controllers(&modes) {
        o += &format!("| {c} |");
        for (_, f) in &modes {
            let n = f
                .window
                .controller_manager_by_controller
                .get(c)
                .copied()
                .unwrap_or(0);
            o += &format!(" {:.1} |", per_evicted(f, n));
        }
        o += "\n";
    }
    o += "| **all of kube-controller-manager** |";
    for (_, f) in &modes {
        o += &format!(
            " **{:.1}** |",
            per_evicted(f, f.window.of("kube-controller-manager"))
        );
    }
    o + "\n\n"
}

/// One mode's line in its section: kube-controller-manager's most frequent kinds of request.
pub fn details(m: &ModeResult) -> String {
    let Some(f) = &m.clients else {
        return String::new();
    };
    let by_request = &f.window.controller_manager_by_request;
    if by_request.is_empty() {
        return String::new();
    }
    format!(
        "- kube-controller-manager's most frequent requests (controller verb resource answer: count): {}.\n",
        most_frequent(by_request, MOST_FREQUENT)
    )
}
