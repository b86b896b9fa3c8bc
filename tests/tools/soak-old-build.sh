#!/usr/bin/env bash
# Ensures the `evictord` binary and the chart's CRD files of an earlier commit for the soak
# (`make soak`, tests/soak.rs: evictord replaced by that build mid-drain and back) and prints
# the directory that holds them (`evictord`, `crds/`).
#
# Usage: tests/tools/soak-old-build.sh <commit> [<patch>]
#
# With a patch (e.g. tests/soak-broken/skip-restore.patch), the commit is built with the patch
# applied (`git apply`; the build fails when it does not apply): a deliberately broken build
# for `make soak-broken`, cached under <commit>-<the patch's sha256, 12 digits>.
#
# The commit is checked out in a temporary `git worktree` (removed on exit, even on failure),
# built once (debug, `--locked`) with a target directory of its own, and the binary and the
# commit's charts/evictord/crds/ are cached outside the repository, in
# $EVICTORD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/evictord)/soak/<full commit>/; later runs
# reuse them while the binary answers `--version`. The build is bounded by SOAK_OLD_BUILD_BOUND
# seconds (default 1800).
#
# Progress goes to stderr; the only line on stdout is the directory.
set -euo pipefail

log() { echo "soak-old-build: $*" >&2; }

commit_arg="${1:?usage: soak-old-build.sh <commit>}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
commit="$(git -C "${repo}" rev-parse --verify "${commit_arg}^{commit}")"
patch="${2:-}"
key="${commit}"
if [[ -n "${patch}" ]]; then
  patch="$(cd "$(dirname "${patch}")" && pwd)/$(basename "${patch}")"
  key="${commit}-$(sha256sum "${patch}" | cut -c1-12)"
fi
cache="${EVICTORD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/evictord}/soak/${key}"
bound="${SOAK_OLD_BUILD_BOUND:-1800}"

if [[ -x "${cache}/evictord" && -d "${cache}/crds" ]] && "${cache}/evictord" --version >/dev/null 2>&1; then
  echo "${cache}"
  exit 0
fi

mkdir -p "${cache}"
work="$(mktemp -d "${TMPDIR:-/tmp}/evictord-soak-old.XXXXXX")"
cleanup() {
  git -C "${repo}" worktree remove --force "${work}/tree" >/dev/null 2>&1 || true
  git -C "${repo}" worktree prune >/dev/null 2>&1 || true
  rm -rf "${work}"
}
trap cleanup EXIT

log "building evictord at ${commit} (once; cached in ${cache})"
git -C "${repo}" worktree add --detach "${work}/tree" "${commit}" >&2
if [[ -n "${patch}" ]]; then
  log "applying $(basename "${patch}")"
  git -C "${work}/tree" apply "${patch}"
fi
(
  cd "${work}/tree"
  CARGO_TARGET_DIR="${cache}/target" timeout "${bound}" "${CARGO:-cargo}" build --locked --bin evictord >&2
)
cp "${cache}/target/debug/evictord" "${cache}/evictord.new"
rm -rf "${cache}/crds"
cp -r "${work}/tree/charts/evictord/crds" "${cache}/crds"
# The binary and the CRDs are all the soak needs; the target directory is gigabytes.
rm -rf "${cache}/target"
mv "${cache}/evictord.new" "${cache}/evictord"
"${cache}/evictord" --version >&2
echo "${cache}"
