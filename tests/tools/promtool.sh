#!/usr/bin/env bash
# Ensures a real `promtool` (Prometheus 2.x, for `promtool test rules` of the chart's alerts) and
# prints the directory that holds it.
#
# On PATH it is used as is. Otherwise it comes from Debian's `prometheus` package (bookworm:
# 2.42.0): the .deb is fetched with `apt-get download` and only usr/bin/promtool is unpacked,
# into $EVICTORD_CACHE (default ~/.cache/evictord)/promtool — nothing is installed system-wide
# and no Prometheus server is started. Needs apt (Debian/Ubuntu) and its package lists
# (`apt-get update` is run once if the download fails).
#
# Progress goes to stderr; the only line on stdout is the directory.
set -euo pipefail

log() { echo "promtool: $*" >&2; }

if found=$(command -v promtool 2>/dev/null) && "${found}" --version >/dev/null 2>&1; then
  dirname "${found}"
  exit 0
fi

dest="${EVICTORD_CACHE:-${HOME}/.cache/evictord}/promtool"
if [[ -x "${dest}/promtool" ]] && "${dest}/promtool" --version >/dev/null 2>&1; then
  echo "${dest}"
  exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  log "promtool is not on PATH and apt-get/dpkg-deb are missing: install Prometheus' promtool"
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/evictord-promtool.XXXXXX")
trap 'rm -rf "${work}"' EXIT
log "apt-get download prometheus"
if ! (cd "${work}" && apt-get download prometheus >&2); then
  log "apt-get update, then again"
  apt-get update >&2
  (cd "${work}" && apt-get download prometheus >&2)
fi
dpkg-deb -x "${work}"/prometheus_*.deb "${work}/root"
mkdir -p "${dest}"
install -m 0755 "${work}/root/usr/bin/promtool" "${dest}/promtool.tmp"
mv "${dest}/promtool.tmp" "${dest}/promtool"
"${dest}/promtool" --version >&2
log "ready: ${dest}"
echo "${dest}"
