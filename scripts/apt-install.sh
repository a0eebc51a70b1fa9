#!/usr/bin/env bash
# Install the Debian packages named as arguments that are not installed yet (scripts/setup.sh,
# `make docs-setup`, `make scale-setup`). Nothing to do costs a dpkg query per package; else
# it updates the package lists and installs, through sudo when not run as root.
set -euo pipefail
missing=""
for pkg in "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
echo "apt-install: installing system packages:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "apt-install: need root or sudo to install:$missing" >&2
    exit 1
  }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
