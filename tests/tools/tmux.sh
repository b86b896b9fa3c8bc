#!/usr/bin/env bash
# Ensures `tmux` (the pseudo-terminal in which `make plugin-screen` runs the kubectl plugin's live
# view) and prints the directory that holds it. On PATH it is used as is; otherwise it is
# installed from Debian's `tmux` package (apt-get, as root or through sudo).
# Progress goes to stderr; the only line on stdout is the directory.
set -euo pipefail

log() { echo "tmux: $*" >&2; }

if found=$(command -v tmux 2>/dev/null); then
  dirname "${found}"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  log "tmux is not on PATH and apt-get is missing: install tmux"
  exit 1
fi
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
log "installing Debian's tmux package"
as_root apt-get install -y tmux >&2 || { as_root apt-get update >&2 && as_root apt-get install -y tmux >&2; }
dirname "$(command -v tmux)"
