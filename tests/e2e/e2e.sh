#!/usr/bin/env bash
# `make e2e`: the chart on a real one-node cluster with a kubelet (tests/e2e/cluster.sh).
#
#   tests/e2e/e2e.sh IMAGE_OUT REPOSITORY TAG     (IMAGE_OUT as written by `make image`)
#
# 1. starts the cluster and imports the evictord image (IMAGE_OUT.docker.tar) into its containerd;
# 2. `helm install`s the chart (one replica, hostNetwork, the API server address and the webhook URL
#    https://127.0.0.1:18443 set explicitly — on a node at 127.0.0.1 no Service can have endpoints,
#    see cluster.sh —, image pullPolicy Never) and waits for the Deployment to be Ready through its readiness probe;
# 3. checks: evictord patched its CA into both webhook configurations; kube-apiserver calls the
#    webhook and `kubectl` shows its denial (rule E3); a
#    NodeMaintenance in stage Drain cordons the node and drains a real pod, which the kubelet stops
#    honouring its preStop hook and grace period; `helm uninstall` leaves no webhook configuration;
# 4. stops the cluster and removes every trace (also on failure; EVICTORD_E2E_KEEP=1 keeps it running
#    for a look: `tests/e2e/cluster.sh exec kubectl --kubeconfig /tmp/evictord-e2e/admin.kubeconfig ...`).
set -euo pipefail

image_out=$1 repository=$2 tag=$3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "${here}/../.." && pwd)
cluster="${here}/cluster.sh"
DIR=${EVICTORD_E2E_DIR:-/tmp/evictord-e2e}
export EVICTORD_E2E_DIR=${DIR}
NS=evictord-e2e
WORK=e2e-work
RELEASE=evictord
GRACE=12
PRESTOP=4
started=$(date +%s)

log() { echo "e2e [$(($(date +%s) - started))s]: $*" >&2; }
fail() {
  log "FAILED: $*"
  if [[ -d "${DIR}/logs" ]]; then
    log "kubelet log (last lines):"; tail -n 25 "${DIR}/logs/kubelet.log" >&2 || true
    k get pods -A -o wide >&2 || true
    k get events -A --sort-by=.lastTimestamp >&2 2>/dev/null | tail -n 25 >&2 || true
    k -n "${NS}" logs "deploy/${RELEASE}" --tail=30 >&2 || true
  fi
  exit 1
}
finish() {
  local rc=$?
  if [[ -n "${EVICTORD_E2E_KEEP:-}" ]]; then
    log "EVICTORD_E2E_KEEP set: the cluster keeps running; stop it with tests/e2e/cluster.sh down"
  else
    "${cluster}" down || true
  fi
  log "run time $(($(date +%s) - started)) s (exit ${rc})"
}
trap finish EXIT

