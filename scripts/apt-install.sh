#!/usr/bin/env bash
# apt-install.sh PACKAGE...: installs the given Debian packages (as root, or through sudo), quietly.
# The callers (install-deps.sh, install-test-deps.sh) decide what is missing.
set -euo pipefail
[ $# -gt 0 ] || exit 0
echo "k3: installing Debian packages: $*" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "k3: need root (or sudo) to install: $*" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
