#!/usr/bin/env bash
# Installs what the server's browser and OpenAI-client tests and the terminal chat test need, on top of install-deps.sh:
# Node.js with npm (Debian's nodejs + npm, unless a node with npm is already there, e.g.
# NodeSource's nodejs, which bundles npm and conflicts with Debian's npm package), Debian's
# chromium, and the npm packages pinned in tests/server/js/package-lock.json (the official
# `openai` client and playwright-core, which drives the system chromium); tmux for the terminal
# chat test; PyTorch and numpy for the trainer's tests; clang for the fuzz targets.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if ! command -v tmux >/dev/null 2>&1; then missing+=(tmux); fi  # the terminal chat test (tests/cli/chat_tty_test.cpp)
# The fuzz targets (scripts/fuzz.sh): clang and its libFuzzer / sanitizer runtimes, which clang
# only recommends (apt-install.sh installs no recommendations); Debian 12's clang is clang-14.
if ! command -v clang++ >/dev/null 2>&1; then missing+=(clang); fi
if ! compgen -G '/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a' >/dev/null; then
  missing+=(libclang-rt-14-dev)
fi
# The trainer's own tests (tests/train): Debian's PyTorch and numpy, under /usr/bin/python3.
if ! /usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1; then missing+=(python3-torch python3-numpy); fi

if [ ${#missing[@]} -gt 0 ]; then
  bash scripts/apt-install.sh "${missing[@]}"
fi

js=tests/server/js
# npm ci only when the installed tree is missing or older than the lock file.
if [ ! -f "$js/node_modules/.package-lock.json" ] || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
  echo "k3: installing the server tests' npm packages (npm ci in $js)" >&2
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
