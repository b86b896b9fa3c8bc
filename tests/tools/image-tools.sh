#!/usr/bin/env bash
# Ensures the tools `make image` assembles the container image with, from Debian's packages:
# umoci (OCI image layout: new image, add a layer, set the config) and skopeo (copy the layout into
# an oci-archive and a docker-archive). Nothing is pulled from a container registry.
# Progress goes to stderr; nothing on stdout.
set -euo pipefail

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

if command -v umoci >/dev/null && command -v skopeo >/dev/null; then
  exit 0
fi
echo "image-tools: apt-get install umoci skopeo" >&2
as_root apt-get update -qq >&2
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends umoci skopeo >&2
