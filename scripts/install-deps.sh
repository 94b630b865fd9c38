#!/usr/bin/env bash
# Installs the Debian packages k3 needs to build and test. Idempotent: packages that are
# already present are not touched, and apt is only asked when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev libpng-dev libjpeg-dev
  liburing-dev libedit-dev libseccomp-dev libtomlplusplus-dev
  openmpi-bin libopenmpi-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  bash "$(dirname "$0")/apt-install.sh" "${missing[@]}"
fi
