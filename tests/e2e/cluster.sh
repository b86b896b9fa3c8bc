#!/usr/bin/env bash
# A real two-node Kubernetes v1.20 cluster for the end-to-end test (`make e2e`): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, and per node a kubelet with its own
# containerd (runc), all built or installed from Debian's packages (tests/tools/envtest.sh,
# tests/tools/node.sh); nothing pulled. Node e2e-node (label evictord.dev/e2e=true) is the one the
# tests drain; its kubelet reads static pods from $EVICTORD_E2E_DIR/kubelet/manifests. Node
# e2e-node-2 (label evictord.dev/e2e-role=control) runs what must stay up while e2e-node is drained
# (evictord itself).
#
#   tests/e2e/cluster.sh up      # (re)creates the cluster; prints the admin kubeconfig path
#   tests/e2e/cluster.sh down    # stops everything and removes every trace
#   tests/e2e/cluster.sh exec CMD...   # runs CMD in the cluster's network namespace
#   tests/e2e/cluster.sh restart-kubelet   # restarts e2e-node's kubelet (SIGTERM, start, healthy)
#
# Isolation from the host:
# - network: traffic stays on loopback. Every process runs in its own network namespace
#   `evictord-e2e` (nsenter --net; the mount namespace is the host's so the kubelet, containerd and
#   runc see the same mounts), whose only interface is `lo`: its ports never collide with the
#   host's. Both nodes' address is 127.0.0.1 (the kubelet built by tests/tools/node.sh accepts a
#   loopback --node-ip; the second kubelet and containerd listen on other ports) and every pod uses
#   hostNetwork: true; there is no CNI plugin and no bridge (containerd gets a loopback-only CNI
#   config so that it reports the network ready; it is never invoked for hostNetwork pods). The API
#   rejects loopback addresses in Endpoints ("may not be in the loopback range"), so no Service has
#   endpoints here: kube-apiserver runs with
#   --endpoint-reconciler-type=none, evictord's webhooks are registered by URL
#   (https://127.0.0.1:PORT, chart value webhook.url) and evictord reaches the API server at
#   127.0.0.1 (chart value kubernetesAPI.host). ClusterIPs come from 198.18.0.0/24 (RFC 2544
#   benchmarking range) and are never dialled: there is no kube-proxy, and nothing needs one.
# - files: containerd's root, state, socket and config, runc's state, the kubelet's root, certificate,
#   volume-plugin and static pod directories (each node its own), certificates, logs and etcd's data
#   all live in one scratch directory, $EVICTORD_E2E_DIR (default /tmp/evictord-e2e). Exception: the
#   v1.20 kubelet writes container logs to the fixed /var/log/pods and /var/log/containers; `down`
#   removes the entries of the e2e namespaces there (and the directories when they end up empty);
#   containerd's shims use the fixed /run/containerd/s (and fifo), removed when empty if this
#   cluster created them.
# - cgroups: pods live under the cgroup /evictord-e2e (e2e-node) and /evictord-e2e/node-2 in every
#   v1 hierarchy (--cgroup-root, cgroupfs driver); `down` kills what is left in it and removes it.
# - kernel settings: the kubelet wants vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
#   kernel.panic_on_oops=1, kernel.keys.root_maxkeys=1000000, kernel.keys.root_maxbytes=25000000 and
#   rewrites them host-wide unless --protect-kernel-defaults=true. The kubelet built by
#   tests/tools/node.sh runs with that flag and is patched to only warn (stock v1.20 refuses to start
#   when a value differs); `up` prints the host's values, which stay untouched.
# - a crashed run is cleaned up by the next `up`, which runs `down` first (fixed paths and names).
# Every wait is bounded in tries and time.
set -euo pipefail

DIR=${EVICTORD_E2E_DIR:-/tmp/evictord-e2e}
NETNS=evictord-e2e
NODE_IP=127.0.0.1
NODE_NAME=e2e-node
NODE2_NAME=e2e-node-2
CGROUP=evictord-e2e
PAUSE_IMAGE=localhost/evictord-e2e/pause:3.4
BUSYBOX_IMAGE=localhost/evictord-e2e/busybox:1.35
E2E_NAMESPACES_RE='^(evictord-e2e|e2e-work)_'

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "${here}/../.." && pwd)
log() { echo "e2e-cluster: $*" >&2; }
in_ns() { nsenter --net="/run/netns/${NETNS}" -- "$@"; }

