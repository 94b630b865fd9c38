#!/usr/bin/env bash
# ThreadSanitizer over k3's concurrent code: the thread pool, the model's threaded forward, the
# scheduler and engine, the HTTP server and its workers, the load tester, and the k3 processes the
# tests start (built in the same tree, so a race in `k3 serve` is caught as well).  Any report
# fails the run.
#
#   scripts/tsan.sh                  build build-tsan/ and run every concurrent test binary
#   scripts/tsan.sh server_test ...  only these test binaries
#
# Not part of ./k3.sh test: a ThreadSanitizer build and run take longer than CI's budget on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${K3_TSAN_BUILD_DIR:-build-tsan}
jobs=$(nproc 2>/dev/null || echo 2)
if (($# > 0)); then
  binaries=("$@")
else
  binaries=(base_test engine_test server_unit_test load_test_test server_requests_test server_test
            demo_model_server_test cli_test cli_io_test model_test)
fi

bash scripts/install-deps.sh
cmake -S . -B "$dir" -G Ninja -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK3_SANITIZE_THREAD=ON -DK3_BUILD_TESTS=ON >/dev/null
cmake --build "$dir" -j "$jobs" --target k3 "${binaries[@]}"

# halt_on_error: the first race ends the process (a child k3 as well), so the test that started
# it fails.  ASLR off: TSan's shadow-memory layout rejects some randomised mappings.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export K3_DEFAULT_MODEL="$PWD/$dir/default-tiny-model"
run=(env)
if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
  run=(setarch "$(uname -m)" -R)
fi

failed=()
for b in "${binaries[@]}"; do
  echo "== $b"
  start=$SECONDS
  # model_test runs every kernel level at full size; the threaded forward is what matters here.
  filter=()
  [[ $b == model_test ]] && filter=(--gtest_filter='*Thread*:*Batch*:*DemoModel*')
  if "${run[@]}" "./$dir/$b" "${filter[@]}" --gtest_brief=1; then
    echo "   passed in $((SECONDS - start)) s"
  else
    echo "   FAILED ($b) after $((SECONDS - start)) s"
    failed+=("$b")
  fi
done
if ((${#failed[@]})); then
  echo "ThreadSanitizer run failed: ${failed[*]}" >&2
  exit 1
fi
echo "ThreadSanitizer: ${#binaries[@]} test binaries clean"
