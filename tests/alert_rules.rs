//! The chart's alerts evaluated by a real Prometheus rule engine: the PrometheusRule rendered by
//! real `helm template` (its rule groups written to a rules file) under `promtool test rules`
//! with the input series and expected alerts of `tests/data/alert_rules/*.yaml`. `promtool`
//! comes from `$PROMTOOL_DIR` or `tests/tools/promtool.sh`.

mod support;

use std::path::Path;
use std::process::Command;

use support::tools::{promtool, run};

/// `{"groups": ...}` of the chart's PrometheusRule, rendered for namespace `evictord` with the
/// default thresholds, as a Prometheus rules file (JSON is YAML).
fn rules_file() -> String {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/evictord");
    let chart = chart.display().to_string();
    let args = [
        "template",
        "evictord",
        &chart,
        "--namespace",
        "evictord",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--show-only",
        "templates/prometheusrule.yaml",
    ];
    let out = run("helm", &args, None, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rule: serde_norway::Value = serde_norway::from_str(&stdout).expect("PrometheusRule YAML");
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"), "{stdout}");
    let groups = rule["spec"]["groups"].clone();
    assert!(
        groups.as_sequence().is_some_and(|g| !g.is_empty()),
        "{stdout}"
    );
    serde_json::to_string_pretty(&serde_json::json!({ "groups": groups })).expect("rules JSON")
}

#[test]
fn chart_alerts_pass_their_promtool_unit_tests() {
    let promtool = promtool();
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, rules_file()).expect("write rules");

    let check = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("promtool check rules");
    assert!(
        check.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/alert_rules");
    let mut tests = Vec::new();
    for entry in std::fs::read_dir(&data).expect("tests/data/alert_rules") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            // Next to rules.yaml: `rule_files` is relative to the test file.
            let copy = dir.path().join(path.file_name().expect("file name"));
            std::fs::copy(&path, &copy).expect("copy test file");
            tests.push(copy);
        }
    }
    assert!(!tests.is_empty(), "no promtool tests in {}", data.display());
    let out = Command::new(&promtool)
        .args(["test", "rules"])
        .args(&tests)
        .output()
        .expect("promtool test rules");
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
