#!/usr/bin/env bash
# `make image`: the evictord container image, built here without pulling anything.
#
#   tests/tools/image.sh BINARY REF OUT
#
# The release binary is linked against glibc (the musl target cannot be installed offline), so the
# image carries it plus exactly the shared libraries `ldd` names (libc, libm, libgcc_s and the
# dynamic loader) from this machine, an /etc/passwd and /etc/group naming the distroless "nonroot"
# user (65532), the CA bundle (for OTLP endpoints) and an empty /tmp — on an empty base. It runs as
# 65532:65532 and writes nothing outside /tmp (the chart mounts an emptyDir there and makes the
# root filesystem read-only).
set -euo pipefail

bin=$1 ref=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
"${here}/image-tools.sh"

rootfs="${out}.rootfs"
rm -rf "${rootfs}"
mkdir -p "${rootfs}/etc" "${rootfs}/tmp"
chmod 1777 "${rootfs}/tmp"
install -m 0755 "${bin}" "${rootfs}/evictord"
strip "${rootfs}/evictord"
# The shared libraries the binary needs, at the paths the loader looks for them.
ldd "${bin}" | awk '/=> \//{print $3} /^\t\//{print $1}' | while read -r lib; do
  mkdir -p "${rootfs}$(dirname "${lib}")"
  cp -L "${lib}" "${rootfs}${lib}"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"${rootfs}/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"${rootfs}/etc/group"
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  mkdir -p "${rootfs}/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "${rootfs}/etc/ssl/certs/"
fi
# Check that the binary runs from this root filesystem alone (loader and libraries included).
chroot "${rootfs}" /evictord --version >&2

"${here}/oci-image.sh" "${rootfs}" "${ref}" "${out}" \
  --config.user 65532:65532 --config.entrypoint /evictord --config.cmd serve \
  --config.exposedports 8443/tcp --config.exposedports 8080/tcp \
  --config.label org.opencontainers.image.title=evictord \
  --config.label "org.opencontainers.image.version=${ref##*:}" \
  --config.label org.opencontainers.image.licenses=Apache-2.0
rm -rf "${rootfs}"
