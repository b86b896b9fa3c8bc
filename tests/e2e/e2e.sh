#!/usr/bin/env bash
# `make e2e`: the chart on a real two-node cluster with kubelets (tests/e2e/cluster.sh).
#
#   tests/e2e/e2e.sh IMAGE_OUT REPOSITORY TAG     (IMAGE_OUT as written by `make image`)
#
# 1. starts the cluster and imports the evictord image (IMAGE_OUT.docker.tar) into both containerds;
# 2. `helm install`s the chart (one replica on node e2e-node-2, hostNetwork, the API server address
#    and the webhook URL https://127.0.0.1:18443 set explicitly — on a node at 127.0.0.1 no Service
#    can have endpoints, see cluster.sh —, image pullPolicy Never, and the node agent on e2e-node
#    with the kubelet's static pod directory) and waits for the Deployment and the DaemonSet to be
#    Ready through their readiness probes;
# 3. checks: evictord patched its CA into both webhook configurations; kube-apiserver calls the
#    webhook and `kubectl` shows its denial (rule E3); a NodeMaintenance in stage Drain with the
#    default plan cordons e2e-node and drains, in plan order, a plain pod (which the kubelet stops
#    honouring its preStop hook and grace period), a DaemonSet pod (daemonset.apps.k8s.io; none
#    runs there again until Complete) and a static pod, which leaves in the
#    Static stage through the node agent; the kubelet restarted during the maintenance does not
#    start the static pod again; after Complete it runs again; a timeline shows each pod's stop and
#    start; `helm uninstall` leaves no webhook configuration;
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
STATIC_GRACE=5
NODE=e2e-node
STATIC=static-sleeper
STATIC_POD="${STATIC}-${NODE}"
MANIFESTS="${DIR}/kubelet/manifests"
started=$(date +%s)

log() { echo "e2e [$(($(date +%s) - started))s]: $*" >&2; }
fail() {
  log "FAILED: $*"
  if [[ -d "${DIR}/logs" ]]; then
    log "kubelet log (last lines):"; tail -n 25 "${DIR}/logs/kubelet.log" >&2 || true
    k get pods -A -o wide >&2 || true
    k get events -A --sort-by=.lastTimestamp >&2 2>/dev/null | tail -n 25 >&2 || true
    k -n "${NS}" logs "deploy/${RELEASE}" --tail=30 >&2 || true
    k -n "${NS}" logs "ds/${RELEASE}-node-agent" --tail=30 >&2 || true
  fi
  exit 1
}
finish() {
  local rc=$?
  [[ -z "${timeline_watch:-}" ]] || kill "${timeline_watch}" 2>/dev/null || true
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
for sock in containerd containerd-2; do
  ctr --address "${DIR}/${sock}/containerd.sock" --namespace k8s.io images import "${image_out}.docker.tar" >&2
  images=$(ctr --address "${DIR}/${sock}/containerd.sock" --namespace k8s.io images ls -q)
  grep -qx "${repository}:${tag}" <<<"${images}" || fail "image ${repository}:${tag} not in ${sock} after the import"
done
log "cluster ready, image ${repository}:${tag} imported; helm install"

# evictord runs on e2e-node-2, which no maintenance selects: the drain of e2e-node below goes through
# its whole default plan (a system-cluster-critical evictord pod on e2e-node would be its own
# drain's Default target, and the only webhook replica). The node agent runs on e2e-node, with the
# kubelet's static pod directory.
h install "${RELEASE}" "${repo}/charts/evictord" --namespace "${NS}" --create-namespace \
  --set replicaCount=1 --set hostNetwork=true \
  --set kubernetesAPI.host=127.0.0.1 --set kubernetesAPI.port=6443 \
  --set webhook.url=https://127.0.0.1:18443 \
  --set image.repository="${repository}" --set image.tag="${tag}" --set image.pullPolicy=Never \
  --set containerPorts.webhook=18443 --set containerPorts.probes=18080 \
  --set-string 'nodeSelector.evictord\.dev/e2e-role=control' \
  --set nodeAgent.enabled=true --set nodeAgent.staticPodPath="${MANIFESTS}" \
  --set nodeAgent.hostNetwork=true --set nodeAgent.probePort=18081 --set nodeAgent.checkInterval=5s \
  --set-string 'nodeAgent.nodeSelector.evictord\.dev/e2e=true' \
  >&2 || fail "helm install"
k -n "${NS}" rollout status "deploy/${RELEASE}" --timeout=180s >&2 || fail "the Deployment did not become Ready"
log "Deployment Ready (readiness probe /readyz on e2e-node-2's port 18080)"
k -n "${NS}" rollout status "ds/${RELEASE}-node-agent" --timeout=180s >&2 || fail "the node agent did not become Ready"
agent=$(k -n "${NS}" get pods -l app.kubernetes.io/component=node-agent -o jsonpath='{.items[0].metadata.name}')
announced=$(k get node "${NODE}" -o jsonpath='{.metadata.annotations.evictord\.dev/node-agent}')
[[ "${announced}" == "${agent}" ]] || fail "node ${NODE} announces node agent '${announced}', not ${agent}"
log "ok: node agent ${agent} Ready (readiness probe /readyz on ${NODE}'s port 18081) and announced on node ${NODE}"

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
  nodeSelector: {evictord.dev/e2e: "true"}
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

# A DaemonSet pod and a static pod (busybox `sleep`) on the node. Neither declares an interceptor:
# evictord gives them daemonset.apps.k8s.io and, the node announcing its agent, kubelet.k8s.io.
k apply -f - >&2 <<EOF
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: e2e-ds, namespace: ${WORK}}
spec:
  selector: {matchLabels: {app: e2e-ds}}
  template:
    metadata: {labels: {app: e2e-ds}}
    spec:
      hostNetwork: true
      nodeSelector: {evictord.dev/e2e: "true"}
      terminationGracePeriodSeconds: 3
      containers:
      - name: sleep
        image: localhost/evictord-e2e/busybox:1.35
        imagePullPolicy: Never
        command: ["/bin/sleep", "3600"]