TOOLS=$("${repo}/tests/tools/helm-kubectl.sh")
export TOOLS
k() { "${cluster}" exec "${TOOLS}/kubectl" --kubeconfig "${DIR}/admin.kubeconfig" --request-timeout=30s "$@"; }
h() { "${cluster}" exec "${TOOLS}/helm" --kubeconfig "${DIR}/admin.kubeconfig" "$@"; }
until_ok() { # until_ok WHAT TRIES SLEEP CMD...   (bounded)
  local what=$1 tries=$2 pause=$3 i
  shift 3
  for i in $(seq 1 "${tries}"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep "${pause}"
  done
  fail "timed out waiting for ${what}"
}

log "cluster up"
"${cluster}" up >/dev/null
ctr --address "${DIR}/containerd/containerd.sock" --namespace k8s.io images import "${image_out}.docker.tar" >&2
images=$(ctr --address "${DIR}/containerd/containerd.sock" --namespace k8s.io images ls -q)
grep -qx "${repository}:${tag}" <<<"${images}" || fail "image ${repository}:${tag} not in containerd after the import"
log "cluster ready, image ${repository}:${tag} imported; helm install"

# The evictord pod carries an interceptor no one serves (e2e-hold.evictord.dev): when the drain below
# reaches its priority (system-cluster-critical), its EvictionRequest waits for that interceptor
# (20 minutes) instead of evicting the only webhook replica in the middle of the test.
h install "${RELEASE}" "${repo}/charts/evictord" --namespace "${NS}" --create-namespace \
  --set replicaCount=1 --set hostNetwork=true \
  --set kubernetesAPI.host=127.0.0.1 --set kubernetesAPI.port=6443 \
  --set webhook.url=https://127.0.0.1:18443 \
  --set image.repository="${repository}" --set image.tag="${tag}" --set image.pullPolicy=Never \
  --set containerPorts.webhook=18443 --set containerPorts.probes=18080 \
  --set-string 'podAnnotations.evictord\.dev/eviction-interceptors=e2e-hold.evictord.dev' \
  >&2 || fail "helm install"
k -n "${NS}" rollout status "deploy/${RELEASE}" --timeout=180s >&2 || fail "the Deployment did not become Ready"
log "Deployment Ready (readiness probe /readyz on the node's port 18080)"

# 1. The CA bundle, patched in by evictord at start-up, in every webhook of both configurations.
ca_patched() {
  local kind n
  for kind in validatingwebhookconfigurations mutatingwebhookconfigurations; do
    n=$(k get "${kind}" -l "app.kubernetes.io/instance=${RELEASE}" -o json |
      jq '([.items[].webhooks[] | select((.clientConfig.caBundle // "") == "")] | length), ([.items[].webhooks[]] | length)' | paste -sd' ')
    [[ "${n}" =~ ^0\ [1-9] ]] || return 1
  done
}
until_ok "caBundle in both webhook configurations" 60 1 ca_patched
log "ok: caBundle patched into both webhook configurations"

# A real pod on the node: busybox `sleep` (PID 1, so SIGTERM does nothing and only the grace period
# ends it), with a preStop hook.
k create namespace "${WORK}" >&2
k apply -f - >&2 <<EOF
apiVersion: v1
kind: Pod
metadata: {name: sleeper, namespace: ${WORK}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: ${GRACE}
  containers:
  - name: sleep
    image: localhost/evictord-e2e/busybox:1.35
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
    lifecycle:
      preStop:
        exec: {command: ["/bin/sleep", "${PRESTOP}"]}
EOF
k -n "${WORK}" wait --for=condition=Ready pod/sleeper --timeout=120s >&2 || fail "pod sleeper not Ready"
uid=$(k -n "${WORK}" get pod sleeper -o jsonpath='{.metadata.uid}')
container=$(k -n "${WORK}" get pod sleeper -o jsonpath='{.status.containerStatuses[0].containerID}')
log "pod sleeper running (uid ${uid})"

# 2. kube-apiserver calls evictord (at its webhook URL on the node) for a denied EvictionRequest.
out=$(k create -f - 2>&1 <<EOF
apiVersion: evictord.dev/v1alpha1
kind: EvictionRequest
metadata: {name: not-the-pod-uid, namespace: ${WORK}}
spec:
  target: {pod: {name: sleeper, uid: "${uid}"}}
  requesters: [{name: e2e.evictord.dev}]
EOF
) && fail "the EvictionRequest named not-the-pod-uid was admitted: ${out}"
echo "${out}" >&2
grep -q 'rule E3' <<<"${out}" || fail "no rule E3 denial from the webhook: ${out}"
log "ok: kube-apiserver -> https://127.0.0.1:18443 -> evictord denied the EvictionRequest (rule E3)"

# 3. A NodeMaintenance drains the node.
k apply -f - >&2 <<EOF
apiVersion: evictord.dev/v1alpha1
kind: NodeMaintenance
metadata: {name: e2e-drain}
spec:
  nodeSelector:
    nodeSelectorTerms: [{matchExpressions: [{key: evictord.dev/e2e, operator: In, values: ["true"]}]}]
  stage: Drain
  reason: e2e test
EOF
drain_start=$(date +%s)
cordoned() { [[ "$(k get node e2e-node -o jsonpath='{.spec.unschedulable}')" == true ]]; }
until_ok "node e2e-node cordoned" 60 1 cordoned
log "ok: node cordoned"
deleting() { [[ -n "$(k -n "${WORK}" get pod sleeper -o jsonpath='{.metadata.deletionTimestamp}')" ]]; }
until_ok "the eviction of pod sleeper" 120 0.5 deleting
evicted_at=$(date +%s)
log "pod sleeper is being evicted ($((evicted_at - drain_start)) s after the NodeMaintenance); waiting for the kubelet"
# The EvictionRequest the maintenance created for it (named after the pod's UID), owned by the pod.
evr=$(k -n "${WORK}" get evictionrequest "${uid}" -o jsonpath='{.spec.requesters[*].name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}' 2>&1 || true)
[[ "${evr}" == *nodemaintenance.evictord.dev*" Pod/${uid}" ]] ||
  fail "EvictionRequest ${uid}: want requester nodemaintenance.evictord.dev and owner Pod/${uid}, got: ${evr}"
gone() { ! k -n "${WORK}" get pod sleeper >/dev/null 2>&1; }
until_ok "pod sleeper gone" 120 0.5 gone
gone_at=$(date +%s)
took=$((gone_at - evicted_at))
log "pod sleeper gone ${took} s after its deletion started (preStop ${PRESTOP} s, grace ${GRACE} s)"
[[ ${took} -ge $((GRACE - 2)) ]] || fail "the pod went away after ${took} s: the ${GRACE} s grace period was not honoured"
# The kubelet's own account (v1.20, --v=3): the preStop hook ran, then the container was stopped with
# what was left of the grace period (GRACE - PRESTOP seconds, give or take one).
grep -F "Running preStop hook for container \"${container}\"" "${DIR}/logs/kubelet.log" >&2 ||
  fail "the kubelet log does not show the preStop hook of ${container}"
kill_line=$(grep -F "Killing container \"${container}\" with a" "${DIR}/logs/kubelet.log" | tail -n 1)
echo "${kill_line}" >&2
left=$(sed -n 's/.* with a \([0-9]*\) second grace period.*/\1/p' <<<"${kill_line}")
[[ -n "${left}" && ${left} -ge $((GRACE - PRESTOP - 1)) && ${left} -le $((GRACE - PRESTOP)) ]] ||
  fail "the kubelet did not stop ${container} with the rest of its grace period: ${kill_line}"
log "ok: NodeMaintenance drained the node through EvictionRequest ${uid}; the kubelet honoured preStop and grace period"
# kube-controller-manager's garbage collector removes the request once its pod is gone.
request_collected() { ! k -n "${WORK}" get evictionrequest "${uid}" >/dev/null 2>&1; }
until_ok "the garbage collection of EvictionRequest ${uid}" 60 1 request_collected
log "ok: the garbage collector deleted EvictionRequest ${uid} after its pod ($(($(date +%s) - gone_at)) s)"

# Traffic stayed on loopback: the node's only address is 127.0.0.1, and no TCP socket in the
# cluster's network namespace has a peer outside 127.0.0.0/8 (no ClusterIP was dialled).
addrs=$(k get node e2e-node -o jsonpath='{range .status.addresses[*]}{.type}={.address} {end}')
[[ "${addrs}" == *"InternalIP=127.0.0.1"* ]] || fail "node addresses: ${addrs}"
peers=$("${cluster}" exec ss -Htn state all | awk '{print $5}' | sed 's/:[0-9*]*$//' | sort -u)
outside=$(grep -Ev '^(127\.[0-9.]+|\[::ffff:127\.[0-9.]+\]|\*|0\.0\.0\.0|\[::\]|\[::1\])$' <<<"${peers}" || true)
grep -qx '127.0.0.1' <<<"${peers}" || fail "no TCP connection seen in the cluster's network namespace: ${peers}"
[[ -z "${outside}" ]] || fail "TCP peers outside loopback in the cluster's network namespace: ${outside}"
log "ok: node address ${addrs}; every TCP peer in the cluster's network namespace is on 127.0.0.0/8"

# 4. helm uninstall leaves no webhook configuration behind.
h uninstall "${RELEASE}" --namespace "${NS}" --wait --timeout 120s >&2 || fail "helm uninstall"
left=$(k get validatingwebhookconfigurations,mutatingwebhookconfigurations -o name)
[[ -z "${left}" ]] || fail "webhook configurations left after helm uninstall: ${left}"
log "ok: helm uninstall left no webhook configuration"
log "PASSED"
