#!/usr/bin/env bash
# Build the pod image of the host-shape suite (docker/pod/Dockerfile) from the project's wheel:
#   gitpilot-test/pod:latest   the local debootstrap image + python3-venv + the wheel and its deps
# Needs a Docker engine, the base image (scripts/build-test-images.sh) and the lab extension
# already built (make run / make test do it), so the wheel build does not rebuild it.
# The dependencies are resolved for the image's Python (Debian's, not this machine's) and kept
# in a cache folder keyed by the wheel's requirements, so a warm build only swaps the wheel.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${BASE_IMAGE:-gitpilot-test/bookworm-python:latest}"
image="${POD_IMAGE:-gitpilot-test/pod:latest}"
python="${PYTHON:-$here/.venv/bin/python}"
cache="${POD_DEPS_CACHE:-/var/tmp/gitpilot-pod-deps}"

docker image inspect "$base" >/dev/null 2>&1 \
    || { echo "build-pod-image: no $base (run scripts/build-test-images.sh)" >&2; exit 1; }
[ -f "$here/gitpilot_jupyter/labextension/static/style.js" ] \
    || { echo "build-pod-image: the lab extension is not built (make run or make test)" >&2; exit 1; }

context="$(mktemp -d /tmp/gitpilot-pod-context.XXXXXX)"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/project" "$context/deps"

# The wheel: the build hook skips the lab extension, which is already built. A lab extension
# build can leave an install.json in the package's copy too (the Makefile removes it before its
# installs): with it the wheel would hold that file twice and hatchling refuses to build.
rm -f "$here/gitpilot_jupyter/labextension/install.json"
(cd "$here" && "$python" -m pip wheel --quiet --no-deps -w "$context/project" .)
wheel="$(ls "$context"/project/*.whl)"

image_python="$(docker run --rm --network none "$base" python3 -c \
    'import platform; print(platform.python_version())')"
# The wheel's own requirements (read with Python: unzip is not on every machine).
requires="$("$python" -c 'import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
lines = wheel.read(meta).decode().splitlines()
print("\n".join(sorted(l for l in lines if l.startswith("Requires-Dist:") and "extra ==" not in l)))' "$wheel")"
key="$(printf '%s\n%s\n' "$image_python" "$requires" | sha256sum | cut -c1-16)"
if [ ! -f "$cache/$key/.complete" ]; then
    rm -rf "${cache:?}/$key"
    mkdir -p "$cache/$key"
    "$python" -m pip download --quiet --only-binary=:all: --python-version "$image_python" \
        -d "$cache/$key" "$wheel" >/tmp/gitpilot-pod-deps.log 2>&1 \
        || { cat /tmp/gitpilot-pod-deps.log >&2; exit 1; }
    rm -f "$cache/$key"/gitpilot_jupyter-*.whl
    touch "$cache/$key/.complete"
    echo "build-pod-image: dependencies resolved for Python $image_python"
fi
cp "$cache/$key"/*.whl "$context/deps/"

# --network host: apt reaches its mirror during the build; the image itself runs with none.
docker build --quiet --network host --build-arg "BASE=$base" -t "$image" \
    -f "$here/docker/pod/Dockerfile" "$context" >/tmp/gitpilot-pod-build.log 2>&1 \
    || { cat /tmp/gitpilot-pod-build.log >&2; exit 1; }
echo "build-pod-image: built $image (Python $image_python)"
