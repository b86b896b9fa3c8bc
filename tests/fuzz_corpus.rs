//! The fuzz targets of `fuzz/` over their committed seed corpus (`fuzz/corpus/<target>/`), as
//! plain tests: every seed keeps every invariant the fuzzer checks (a response carries the
//! request's uid, a denial names a rule, the mutation's patch applies and validates...), and
//! each crash the fuzzer found stays fixed (its input is kept in the corpus as a regression
//! seed). `make fuzz` runs the same targets under AFL++.

#[path = "../fuzz/src/targets/mod.rs"]
#[allow(dead_code)]
mod targets;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut seeds: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    seeds.sort();
    seeds
}

#[test]
fn every_target_keeps_its_invariants_on_its_seed_corpus() {
    let mut replayed = 0;
    for (name, target) in targets::TARGETS {
        let seeds = corpus(name);
        assert!(seeds.len() >= 3, "{name}: only {} seeds", seeds.len());
        for (path, bytes) in seeds {
            let outcome = std::panic::catch_unwind(|| target(&bytes));
            assert!(
                outcome.is_ok(),
                "{name}: {} breaks an invariant",
                path.display()
            );
            replayed += 1;
        }
    }
    println!(
        "replayed {replayed} seeds over {} targets",
        targets::TARGETS.len()
    );
}

#[test]
fn the_checks_detect_what_they_are_for() {
    // A denial without a rule id, or an answer with another uid, must fail the check.
    assert!(targets::admission::names_rule("x is wrong (rule E3)"));
    assert!(!targets::admission::names_rule("x is wrong"));
    assert!(!targets::admission::names_rule("the rule says"));
    let input = br#"{"request":{"uid":"a"}}"#;
    let other_uid = br#"{"response":{"uid":"b","allowed":true}}"#;
    let caught = std::panic::catch_unwind(|| {
        targets::admission::check_answer(input, 200, other_uid);
    });
    assert!(caught.is_err(), "a response with another uid passed");
    let no_rule = br#"{"response":{"uid":"a","allowed":false,"status":{"message":"no"}}}"#;
    let caught = std::panic::catch_unwind(|| {
        targets::admission::check_answer(input, 200, no_rule);
    });
    assert!(caught.is_err(), "a denial naming no rule passed");
}
