//! The fuzz targets: each takes arbitrary bytes and panics only when an invariant breaks. Run
//! under AFL++ by `make fuzz` (`fuzz/src/bin/fuzz.rs`), and over the committed seed corpus
//! (`fuzz/corpus/<target>/`) by `cargo test --test fuzz_corpus`.

pub mod admission;
pub mod parsing;

/// A target: its name (the corpus directory) and the function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: &[Target] = &[
    ("eviction_requests", admission::eviction_requests),
    ("pods", admission::pods),
    (
        "validate_node_maintenances",
        admission::validate_node_maintenances,
    ),
    (
        "mutate_node_maintenances",
        admission::mutate_node_maintenances,
    ),
    ("pod_evictions", admission::pod_evictions),
    ("label_selectors", parsing::label_selectors),
    ("node_selectors", parsing::node_selectors),
    ("durations", parsing::durations),
    ("interceptor_lists", parsing::interceptor_lists),
    ("certificates", parsing::certificates),
];

/// The target of that name.
pub fn find(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
