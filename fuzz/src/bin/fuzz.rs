//! The AFL++ harness: `fuzz TARGET` runs that target in persistent mode (see `make fuzz`).

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = evictord_fuzz::targets::find(&name) else {
        let names: Vec<&str> = evictord_fuzz::targets::TARGETS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        eprintln!("usage: fuzz TARGET, one of {}", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| target(data));
}
