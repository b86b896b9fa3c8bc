#!/usr/bin/env bash
# `make image-check`: runs the image built by `make image` under runc from the image's own root
# filesystem — read-only, as the image's user (65532), all capabilities dropped, host network — and
# checks that `evictord serve` (offline mode: no cluster) answers /readyz and the webhook over TLS.
#
#   tests/tools/image-check.sh OUT     (OUT as for tests/tools/image.sh: reads OUT.oci.tar)
set -euo pipefail

out=$1
probe=${IMAGE_CHECK_PROBE_PORT:-18080} webhook=${IMAGE_CHECK_WEBHOOK_PORT:-18443}
command -v runc >/dev/null || { echo "image-check: runc is needed (apt-get install runc)" >&2; exit 1; }
command -v jq >/dev/null || { echo "image-check: jq is needed (apt-get install jq)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/evictord-image-check.XXXXXX")
id="evictord-image-check-$$"
cleanup() {
  runc delete --force "${id}" >/dev/null 2>&1 || true
  rm -rf "${work}"
}
trap cleanup EXIT

mkdir -p "${work}/layout"
tar -xf "${out}.oci.tar" -C "${work}/layout"
tag=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "${work}/layout/index.json")
umoci unpack --image "${work}/layout:${tag}" "${work}/bundle" >/dev/null

# The runtime spec umoci generated from the image config, made like the chart's pod: read-only root,
# a tmpfs on /tmp, no capabilities, the host's network namespace (nothing to set up), no terminal.
jq --arg p "${probe}" --arg w "${webhook}" '
  .root.readonly = true
  | .process.terminal = false
  | .process.args = ["/evictord", "serve", "--webhook-addr=127.0.0.1:\($w)", "--probe-addr=127.0.0.1:\($p)", "--cert-dir=/tmp/certs"]
  | .process.capabilities = {bounding: [], effective: [], inheritable: [], permitted: [], ambient: []}
  | .process.noNewPrivileges = true
  | .linux.namespaces |= map(select(.type != "network"))
  | .mounts += [{destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "size=16m", "mode=1777"]}]
' "${work}/bundle/config.json" >"${work}/config.json"
mv "${work}/config.json" "${work}/bundle/config.json"
echo "image-check: user $(jq -c .process.user "${work}/bundle/config.json"), readonly root $(jq .root.readonly "${work}/bundle/config.json")" >&2

runc run --detach --bundle "${work}/bundle" "${id}" </dev/null >"${work}/stdout" 2>"${work}/stderr"
ok=0
for _ in $(seq 1 50); do # at most ~10 s
  if curl -fsS "http://127.0.0.1:${probe}/readyz" >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.2
done
if [[ ${ok} -ne 1 ]]; then
  echo "image-check: /readyz did not answer; container output:" >&2
  cat "${work}/stdout" "${work}/stderr" >&2
  runc list >&2 || true
  exit 1
fi
echo "image-check: /readyz: $(curl -fsS "http://127.0.0.1:${probe}/readyz")" >&2
# The webhook over TLS from inside the read-only image (certificates generated into /tmp/certs).
code=$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:${webhook}/validate/pods" \
  -H 'content-type: application/json' -d '{}')
echo "image-check: webhook HTTPS answered ${code}" >&2
[[ "${code}" =~ ^[2-4][0-9][0-9]$ ]]
uid=$(awk '/^Uid:/{print $2}' "/proc/$(runc state "${id}" | jq .pid)/status")
echo "image-check: process uid ${uid}" >&2
[[ "${uid}" == 65532 ]]
echo "image-check: ok" >&2