EOF
cat >"${MANIFESTS}/${STATIC}.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: ${STATIC}
  namespace: ${WORK}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: ${STATIC_GRACE}
  containers:
  - name: sleep
    image: localhost/evictord-e2e/busybox:1.35
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
EOF
static_manifest=$(cat "${MANIFESTS}/${STATIC}.yaml")
k -n "${WORK}" rollout status ds/e2e-ds --timeout=120s >&2 || fail "DaemonSet e2e-ds not Ready"
ds_pod=$(k -n "${WORK}" get pods -l app=e2e-ds -o jsonpath='{.items[0].metadata.name}')
mirror_ready() { k -n "${WORK}" wait --for=condition=Ready "pod/${STATIC_POD}" --timeout=1s; }
until_ok "static pod ${STATIC_POD} Ready" 120 1 mirror_ready
static_uid=$(k -n "${WORK}" get pod "${STATIC_POD}" -o jsonpath='{.metadata.uid}')
log "DaemonSet pod ${ds_pod} and static pod ${STATIC_POD} running on ${NODE}"

# The timeline: a watch of the pods of ${WORK} on ${NODE} (kubectl --watch, so each change arrives
# as it happens); each change of a pod (pending, running, stopping, gone) with the time it arrived.
mkfifo "${DIR}/timeline.fifo"
nsenter --net="/run/netns/evictord-e2e" -- "${TOOLS}/kubectl" --kubeconfig "${DIR}/admin.kubeconfig" \
  -n "${WORK}" get pods --field-selector "spec.nodeName=${NODE}" --watch --output-watch-events \
  -o jsonpath='{.type}|{.object.metadata.name}|{.object.status.phase}|{.object.metadata.deletionTimestamp}{"\n"}' \
  >"${DIR}/timeline.fifo" 2>/dev/null &
timeline_watch=$!
(
  declare -A seen
  while IFS='|' read -r type name phase deleting; do
    t=$(date +%s.%N)
    [[ -n "${name}" ]] || continue
    state=${phase,,}
    [[ -z "${deleting}" ]] || state=stopping
    [[ "${type}" != DELETED ]] || state=gone
    [[ "${seen[${name}]:-}" == "${state}" ]] || echo "${t} ${name} ${state}"
    seen[${name}]=${state}
  done <"${DIR}/timeline.fifo"
) >"${DIR}/timeline.log" &
timeline_reader=$!
# when POD STATE: the first time the timeline saw it (epoch seconds), empty if never.
when() { awk -v p="$1" -v s="$2" '$2 == p && $3 == s {print $1; exit}' "${DIR}/timeline.log"; }

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
drain_start=$(date +%s.%N)
echo "${drain_start} e2e-drain created" >>"${DIR}/timeline.extra"
cordoned() { [[ "$(k get node e2e-node -o jsonpath='{.spec.unschedulable}')" == true ]]; }
until_ok "node e2e-node cordoned" 60 1 cordoned
log "ok: node cordoned"
deleting() { [[ -n "$(k -n "${WORK}" get pod sleeper -o jsonpath='{.metadata.deletionTimestamp}')" ]]; }
until_ok "the eviction of pod sleeper" 120 0.5 deleting
evicted_at=$(date +%s)
log "pod sleeper is being evicted ($((evicted_at - ${drain_start%.*})) s after the NodeMaintenance); waiting for the kubelet"
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

