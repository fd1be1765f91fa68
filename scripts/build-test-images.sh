#!/usr/bin/env bash
# Build the local Docker images the Docker tests use, with no Docker Hub:
#   gitpilot-test/bookworm-python:latest            debootstrap'ed Debian bookworm (minbase) + python3
#   gitpilot-test/matrixlab-runner-standin:latest   that image running the Runner stand-in on port 8000
# The Debian mirror is the one apt already uses (override with DEBIAN_MIRROR=URL).
# Images already present are kept; FORCE=1 rebuilds them. Needs root, debootstrap and a Docker engine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${BASE_IMAGE:-gitpilot-test/bookworm-python:latest}"
runner="${RUNNER_IMAGE:-gitpilot-test/matrixlab-runner-standin:latest}"
suite="${DEBIAN_SUITE:-bookworm}"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

apt_mirror() {
    # First Debian archive URI apt is configured with (deb822 or one-line format), security excluded.
    local uri
    uri="$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -v security | sed -E 's/^URIs:[[:space:]]*//; s/^deb (\[[^]]*\] )?//' \
        | awk '{print $1}' | head -n 1 || true)"
    echo "${uri}"
}

if ! docker info >/dev/null 2>&1; then
    echo "build-test-images: no Docker engine answers (run scripts/start-dockerd.sh)" >&2
    exit 1
fi

if [ "${FORCE:-0}" = 1 ] || ! have_image "$base"; then
    command -v debootstrap >/dev/null || { echo "build-test-images: apt-get install -y debootstrap" >&2; exit 1; }
    mirror="${DEBIAN_MIRROR:-$(apt_mirror)}"
    [ -n "$mirror" ] || { echo "build-test-images: no apt mirror found; set DEBIAN_MIRROR" >&2; exit 1; }
    rootfs="$(mktemp -d /tmp/gitpilot-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    echo "build-test-images: debootstrap $suite (minbase + python3) from the apt mirror"
    debootstrap --variant=minbase --include=python3 "$suite" "$rootfs" "$mirror" >/tmp/gitpilot-debootstrap.log 2>&1 \
        || { tail -n 20 /tmp/gitpilot-debootstrap.log >&2; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import --change 'CMD ["python3"]' - "$base" >/dev/null
    echo "build-test-images: imported $base"
else
    echo "build-test-images: $base already present"
fi

# The stand-in's files (its image is rebuilt when their hash changes).
standin_sha="$(cd "$here/tests/support" && cat __init__.py runner_standin.py standin_runs.py standin_docker.py \
    | sha256sum | cut -c1-64)"
if [ "${FORCE:-0}" = 1 ] || ! have_image "$runner" \
    || [ "$(docker image inspect -f '{{index .Config.Labels "standin.sha"}}' "$runner")" != \
         "$standin_sha" ]; then
    # Output (incl. the legacy builder's deprecation notice) goes to a log shown only on failure.
    docker build --quiet --build-arg "BASE=$base" \
        --label "standin.sha=$standin_sha" \
        -t "$runner" -f "$here/docker/runner-standin/Dockerfile" "$here/tests/support" \
        >/tmp/gitpilot-docker-build.log 2>&1 || { cat /tmp/gitpilot-docker-build.log >&2; exit 1; }
    # Drop the stand-in images this rebuild left dangling (only ours: they carry the label).
    docker image prune -f --filter "label=standin.sha" >/dev/null || true
    echo "build-test-images: built $runner"
else
    echo "build-test-images: $runner already present and current"
fi
