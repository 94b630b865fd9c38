#!/usr/bin/env bash
# k3's front door.  Both commands install what is missing (Debian packages only), build, and then:
#   ./k3.sh run    run k3's main job on its built-in default model (the small K3 trained by train/, in models/)
#   ./k3.sh test   run the whole test suite, then again built with AddressSanitizer + UBSan, then
#                  replay the fuzz corpora and fuzz every parser briefly (scripts/fuzz.sh)
set -euo pipefail
cd "$(dirname "$0")"

jobs=$(nproc 2>/dev/null || echo 2)

# Unity builds (8 sources per compiler run): the CLI11 and JSON headers dominate compile time,
# so compiling each once per batch instead of once per file halves a fresh build on 2 cores.
configure_and_build() {  # dir, extra cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

mode=${1:-run}
case "$mode" in
  run)
    bash scripts/install-deps.sh
    configure_and_build build -DCMAKE_BUILD_TYPE=Release -DK3_BUILD_TESTS=OFF
    shift || true
    echo "== k3 inspect (built-in default model)"
    ./build/k3 inspect
    echo "== k3 chat (two scripted turns, greedy; the reasoning is shown apart from the answer)"
    printf 'Hello! What can you do?\nWhat does ephemeral mean?\n' | ./build/k3 chat --temperature 0 --max-tokens 160 "$@"
    ;;
  test)
    bash scripts/install-deps.sh
    bash scripts/install-test-deps.sh  # node, chromium and the npm packages of the server tests
    export K3_REQUIRE_NODE_TESTS=1     # so those tests fail rather than skip when something is missing
    # Sandboxes (k3 env) need root: as root their tests must run, not skip.
    if [ "$(id -u)" -eq 0 ]; then export K3_REQUIRE_SANDBOX_TESTS=1; fi
    configure_and_build build -DCMAKE_BUILD_TYPE=Release -DK3_BUILD_TESTS=ON
    (cd build && ctest -j "$jobs" --output-on-failure)
    echo "== the same tests built with AddressSanitizer + UndefinedBehaviorSanitizer"
    configure_and_build build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
      -DK3_SANITIZE=ON -DK3_BUILD_TESTS=ON
    (cd build-asan && ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest -j "$jobs" --output-on-failure)
    echo "== the fuzz targets (clang, ASan + UBSan): every corpus replayed, then 2 s of fuzzing each"
    bash scripts/fuzz.sh --replay 2
    ;;
  *)
    echo "usage: ./k3.sh run [extra chat args] | ./k3.sh test" >&2
    exit 2
    ;;
esac
