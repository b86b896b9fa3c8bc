#!/usr/bin/env bash
# Ensures mdBook (which builds the book in docs/) and prints the directory that holds the `mdbook`
# binary. Installed once from crates.io with cargo, pinned, without the `serve` and `watch`
# features (no second HTTP stack), into $EVICTORD_CACHE (default ~/.cache/evictord)/mdbook/<version>.
# $MDBOOK_DIR, when it holds `mdbook`, is used as it is. Progress goes to stderr; the only line on
# stdout is the directory.
set -euo pipefail

version=0.5.4
log() { echo "mdbook: $*" >&2; }

if [[ -n "${MDBOOK_DIR:-}" && -x "${MDBOOK_DIR}/mdbook" ]]; then
  echo "${MDBOOK_DIR}"
  exit 0
fi
root="${EVICTORD_CACHE:-${HOME}/.cache/evictord}/mdbook/${version}"
if [[ -x "${root}/bin/mdbook" ]]; then
  echo "${root}/bin"
  exit 0
fi
log "cargo install mdbook ${version} into ${root} (once; about 3 minutes on two cores)"
work=$(mktemp -d "${TMPDIR:-/tmp}/evictord-mdbook.XXXXXX")
trap 'rm -rf "${work}"' EXIT
CARGO_TARGET_DIR="${work}/target" cargo install --quiet --locked mdbook --version "=${version}" \
  --no-default-features --features search --root "${work}/root" >&2
mkdir -p "${root}/bin"
mv "${work}/root/bin/mdbook" "${root}/bin/mdbook"
"${root}/bin/mdbook" --version >&2
log "ready: ${root}/bin"
echo "${root}/bin"
