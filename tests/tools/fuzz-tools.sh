#!/usr/bin/env bash
# Ensures cargo-afl and the AFL++ it drives, for `make fuzz`, on the stable toolchain.
#
# cargo-afl (crates.io, the afl.rs project of the rust-fuzz organisation) instruments the targets
# with rustc's own SanitizerCoverage passes, so no nightly compiler is needed (cargo-fuzz and
# libFuzzer need one). It bundles the AFL++ sources and builds them once (`cargo afl config
# --build`), into ~/.local/share/afl.rs: afl-fuzz and the runtime linked into the targets then
# come from the same AFL++ version. Debian's afl++ package (bookworm: 4.04c) is older than the
# runtime cargo-afl links, and cargo-afl does not look for it, so it is not used. Building
# AFL++ needs make and a C compiler (Debian's build-essential, installed with apt-get when
# missing).
#
# Progress goes to stderr. Installs once; later runs return at once.
set -euo pipefail

CARGO_AFL_VERSION="${CARGO_AFL_VERSION:-0.18.2}"
log() { echo "fuzz-tools: $*" >&2; }

if ! command -v make >/dev/null || ! command -v cc >/dev/null; then
  log "apt-get install build-essential (make and a C compiler build AFL++)"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends build-essential >&2
fi

if ! cargo afl --version 2>/dev/null | grep -qF "${CARGO_AFL_VERSION}"; then
  log "cargo install cargo-afl ${CARGO_AFL_VERSION}"
  cargo install --locked cargo-afl --version "${CARGO_AFL_VERSION}" >&2
fi

# `cargo afl config --build` is a no-op check when AFL++ is built for this rustc already; the
# marker avoids even that.
marker="${EVICTORD_CACHE:-${HOME}/.cache/evictord}/afl-built-${CARGO_AFL_VERSION}-$(rustc --version | tr ' ()' '___')"
if [[ ! -e "${marker}" ]]; then
  log "building AFL++ (cargo afl config --build), once"
  cargo afl config --build --force >&2
  mkdir -p "$(dirname "${marker}")"
  touch "${marker}"
fi
