#!/usr/bin/env bash
# Install the system parts the test suite needs on a fresh Debian machine (run as root):
#   chromium     the real browser the JupyterLab tests drive (never `playwright install`)
#   fonts-dejavu-core  a font for chromium (its font is only a Recommends: without one, text has no glyphs)
#   docker.io    a Docker engine for the MatrixLab lifecycle tests
#   debootstrap  builds the local base image (Docker Hub is not reachable)
#   bubblewrap   OS isolation of the default subprocess backend
#   libseccomp2  its seccomp filter (built through pyseccomp); python3-seccomp for the system python
#   passt slirp4netns  user-mode networking: a network-on run gets egress, not the host
#   util-linux   unshare, setpriv (a run drops to nobody), prlimit
#   uidmap       newuidmap/newgidmap: a non-root server's runs drop their groups (docker!)
#   nodejs       JavaScript snippets and the lab extension build
#   (and the shell linter `make lint` checks the launch chain's staging script with)
# Idempotent: packages already installed are skipped quickly.
set -euo pipefail

packages=(chromium fonts-dejavu-core docker.io debootstrap bubblewrap iptables libseccomp2 python3-seccomp
  passt slirp4netns util-linux uidmap iproute2 shellcheck)
# node may come from elsewhere than Debian's package: only install it when there is none.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if ((${#missing[@]})); then
  echo "setup-system: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup-system: all system packages present"
fi
