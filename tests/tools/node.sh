#!/usr/bin/env bash
# Ensures the node side of the end-to-end cluster (`make e2e`) and prints the directory that holds
# kubelet, kube-scheduler and a static `pause` binary.
#
# Built once from Debian's packages and cached outside the repository, in
# $EVICTORD_CACHE (default ~/.cache/evictord)/node/v1.20 — the same `kubernetes` v1.20 source
# package and Go as tests/tools/envtest.sh (which builds kube-apiserver, kube-controller-manager):
#   - kubelet and kube-scheduler (`make WHAT=...`), with two patches to the kubelet:
#     1. --protect-kernel-defaults=true only *warns* about kernel settings that differ from what it
#        wants (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...) instead of
#        failing. Without the flag it would rewrite those host-wide sysctls; with the unpatched flag
#        it refuses to start on a host whose values differ. The e2e cluster must leave the host alone.
#     2. --node-ip may be a loopback address: the e2e node is 127.0.0.1, so that no traffic ever
#        leaves loopback (stock v1.20 refuses with "nodeIP can't be loopback address").
#   The cache directory is named after the patch level, so changing the patches rebuilds.
#   - pause: build/pause/linux/pause.c compiled statically with gcc (the sandbox image).
# Also installs the runtime packages: containerd, runc, busybox-static (a `sleep`/`sh` for test pods),
# and what tests/e2e uses: openssl (certificates), curl, iproute2 (ip, ss), util-linux (nsenter), jq.
# Progress goes to stderr; the only line on stdout is the directory.
set -euo pipefail

log() { echo "node: $*" >&2; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

cache="${EVICTORD_CACHE:-${HOME}/.cache/evictord}/node"
dest="${cache}/v1.20-p2"

need_pkgs=()
for p in containerd runc busybox-static openssl curl iproute2 util-linux jq; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need_pkgs+=("$p")
done
if [[ -x "${dest}/kubelet" && -x "${dest}/kube-scheduler" && -x "${dest}/pause" && ${#need_pkgs[@]} -eq 0 ]]; then
  echo "${dest}"
  exit 0
fi

# containerd's package registers a system service: keep it from starting, the e2e cluster runs its own.
with_no_services() {
  local policy=/usr/sbin/policy-rc.d own=0
  if [[ ! -e ${policy} ]]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee ${policy} >/dev/null
    as_root chmod +x ${policy}
    own=1
  fi
  "$@" || { [[ ${own} -eq 0 ]] || as_root rm -f ${policy}; return 1; }
  [[ ${own} -eq 0 ]] || as_root rm -f ${policy}
}

if [[ -x "${dest}/kubelet" && -x "${dest}/kube-scheduler" && -x "${dest}/pause" ]]; then
  log "apt-get install ${need_pkgs[*]}"
  as_root apt-get update -qq >&2
  with_no_services as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
  echo "${dest}"
  exit 0
fi

log "building kubelet, kube-scheduler and pause from Debian's packages into ${dest} (once; about 10 minutes)"

if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      as_root tee /etc/apt/sources.list.d/evictord-deb-src.sources >/dev/null
  else
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list | as_root tee /etc/apt/sources.list.d/evictord-deb-src.list >/dev/null
  fi
fi
log "apt-get update"
as_root apt-get update -qq >&2
log "apt-get install containerd runc busybox-static openssl curl iproute2 util-linux jq golang-1.19-go gcc libc6-dev dpkg-dev make"
with_no_services as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  containerd runc busybox-static openssl curl iproute2 util-linux jq golang-1.19-go golang-github-modern-go-reflect2-dev rsync gcc libc6-dev dpkg-dev make >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/evictord-node.XXXXXX")
trap 'rm -rf "${work}"' EXIT
cd "${work}"
log "apt-get source kubernetes"
apt-get source --download-only kubernetes >&2
dpkg-source --no-check -x ./kubernetes_*.dsc src >&2
cd src

# Same reflect2 fix as envtest.sh: the vendored 1.0.1 crashes under Go >= 1.18.
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
rm -rf vendor/github.com/modern-go/reflect2
mkdir -p vendor/github.com/modern-go/reflect2
cp -r "${reflect2}/." vendor/github.com/modern-go/reflect2/
sed -i 's#^\(github.com/modern-go/reflect2\) v1.0.1#\1 v1.0.2#' vendor/modules.txt go.mod || true

# --protect-kernel-defaults=true: warn instead of failing (see the header).
f=pkg/kubelet/cm/container_manager_linux.go
grep -q 'b = KernelTunableError' "$f"
sed -i 's/b = KernelTunableError/b = KernelTunableWarn/' "$f"

# --node-ip may be loopback (see the header).
f=pkg/kubelet/kubelet_node_status.go
grep -q 'if nodeIP.IsLoopback() {' "$f"
sed -i 's/if nodeIP.IsLoopback() {/if false \&\& nodeIP.IsLoopback() {/' "$f"
grep -q 'if false && nodeIP.IsLoopback() {' "$f"

log "gcc -static build/pause/linux/pause.c"
mkdir -p "${dest}.tmp"
gcc -Os -static -Wall -Werror -DVERSION=v3.4-evictord -o "${dest}.tmp/pause" build/pause/linux/pause.c >&2
strip "${dest}.tmp/pause"

log "go build (make WHAT=cmd/kubelet cmd/kube-scheduler)"
export PATH="/usr/lib/go-1.19/bin:${PATH}" GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-mod=vendor
export GOCACHE="${work}/gocache" GOPATH="${work}/gopath"
make WHAT="cmd/kubelet cmd/kube-scheduler" KUBE_BUILD_PLATFORMS=linux/amd64 >&2

cp _output/local/bin/linux/amd64/kubelet _output/local/bin/linux/amd64/kube-scheduler "${dest}.tmp/"
rm -rf "${dest}"
mv "${dest}.tmp" "${dest}"
log "ready: ${dest}"
echo "${dest}"