# 4. The plan goes on: DaemonSet pods, then the static pod, whose manifest the node agent moves out
#    of the kubelet's directory; the kubelet stops it and deletes its mirror pod.
held="${MANIFESTS}/.evictord-held/manifests/${STATIC}.yaml"
static_held() { [[ -f "${held}" && ! -e "${MANIFESTS}/${STATIC}.yaml" ]]; }
until_ok "the node agent holding ${STATIC}.yaml" 180 0.5 static_held
# When it was held, from the agent's record (written before the move).
held_at=$(date -d "$(jq -r .heldAt "${MANIFESTS}/.evictord-held/records/${STATIC}.yaml.json")" +%s.%N)
echo "${held_at} ${STATIC_POD} manifest-held-by-the-node-agent" >>"${DIR}/timeline.extra"
log "ok: ${STATIC}.yaml moved to ${held}"
message=$(k -n "${WORK}" get evictionrequest "${static_uid}" \
  -o jsonpath='{.status.interceptors[?(@.name=="kubelet.k8s.io")].message}')
[[ "${message}" == "${STATIC} is terminating the pod due to node maintenance e2e-drain (e2e test)"* ]] ||
  fail "kubelet.k8s.io's message: ${message}"
log "ok: kubelet.k8s.io says: ${message}"
static_container_running() {
  local ids
  ids=$(ctr --address "${DIR}/containerd/containerd.sock" --namespace k8s.io containers ls -q \
    "labels.\"io.kubernetes.pod.name\"==${STATIC_POD}" 2>/dev/null)
  [[ -n "${ids}" ]] || return 1
  ctr --address "${DIR}/containerd/containerd.sock" --namespace k8s.io tasks ls 2>/dev/null |
    awk '$3 == "RUNNING" {print $1}' | grep -qxF -f <(echo "${ids}")
}
static_gone() { ! k -n "${WORK}" get pod "${STATIC_POD}" >/dev/null 2>&1 && ! static_container_running; }
until_ok "static pod ${STATIC_POD} stopped and its mirror pod gone" 120 0.5 static_gone
log "ok: static pod ${STATIC_POD} stopped by the kubelet, its mirror pod gone"
drained() { [[ "$(k get nodemaintenance e2e-drain -o jsonpath='{.status.conditions[?(@.type=="Drained")].status}')" == True ]]; }
until_ok "NodeMaintenance e2e-drain Drained" 120 1 drained
log "ok: NodeMaintenance e2e-drain Drained"

# The order: the static pod's manifest was held after the plain pod and the DaemonSet pod (removed
# by daemonset.apps.k8s.io) were gone (the timeline sees a pod gone when the watch event arrives, never before: a gone time before the
# hold, which the agent records before it moves the manifest, is a true order).
sleep 1
sleeper_gone=$(when sleeper gone)
[[ -n "${sleeper_gone}" && -n "$(when "${STATIC_POD}" gone)" ]] || fail "timeline incomplete: $(cat "${DIR}/timeline.log")"
awk -v a="${sleeper_gone}" -v b="${held_at}" 'BEGIN {exit !(a < b)}' ||
  fail "the static pod was held before the plain pod was gone"
ds_gone=$(when "${ds_pod}" gone)
[[ -n "${ds_gone}" ]] || fail "DaemonSet pod ${ds_pod} did not leave: $(cat "${DIR}/timeline.log")"
awk -v a="${ds_gone}" -v b="${held_at}" 'BEGIN {exit !(a < b)}' ||
  fail "the static pod was held before the DaemonSet pod was gone"
log "ok: plan order: plain pod, DaemonSet pod, static pod"

# 5. The kubelet restarted during the maintenance does not start the static pod: its manifest is not
#    in the kubelet's directory. Watched for 20 s (four of its 5 s directory checks).
echo "$(date +%s.%N) kubelet(${NODE}) restarting" >>"${DIR}/timeline.extra"
"${cluster}" restart-kubelet >&2 || fail "restarting the kubelet of ${NODE}"
echo "$(date +%s.%N) kubelet(${NODE}) restarted" >>"${DIR}/timeline.extra"
node_ready() { k wait --for=condition=Ready "node/${NODE}" --timeout=1s; }
until_ok "node ${NODE} Ready after the kubelet restart" 120 1 node_ready
for i in $(seq 1 40); do
  static_gone || fail "the static pod started again during the maintenance, after the kubelet restart"
  sleep 0.5