cgroup_dirs() { # every v1 hierarchy plus the unified one, where runc may also create cgroups
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -d "${h}${CGROUP}" ]] && echo "${h}${CGROUP}"
  done
  return 0
}

down() {
  # 1. The processes this cluster started, by the pid files `up` wrote (kubelet first so that it
  #    does not restart containers, containerd last).
  local name pid i
  for name in kubelet kubelet-2 kube-scheduler kube-controller-manager kube-apiserver etcd containerd containerd-2; do
    [[ -f "${DIR}/pids/${name}" ]] || continue
    pid=$(cat "${DIR}/pids/${name}")
    # Only if that pid still runs the binary we started (pids get reused after a reboot).
    if [[ -r /proc/${pid}/cmdline ]] && tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -q -- "${DIR}"; then
      kill -TERM "${pid}" 2>/dev/null || true
      for i in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "${pid}" 2>/dev/null || true
    fi
  done
  # 2. containerd's shims (their command line names one of our containerd sockets) and every process
  #    left in the pods' cgroups (containers, pause). A shim listens on a socket in the fixed
  #    /run/containerd/s named sha256(<containerd address>/<namespace>/<id>) (containerd 1.6,
  #    pkg/shim SocketAddress) and a killed shim leaves it behind: it is removed with the shim.
  local args id address ns
  for pid in $(grep -lsE -- "${DIR}/containerd(-2)?/containerd.sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [[ "${pid}" == "$$" ]] && continue
    args=$(tr '\0' '\n' <"/proc/${pid}/cmdline" 2>/dev/null) || continue
    id=$(awk 'p {print; exit} $0 == "-id" {p = 1}' <<<"${args}")
    address=$(awk 'p {print; exit} $0 == "-address" {p = 1}' <<<"${args}")
    ns=$(awk 'p {print; exit} $0 == "-namespace" {p = 1}' <<<"${args}")
    kill -KILL "${pid}" 2>/dev/null || true
    if [[ -n "${id}" && -n "${address}" && -n "${ns}" ]]; then
      rm -f "/run/containerd/s/$(printf '%s' "${address}/${ns}/${id}" | sha256sum | cut -d' ' -f1)"
    fi
  done
  local d
  for i in $(seq 1 20); do
    local left=0
    while read -r d; do
      for pid in $(find "${d}" -name cgroup.procs -exec cat {} + 2>/dev/null); do
        kill -KILL "${pid}" 2>/dev/null || true
        left=1
      done
    done < <(cgroup_dirs)
    [[ ${left} -eq 0 ]] && break
    sleep 0.2
  done
  # 3. Mounts under the scratch directory (secrets, emptyDirs, overlay snapshots, shm), deepest first.
  for i in $(seq 1 5); do
    local mounts
    mounts=$(awk -v d="${DIR}/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [[ -z "${mounts}" ]] && break
    while read -r d; do umount "${d}" 2>/dev/null || umount -l "${d}" 2>/dev/null || true; done <<<"${mounts}"
  done
  # 4. The cgroups, deepest first.
  while read -r d; do
    find "${d}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done < <(cgroup_dirs)
  if [[ -n "$(cgroup_dirs)" ]]; then log "warning: cgroups left: $(cgroup_dirs | tr '\n' ' ')"; fi
  # 5. The network namespace, the kubelet's container logs of the e2e namespaces, the scratch dir.
  ip netns delete "${NETNS}" 2>/dev/null || true
  if [[ -d /var/log/pods ]]; then
    find /var/log/containers -maxdepth 1 -type l 2>/dev/null | while read -r d; do
      [[ "$(readlink "${d}")" == /var/log/pods/* ]] && basename "$(readlink "${d}" | cut -d/ -f5)" | grep -Eq "${E2E_NAMESPACES_RE}" && rm -f "${d}"
      true
    done || true
    find /var/log/pods -mindepth 1 -maxdepth 1 -type d | while read -r d; do
      basename "${d}" | grep -Eq "${E2E_NAMESPACES_RE}" && rm -rf "${d}"
      true
    done || true
    rmdir /var/log/containers /var/log/pods 2>/dev/null || true
  fi
  # containerd's fixed runtime directory (shim sockets, fifos) when this cluster created it.
  if [[ -f "${DIR}/created-run-containerd" ]]; then
    rmdir /run/containerd/s /run/containerd/fifo /run/containerd/runc/k8s.io /run/containerd/runc \
      /run/containerd 2>/dev/null || true
  fi
  rm -rf "${DIR}"
}

cert() { # cert NAME CN ORG SANS   (signed by ca; SANS like "IP:1.2.3.4,DNS:x"; ORG may be empty)
  local name=$1 cn=$2 org=$3 sans=$4 subj="/CN=$2"
  [[ -n "${org}" ]] && subj="/O=${org}/CN=${cn}"
  openssl req -new -newkey rsa:2048 -nodes -keyout "${DIR}/pki/${name}.key" -subj "${subj}" \
    -out "${DIR}/pki/${name}.csr" 2>/dev/null
  local ext="basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
  [[ -n "${sans}" ]] && ext="${ext}
subjectAltName=${sans}"
  openssl x509 -req -in "${DIR}/pki/${name}.csr" -CA "${DIR}/pki/ca.crt" -CAkey "${DIR}/pki/ca.key" \
    -CAcreateserial -days 2 -out "${DIR}/pki/${name}.crt" -extfile <(echo "${ext}") 2>/dev/null
}

kubeconfig() { # kubeconfig FILE CERT
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://${NODE_IP}:6443", certificate-authority: "${DIR}/pki/ca.crt"}
users:
- name: $2
  user: {client-certificate: "${DIR}/pki/$2.crt", client-key: "${DIR}/pki/$2.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
EOF
}

start() { # start NAME BINARY ARGS...   (in the network namespace, logs in DIR/logs/NAME.log)
  local name=$1
  shift
  # A simple command in the background: bash forks and nsenter execs the binary, so $! is its pid.
  nsenter --net="/run/netns/${NETNS}" -- "$@" </dev/null >"${DIR}/logs/${name}.log" 2>&1 &
  echo $! >"${DIR}/pids/${name}"
}

wait_for() { # wait_for WHAT TRIES SLEEP CMD...
  local what=$1 tries=$2 pause=$3 i
  shift 3
  for i in $(seq 1 "${tries}"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep "${pause}"
  done
  log "timed out waiting for ${what}"
  return 1
}

# A single-layer image of static binaries: image NAME REF BINARY:PATH...
image() {
  local name=$1 ref=$2 rootfs="${DIR}/images/$1.rootfs" spec
  shift 2
  mkdir -p "${rootfs}"
  for spec in "$@"; do
    mkdir -p "${rootfs}$(dirname "${spec#*:}")"
    cp "${spec%%:*}" "${rootfs}${spec#*:}"
  done
  if [[ -x "${rootfs}/bin/busybox" ]]; then
    for applet in sh sleep true cat; do ln -s busybox "${rootfs}/bin/${applet}"; done
  fi
  "${repo}/tests/tools/oci-image.sh" "${rootfs}" "${ref}" "${DIR}/images/${name}" \
    --config.entrypoint "${CONFIG_ENTRYPOINT}" >/dev/null
  ctr_ images import "${DIR}/images/${name}.docker.tar" >&2
  ctr_2 images import "${DIR}/images/${name}.docker.tar" >&2
}

ctr_() { ctr --address "${DIR}/containerd/containerd.sock" --namespace k8s.io "$@"; }
ctr_2() { ctr --address "${DIR}/containerd-2/containerd.sock" --namespace k8s.io "$@"; }

containerd_config() { # containerd_config DIRNAME STREAM_PORT   (the containerd of one node)
  local d="${DIR}/$1"
  cat >"${d}/config.toml" <<EOF
version = 2
root = "${d}/root"
state = "${d}/state"
plugin_dir = ""
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "${d}/containerd.sock"
[ttrpc]
  address = "${d}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "${d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "$2"
  enable_selinux = false
  # Containers may not get an oom_score_adj below containerd's own (0): a machine without
  # CAP_SYS_RESOURCE (such as this project's CI sandbox) cannot lower it, and runc then fails every
  # pod sandbox (the pause container asks for -998) with "failed to update /proc/self/oom_score_adj".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${DIR}/cni/bin"
    conf_dir = "${DIR}/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${d}/runc"
EOF
}

# The kubelet of e2e-node, as `up` and `restart-kubelet` start it: static pods from
# DIR/kubelet/manifests (read again every 5 s besides its inotify watch).
start_kubelet() {
  start kubelet "$(cat "${DIR}/node-bin")/kubelet" \
    --kubeconfig="${DIR}/kubelet.kubeconfig" --hostname-override="${NODE_NAME}" --node-ip="${NODE_IP}" \
    --node-labels=evictord.dev/e2e=true \
    --container-runtime=remote --container-runtime-endpoint="unix://${DIR}/containerd/containerd.sock" \
    --image-service-endpoint="unix://${DIR}/containerd/containerd.sock" \
    --pod-infra-container-image="${PAUSE_IMAGE}" \
    --root-dir="${DIR}/kubelet/root" --cert-dir="${DIR}/kubelet/pki" \
    --volume-plugin-dir="${DIR}/kubelet/plugins" \
    --pod-manifest-path="${DIR}/kubelet/manifests" --file-check-frequency=5s \
    --tls-cert-file="${DIR}/pki/kubelet.crt" --tls-private-key-file="${DIR}/pki/kubelet.key" \
    --client-ca-file="${DIR}/pki/ca.crt" --anonymous-auth=false --authorization-mode=AlwaysAllow \
    --cgroup-driver=cgroupfs --cgroup-root="/${CGROUP}" --cgroups-per-qos=true \
    --protect-kernel-defaults=true --fail-swap-on=false --make-iptables-util-chains=false \
    --eviction-hard='memory.available<100Mi,nodefs.available<1%,imagefs.available<1%' \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --serialize-image-pulls=false --healthz-bind-address=127.0.0.1 --read-only-port=0 \
    --address="${NODE_IP}" --max-pods=30 --sync-frequency=5s --node-status-update-frequency=5s \
    --runtime-request-timeout=2m --oom-score-adj=0 --v=3
}

# The kubelet of e2e-node-2: its own containerd, directories, certificate, cgroup and ports.
start_kubelet_2() {
  start kubelet-2 "$(cat "${DIR}/node-bin")/kubelet" \
    --kubeconfig="${DIR}/kubelet-2.kubeconfig" --hostname-override="${NODE2_NAME}" --node-ip="${NODE_IP}" \
    --node-labels=evictord.dev/e2e-role=control \
    --container-runtime=remote --container-runtime-endpoint="unix://${DIR}/containerd-2/containerd.sock" \
    --image-service-endpoint="unix://${DIR}/containerd-2/containerd.sock" \
    --pod-infra-container-image="${PAUSE_IMAGE}" \
    --root-dir="${DIR}/kubelet-2/root" --cert-dir="${DIR}/kubelet-2/pki" \
    --volume-plugin-dir="${DIR}/kubelet-2/plugins" \
    --tls-cert-file="${DIR}/pki/kubelet-2.crt" --tls-private-key-file="${DIR}/pki/kubelet-2.key" \
    --client-ca-file="${DIR}/pki/ca.crt" --anonymous-auth=false --authorization-mode=AlwaysAllow \
    --cgroup-driver=cgroupfs --cgroup-root="/${CGROUP}/node-2" --cgroups-per-qos=true \
    --protect-kernel-defaults=true --fail-swap-on=false --make-iptables-util-chains=false \
    --eviction-hard='memory.available<100Mi,nodefs.available<1%,imagefs.available<1%' \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --serialize-image-pulls=false --healthz-bind-address=127.0.0.1 --healthz-port=10258 \
    --port=10260 --read-only-port=0 \
    --address="${NODE_IP}" --max-pods=30 --sync-frequency=5s --node-status-update-frequency=5s \
    --runtime-request-timeout=2m --oom-score-adj=0 --v=2
}

# Restarts e2e-node's kubelet: SIGTERM (SIGKILL after 10 s), the same command again, healthz.
# Containers keep running meanwhile (they belong to containerd).
restart_kubelet() {
  local pid i
  pid=$(cat "${DIR}/pids/kubelet")
  kill -TERM "${pid}" 2>/dev/null || true
  for i in $(seq 1 100); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "${pid}" 2>/dev/null || true
  log "kubelet of ${NODE_NAME} stopped; starting it again"
  # Keep the first run's log beside the new one.
  cat "${DIR}/logs/kubelet.log" >>"${DIR}/logs/kubelet-before-restart.log"
  start_kubelet
  wait_for "kubelet healthz" 120 0.5 in_ns curl -fsS "http://127.0.0.1:10248/healthz"
  log "kubelet of ${NODE_NAME} restarted"
}

up() {
  local envtest node kc
  envtest=$("${repo}/tests/tools/envtest.sh")
  node=$("${repo}/tests/tools/node.sh")
  "${repo}/tests/tools/image-tools.sh"
  for tool in openssl containerd runc ctr busybox nsenter ip; do
    command -v "${tool}" >/dev/null || { log "${tool} is missing"; exit 1; }
  done
  log "cleaning up any earlier run"
  down
  mkdir -p "${DIR}"/{pki,logs,pids,images,etcd,containerd,containerd-2,cni/conf,cni/bin,kubelet/root,kubelet/pki,kubelet/plugins,kubelet/manifests,kubelet-2/root,kubelet-2/pki,kubelet-2/plugins}
  echo "${node}" >"${DIR}/node-bin"
  log "host kernel settings the kubelet would change (left as they are): $(for s in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes; do printf '%s=%s ' "$s" "$(sysctl -n "$s")"; done)"

  # Network namespace: only lo, 127.0.0.1 (the node address).
  ip netns add "${NETNS}"
  ip -n "${NETNS}" link set lo up

  # cgroup parent for the pods, in every hierarchy (cpuset needs its cpus and mems filled in).
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -f "${h}cgroup.procs" ]] || continue
    mkdir -p "${h}${CGROUP}/node-2"
    if [[ -f "${h}cpuset.cpus" ]]; then
      cat "${h}cpuset.cpus" >"${h}${CGROUP}/cpuset.cpus"
      cat "${h}cpuset.mems" >"${h}${CGROUP}/cpuset.mems"
      cat "${h}cpuset.cpus" >"${h}${CGROUP}/node-2/cpuset.cpus"
      cat "${h}cpuset.mems" >"${h}${CGROUP}/node-2/cpuset.mems"
    fi
  done

  log "certificates"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "${DIR}/pki/ca.key" -out "${DIR}/pki/ca.crt" \
    -subj /CN=evictord-e2e-ca -days 2 2>/dev/null
  cert apiserver kube-apiserver "" "IP:${NODE_IP},IP:198.18.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin admin system:masters ""
  cert kubelet "system:node:${NODE_NAME}" system:nodes "IP:${NODE_IP},DNS:${NODE_NAME}"
  cert kubelet-2 "system:node:${NODE2_NAME}" system:nodes "IP:${NODE_IP},DNS:${NODE2_NAME}"
  openssl genrsa -out "${DIR}/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "${DIR}/pki/sa.key" -pubout -out "${DIR}/pki/sa.pub" 2>/dev/null
  kubeconfig "${DIR}/admin.kubeconfig" admin
  kubeconfig "${DIR}/kubelet.kubeconfig" kubelet
  kubeconfig "${DIR}/kubelet-2.kubeconfig" kubelet-2

  log "etcd, kube-apiserver"
  start etcd "${envtest}/etcd" --data-dir "${DIR}/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster default=http://127.0.0.1:2380
  start kube-apiserver "${envtest}/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 --bind-address="${NODE_IP}" --secure-port=6443 \
    --advertise-address="${NODE_IP}" --endpoint-reconciler-type=none \
    --service-cluster-ip-range=198.18.0.0/24 \
    --tls-cert-file="${DIR}/pki/apiserver.crt" --tls-private-key-file="${DIR}/pki/apiserver.key" \
    --client-ca-file="${DIR}/pki/ca.crt" --authorization-mode=Node,RBAC \
    --service-account-key-file="${DIR}/pki/sa.pub" --service-account-signing-key-file="${DIR}/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --insecure-port=0 \
    --kubelet-client-certificate="${DIR}/pki/admin.crt" --kubelet-client-key="${DIR}/pki/admin.key" \
    --kubelet-preferred-address-types=InternalIP \
    --enable-aggregator-routing=true --allow-privileged=true \
    --enable-admission-plugins=NodeRestriction,Priority,ServiceAccount,DefaultTolerationSeconds \
    --cert-dir="${DIR}/pki/apiserver-generated"
  wait_for "kube-apiserver /readyz" 120 0.5 \
    in_ns curl -fsS --cacert "${DIR}/pki/ca.crt" --cert "${DIR}/pki/admin.crt" --key "${DIR}/pki/admin.key" "https://${NODE_IP}:6443/readyz"

  log "kube-controller-manager, kube-scheduler"
  start kube-controller-manager "${envtest}/kube-controller-manager" \
    --kubeconfig="${DIR}/admin.kubeconfig" --leader-elect=false \
    --service-account-private-key-file="${DIR}/pki/sa.key" --root-ca-file="${DIR}/pki/ca.crt" \
    --use-service-account-credentials=false --controllers='*,-nodeipam,-cloud-node-lifecycle' \
    --bind-address=127.0.0.1 --port=0 --cert-dir="${DIR}/pki/kcm-generated"
  start kube-scheduler "${node}/kube-scheduler" --kubeconfig="${DIR}/admin.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --port=0 --cert-dir="${DIR}/pki/scheduler-generated"

  log "containerd"
  # A loopback-only CNI configuration: containerd then reports the network ready. Never invoked,
  # every pod uses hostNetwork.
  echo '{"cniVersion":"0.4.0","name":"e2e-hostnetwork-only","plugins":[{"type":"loopback"}]}' \
    >"${DIR}/cni/conf/10-e2e.conflist"
  containerd_config containerd 10010
  containerd_config containerd-2 10011
  [[ -e /run/containerd ]] || touch "${DIR}/created-run-containerd"
  start containerd containerd --config "${DIR}/containerd/config.toml"
  start containerd-2 containerd --config "${DIR}/containerd-2/config.toml"
  wait_for "containerd" 100 0.2 ctr_ version
  wait_for "containerd-2" 100 0.2 ctr_2 version

  log "images: pause, busybox (static binaries, built here), evictord"
  CONFIG_ENTRYPOINT=/pause image pause "${PAUSE_IMAGE}" "${node}/pause:/pause"
  CONFIG_ENTRYPOINT=/bin/sh image busybox "${BUSYBOX_IMAGE}" "$(command -v busybox):/bin/busybox"

  log "kubelets: ${NODE_NAME} (static pods from ${DIR}/kubelet/manifests), ${NODE2_NAME}"
  start_kubelet
  start_kubelet_2
  kc=(in_ns "${TOOLS:-$("${repo}/tests/tools/helm-kubectl.sh")}/kubectl" --kubeconfig "${DIR}/admin.kubeconfig")
  wait_for "node ${NODE_NAME} Ready" 120 1 \
    "${kc[@]}" wait --for=condition=Ready "node/${NODE_NAME}" --timeout=1s
  wait_for "node ${NODE2_NAME} Ready" 120 1 \
    "${kc[@]}" wait --for=condition=Ready "node/${NODE2_NAME}" --timeout=1s
  log "ready: nodes ${NODE_NAME} and ${NODE2_NAME} (${NODE_IP}); kubeconfig ${DIR}/admin.kubeconfig"
  echo "${DIR}/admin.kubeconfig"
}

[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0 # sourced: functions only
case "${1:-}" in
  up) up ;;
  down) down ;;
  exec) shift; in_ns "$@" ;;
  restart-kubelet) restart_kubelet ;;
  *) echo "usage: $0 up|down|exec CMD...|restart-kubelet" >&2; exit 2 ;;
esac
