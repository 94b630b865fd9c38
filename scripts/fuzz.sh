#!/usr/bin/env bash
# Runs k3's libFuzzer targets (fuzz/README.md): clang, ASan + UBSan, built in build-fuzz/.
#   scripts/fuzz.sh TARGET MINUTES [--merge]  fuzz one target (e.g. json_schema) for that long
#   scripts/fuzz.sh all MINUTES [--merge]     every target in turn, MINUTES each
#   scripts/fuzz.sh --replay [SECONDS]        CI: every target over its corpus, then fuzzed for
#                                             SECONDS (default 20) each
#   scripts/fuzz.sh --list                    the targets
# Each run works on a copy of the target's corpus in build-fuzz/corpus/TARGET: the committed
# seeds and crash reproducers of fuzz/corpus/TARGET plus seeds made from the test fixtures
# (fuzz/make_seeds.cpp).  --merge adds the inputs found that reach new code to fuzz/corpus/TARGET
# (libFuzzer -merge=1).  A crash leaves its input in build-fuzz/crashes/TARGET/ and makes the
# script exit 1 (after the other targets, for `all` and --replay); once fixed, the input goes
# into fuzz/corpus/TARGET so every later run replays it.
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_JOBS (build jobs, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
targets=(safetensors checkpoint_index config tiktoken tokenizer chat_render output_parser json_schema image exif
         http_request)

# The dictionaries of each target (fuzz/*.dict), concatenated for libFuzzer's single -dict.
dicts_of() {
  case "$1" in
    safetensors) echo "safetensors json" ;;
    checkpoint_index) echo "checkpoint_index json" ;;
    config) echo "config json" ;;
    tiktoken) echo "tiktoken json" ;;
    tokenizer | output_parser) echo "xtml" ;;
    chat_render) echo "chat json xtml" ;;
    json_schema) echo "json_schema json" ;;
    http_request) echo "chat json xtml" ;;
    *) echo "" ;;
  esac
}

usage() {
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

build_targets() {  # target names...
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "fuzz.sh: clang++ is missing (Debian package clang; scripts/install-test-deps.sh installs it)" >&2
    exit 1
  fi
  if [ ! -f "$build/build.ninja" ]; then
    # Unity builds as in k3.sh; -O1 keeps the sanitizers fast enough and the stacks readable.
    CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
      -DK3_BUILD_FUZZ=ON -DK3_BUILD_TESTS=OFF -DK3_MPI=OFF >/dev/null
  fi
  local names=(make_seeds)
  for t in "$@"; do names+=("${t}_fuzz"); done
  cmake --build "$build" -j "$jobs" --target "${names[@]}"
}

# Fuzzes one target for `seconds`; prints its executions and crashes; returns 1 on a crash.
run_target() {  # target seconds merge(0|1)
  local t=$1 seconds=$2 merge=$3
  local bin=$build/fuzz/${t}_fuzz work=$build/corpus/$t crashes=$build/crashes/$t dict=$build/fuzz/$t.dict
  rm -rf "$work"
  mkdir -p "$work" "$crashes"
  if [ -d "fuzz/corpus/$t" ]; then cp -r "fuzz/corpus/$t/." "$work/"; fi
  "$build/fuzz/make_seeds" "$t" "$work"
  local args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
              -artifact_prefix="$crashes/")
  : >"$dict"
  for d in $(dicts_of "$t"); do cat "fuzz/$d.dict" >>"$dict"; done
  if [ -s "$dict" ]; then args+=(-dict="$dict"); fi
  local log=$build/fuzz/$t.log rc=0
  # What libFuzzer writes for a failure (slow-unit-* files, written for slow inputs, are not).
  count_failures() { find "$crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l; }
  local before
  before=$(count_failures)
  echo "== $t: $(find "$work" -type f | wc -l) corpus inputs, fuzzing for ${seconds}s"
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$bin" "${args[@]}" "$work" >"$log" 2>&1 || rc=$?
  local execs secs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  local found=$(($(count_failures) - before))
  echo "$t: ${execs:-?} executions in ${secs:-$seconds} s ($(( ${execs:-0} / (${secs:-$seconds} > 0 ? ${secs:-$seconds} : 1) ))/s), $(find "$work" -type f | wc -l) corpus inputs, exit $rc"
  if [ "$rc" -ne 0 ] || [ "$found" -gt 0 ]; then
    echo "$t: CRASH ($found new input(s) in $crashes/); the log's end:" >&2
    grep -v '^#' "$log" | tail -40 >&2
    return 1
  fi
  if [ "$merge" = 1 ]; then
    mkdir -p "fuzz/corpus/$t"
    "$bin" -merge=1 "fuzz/corpus/$t" "$work" >"$log.merge" 2>&1
    echo "$t: merged into fuzz/corpus/$t: $(grep -o 'added [0-9]* new units' "$log.merge" | tail -1 || true)"
  fi
  return 0
}

[ $# -ge 1 ] || usage
merge=0
args=()
for a in "$@"; do
  if [ "$a" = --merge ]; then merge=1; else args+=("$a"); fi
done
set -- "${args[@]}"

case "$1" in
  --list)
    printf '%s\n' "${targets[@]}"
    ;;
  --replay)
    seconds=${2:-20}
    build_targets "${targets[@]}"
    failed=()
    for t in "${targets[@]}"; do run_target "$t" "$seconds" 0 || failed+=("$t"); done
    if [ ${#failed[@]} -gt 0 ]; then
      echo "fuzz.sh: crashes in: ${failed[*]}" >&2
      exit 1
    fi
    ;;
  *)
    [ $# -eq 2 ] || usage
    minutes=$2
    if ! [[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]]; then usage; fi
    seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60); print (s < 1 ? 1 : s) }')
    if [ "$1" = all ]; then
      list=("${targets[@]}")
    else
      list=("$1")
      if ! printf '%s\n' "${targets[@]}" | grep -qx "$1"; then
        echo "fuzz.sh: unknown target '$1' (scripts/fuzz.sh --list)" >&2
        exit 2
      fi
    fi
    build_targets "${list[@]}"
    failed=()
    for t in "${list[@]}"; do run_target "$t" "$seconds" "$merge" || failed+=("$t"); done
    if [ ${#failed[@]} -gt 0 ]; then
      echo "fuzz.sh: crashes in: ${failed[*]}" >&2
      exit 1
    fi
    ;;
esac
