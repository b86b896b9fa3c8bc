#!/usr/bin/env bash
# Ensures a kube-apiserver, kube-controller-manager and etcd for the real-cluster tests and prints the
# directory that holds them (the value for KUBEBUILDER_ASSETS).
#
# 1. $KUBEBUILDER_ASSETS, when it holds kube-apiserver and etcd, is used as it is.
# 2. Otherwise the binaries are built once from Debian's packages and cached outside the repository,
#    in $EVICTORD_CACHE (default ~/.cache/evictord)/envtest/<version>:
#    etcd from `etcd-server`, kube-apiserver and kube-controller-manager from the `kubernetes` source
#    package (v1.20, vendored dependencies) built with `golang-1.19-go`.
# Progress goes to stderr; the only line on stdout is the directory.
set -euo pipefail

log() { echo "envtest: $*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kube-apiserver" && -x "${KUBEBUILDER_ASSETS}/etcd" ]]; then
  echo "${KUBEBUILDER_ASSETS}"
  exit 0
fi

cache="${EVICTORD_CACHE:-${HOME}/.cache/evictord}/envtest"
dest="${cache}/v1.20"
if [[ -x "${dest}/kube-apiserver" && -x "${dest}/etcd" && -x "${dest}/kube-controller-manager" ]]; then
  echo "${dest}"
  exit 0
fi

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

log "building kube-apiserver and etcd from Debian's packages into ${dest} (once; about 5-10 minutes)"

# deb-src for the kubernetes source package, with the same mirrors as the binary sources.
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
# etcd-server may register a system service on 2379: keep it from starting, the tests run their own etcd.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e ${policy} ]]; then
  printf '#!/bin/sh\nexit 101\n' | as_root tee ${policy} >/dev/null
  as_root chmod +x ${policy}
  own_policy=1
fi
log "apt-get install etcd-server golang-1.19-go golang-github-modern-go-reflect2-dev rsync jq dpkg-dev"
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
  etcd-server golang-1.19-go golang-github-modern-go-reflect2-dev rsync jq dpkg-dev make >&2
if [[ ${own_policy} -eq 1 ]]; then as_root rm -f ${policy}; fi

work=$(mktemp -d "${TMPDIR:-/tmp}/evictord-envtest.XXXXXX")
trap 'rm -rf "${work}"' EXIT
cd "${work}"
log "apt-get source kubernetes"
apt-get source --download-only kubernetes >&2
dpkg-source --no-check -x ./kubernetes_*.dsc src >&2
cd src

# The vendored reflect2 1.0.1 crashes (SIGSEGV encoding maps) under Go >= 1.18; Debian ships 1.0.2.
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
rm -rf vendor/github.com/modern-go/reflect2
mkdir -p vendor/github.com/modern-go/reflect2
cp -r "${reflect2}/." vendor/github.com/modern-go/reflect2/
sed -i 's#^\(github.com/modern-go/reflect2\) v1.0.1#\1 v1.0.2#' vendor/modules.txt go.mod || true

log "go build (make WHAT=cmd/kube-apiserver cmd/kube-controller-manager)"
export PATH="/usr/lib/go-1.19/bin:${PATH}" GOPROXY=off GOTOOLCHAIN=local GOFLAGS=-mod=vendor
export GOCACHE="${work}/gocache" GOPATH="${work}/gopath"
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" KUBE_BUILD_PLATFORMS=linux/amd64 >&2

mkdir -p "${dest}.tmp"
cp _output/local/bin/linux/amd64/kube-apiserver _output/local/bin/linux/amd64/kube-controller-manager "${dest}.tmp/"
cp "$(command -v etcd || echo /usr/bin/etcd)" "${dest}.tmp/etcd"
rm -rf "${dest}"
mv "${dest}.tmp" "${dest}"
log "ready: ${dest}"
echo "${dest}"
