#!/usr/bin/env bash
# Builds a single-layer container image from a root filesystem directory, on an empty base
# (scratch), with umoci, and writes it as an OCI archive and a docker archive with skopeo.
# Nothing is pulled.
#
#   tests/tools/oci-image.sh ROOTFS REF OUT [umoci config flags...]
#
# ROOTFS  directory that becomes the image's root filesystem (ownership and modes are kept)
# REF     image reference, e.g. ghcr.io/evictord/evictord:0.1.0
# OUT     output path prefix: writes OUT.oci.tar (oci-archive, ref.name REF) and OUT.docker.tar
#         (docker-archive, RepoTags [REF]; what `ctr images import`, `docker load` and
#         `kind load image-archive` take)
# The rest is passed to `umoci config`, e.g. --config.user 65532:65532 --config.entrypoint /evictord.
set -euo pipefail

rootfs=$1 ref=$2 out=$3
shift 3
tag=${ref##*:}
[[ "${tag}" != "${ref}" && "${tag}" != */* ]] || { echo "oci-image: ${ref}: the reference needs a :tag" >&2; exit 2; }

layout="${out}.layout"
rm -rf "${layout}" "${out}.oci.tar" "${out}.docker.tar"
mkdir -p "$(dirname "${out}")"
umoci init --layout "${layout}"
umoci new --image "${layout}:${tag}"
umoci insert --image "${layout}:${tag}" --history.created_by "evictord tests/tools/oci-image.sh" "${rootfs}" /
umoci config --image "${layout}:${tag}" --os linux --architecture amd64 \
  --config.workingdir / --config.env PATH=/usr/local/bin:/usr/bin:/bin "$@"
umoci gc --layout "${layout}"
skopeo --insecure-policy copy --quiet "oci:${layout}:${tag}" "oci-archive:${out}.oci.tar:${ref}"
skopeo --insecure-policy copy --quiet "oci:${layout}:${tag}" "docker-archive:${out}.docker.tar:${ref}"
rm -rf "${layout}"
echo "oci-image: ${ref} -> ${out}.oci.tar, ${out}.docker.tar" >&2
