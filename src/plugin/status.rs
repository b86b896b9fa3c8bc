//! The `status` tables: maintenances, and the EvictionRequests still open.

use comfy_table::{Table, presets::NOTHING};
use jiff::Timestamp;

use crate::api::{CONDITION_DRAINED, EvictionRequest, NodeMaintenance};

use super::blockers::{human, since};

/// Header of the maintenances table.
pub const MAINTENANCE_HEADER: [&str; 7] = [
    "NAME",
    "STAGE",
    "NODES",
    "EVACUATING",
    "PENDING",
    "DRAINED",
    "REASON",
];

/// Header of the requests table.
pub const REQUEST_HEADER: [&str; 6] = [
    "NAMESPACE",
    "POD",
    "REQUESTERS",
    "ACTIVE INTERCEPTOR",
    "FAILED EVICTIONS",
    "AGE",
];

/// One row per maintenance, by name.
pub fn maintenance_rows(maintenances: &[NodeMaintenance]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = maintenances
        .iter()
        .map(|m| {
            let s = m.status.clone().unwrap_or_default();
            let nodes: Vec<&str> = s
                .node_statuses
                .iter()
                .map(|n| n.node_ref.name.as_str())
                .collect();
            let sum = |f: fn(&crate::api::NodeMaintenanceNodeStatus) -> i32| {
                s.node_statuses.iter().map(f).sum::<i32>().to_string()
            };
            vec![
                m.metadata.name.clone().unwrap_or_default(),
                m.spec.stage().to_string(),
                if nodes.is_empty() {
                    "-".into()
                } else {
                    nodes.join(",")
                },
                sum(|n| n.pods_evacuating),
                sum(|n| n.pods_pending_evacuation),
                if s.is_true(CONDITION_DRAINED) {
                    "True"
                } else {
                    "False"
                }
                .into(),
                m.spec.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    rows.sort();
    rows
}

/// One row per request that is neither Evicted nor Canceled, by namespace and pod.
pub fn open_request_rows(requests: &[EvictionRequest], now: Timestamp) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = requests
        .iter()
        .filter(|r| !r.is_terminal())
        .map(|r| {
            let s = r.status.clone().unwrap_or_default();
            let age = r
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|c| human(since(c.0, now)))
                .unwrap_or_default();
            vec![
                r.metadata.namespace.clone().unwrap_or_default(),
                r.spec.target.pod.name.clone(),
                r.spec
                    .requesters
                    .iter()
                    .map(|q| q.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                s.active_interceptors
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                s.failed_evictions().to_string(),
                age,
            ]
        })
        .collect();
    rows.sort();
    rows
}

/// A table in kubectl's style: no borders, columns padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING).set_header(header.to_vec());
    for r in rows {
        t.add_row(r.clone());
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{IMPERATIVE_INTERCEPTOR, Stage};
    use crate::plugin::fixtures::{request, t};
    use crate::plugin::maintenance::maintenance_for;

    #[test]
    fn maintenances_are_listed_by_name() {
        let a = maintenance_for("b-nm", &["n1".into()], &[], Some("kernel"), Stage::Drain);
        let b = maintenance_for("a-nm", &["n2".into()], &[], None, Stage::Cordon);
        let rows = maintenance_rows(&[a, b]);
        assert_eq!(rows[0][..2], ["a-nm".to_string(), "Cordon".to_string()]);
        assert_eq!(rows[1][6], "kernel");
    }

    #[test]
    fn only_open_requests_are_listed() {
        let open = request("p", &["x.example.com"])
            .active(&[IMPERATIVE_INTERCEPTOR], IMPERATIVE_INTERCEPTOR)
            .failures(3, t(-1))
            .build();
        let done = request("q", &[]).condition("Canceled", "").build();
        let rows = open_request_rows(&[open, done], t(0));
        assert_eq!(
            rows,
            vec![vec![
                "ns".to_string(),
                "p".into(),
                "x.example.com".into(),
                IMPERATIVE_INTERCEPTOR.into(),
                "3".into(),
                "10 m".into()
            ]]
        );
        let text = table(&REQUEST_HEADER, &rows);
        assert!(text.lines().next().unwrap().contains("NAMESPACE"));
        assert!(text.contains("x.example.com"));
    }
}