done
grep -q "Watching path \"${MANIFESTS}\"" "${DIR}/logs/kubelet.log" || fail "the restarted kubelet does not read ${MANIFESTS}"
log "ok: kubelet restarted during the maintenance; static pod ${STATIC_POD} stays down (20 s)"

# 6. Complete: the node agent puts the manifest back, the kubelet starts the static pod again.
k patch nodemaintenance e2e-drain --type merge -p '{"spec":{"stage":"Complete"}}' >&2
complete_ns=$(date +%s.%N)
complete_at=${complete_ns%.*}
echo "${complete_ns} e2e-drain Complete" >>"${DIR}/timeline.extra"
restored() { [[ "$(cat "${MANIFESTS}/${STATIC}.yaml" 2>/dev/null)" == "${static_manifest}" && ! -e "${held}" ]]; }
until_ok "${STATIC}.yaml back in the kubelet's directory" 120 0.5 restored
echo "$(date +%s.%N) ${STATIC_POD} manifest-back-(seen)" >>"${DIR}/timeline.extra"
until_ok "static pod ${STATIC_POD} Ready again" 120 1 mirror_ready
static_container_running || fail "the static pod's container is not running after Complete"
log "ok: after Complete the manifest is back, unchanged, and static pod ${STATIC_POD} runs again ($(($(date +%s) - complete_at)) s)"
# While in Drain, no pod of the DaemonSet ran on the node again (the maintenance taint); after
# Complete one does.
early=$(awk -v t="${complete_ns}" -v p="${ds_pod}" '$2 ~ /^e2e-ds-/ && $2 != p && $1 < t' "${DIR}/timeline.log")
[[ -z "${early}" ]] || fail "a DaemonSet pod came back during the maintenance: ${early}"
ds_back() { [[ -n "$(k -n "${WORK}" get pods -l app=e2e-ds --field-selector status.phase=Running -o name)" ]]; }
until_ok "a DaemonSet pod back on ${NODE}" 120 1 ds_back
log "ok: no DaemonSet pod on ${NODE} during the maintenance; one is back after Complete"
sleep 1
kill "${timeline_watch}" 2>/dev/null || true
wait "${timeline_reader}" || true
timeline_watch=""
log "timeline (seconds after the NodeMaintenance was created; pods of ${WORK} on ${NODE}):"
sort -n "${DIR}/timeline.log" "${DIR}/timeline.extra" |
  awk -v t0="${drain_start}" '{printf "  %+7.1f s  %-28s %s\n", $1 - t0, $2, $3}' >&2

# Traffic stayed on loopback: the node's only address is 127.0.0.1, and no TCP socket in the
# cluster's network namespace has a peer outside 127.0.0.0/8 (no ClusterIP was dialled).
addrs=$(k get node e2e-node -o jsonpath='{range .status.addresses[*]}{.type}={.address} {end}')
[[ "${addrs}" == *"InternalIP=127.0.0.1"* ]] || fail "node addresses: ${addrs}"
peers=$("${cluster}" exec ss -Htn state all | awk '{print $5}' | sed 's/:[0-9*]*$//' | sort -u)
outside=$(grep -Ev '^(127\.[0-9.]+|\[::ffff:127\.[0-9.]+\]|\*|0\.0\.0\.0|\[::\]|\[::1\])$' <<<"${peers}" || true)
grep -qx '127.0.0.1' <<<"${peers}" || fail "no TCP connection seen in the cluster's network namespace: ${peers}"
[[ -z "${outside}" ]] || fail "TCP peers outside loopback in the cluster's network namespace: ${outside}"
log "ok: node address ${addrs}; every TCP peer in the cluster's network namespace is on 127.0.0.0/8"

# 7. helm uninstall leaves no webhook configuration behind.
h uninstall "${RELEASE}" --namespace "${NS}" --wait --timeout 120s >&2 || fail "helm uninstall"
left=$(k get validatingwebhookconfigurations,mutatingwebhookconfigurations -o name)
[[ -z "${left}" ]] || fail "webhook configurations left after helm uninstall: ${left}"
log "ok: helm uninstall left no webhook configuration"
log "PASSED"
