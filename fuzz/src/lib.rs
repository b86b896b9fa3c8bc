//! Coverage-guided fuzzing of evictord (AFL++ through cargo-afl, on the stable toolchain): the
//! targets and their invariants. The same targets replay the committed seed corpus in
//! `cargo test --test fuzz_corpus` of the main crate.
#![forbid(unsafe_code)]

pub mod targets;
