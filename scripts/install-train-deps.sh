#!/usr/bin/env bash
# Installs what train/ needs, on top of install-deps.sh, from Debian's archive only: PyTorch, numpy and
# matplotlib for the trainer, OpenBLAS (Debian's PyTorch otherwise multiplies with the reference BLAS, ~40x
# slower), and the packages whose text the demo model learns from (WordNet, the King James Bible with its
# `bible` reader, fortunes).  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for pkg in python3-torch python3-numpy python3-matplotlib libopenblas0-pthread wordnet-base bible-kjv bible-kjv-text \
  fortunes; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
bash scripts/apt-install.sh "${missing[@]}"
