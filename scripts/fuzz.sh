#!/usr/bin/env bash
# Runs the libFuzzer harnesses (docs/testing.md#fuzzing), one at a time, each
# over its checked-in corpus (fuzz/corpus/<harness>) and its past findings
# (fuzz/regressions/<harness>), then fuzzes for SECONDS. New inputs go to a
# scratch directory, not to the corpus, unless --merge is given (then the
# interesting ones are merged, minimised, into fuzz/corpus). Fails on the
# first crash, leak, timeout or out-of-memory; the input is kept under
# $OUT_DIR/<harness>/ (crash-*, timeout-*, oom-*). --jobs N fuzzes N harnesses
# side by side (each still for SECONDS, on its own core; default 1).
#   scripts/fuzz.sh [--seconds N] [--jobs N] [--merge] [--only NAME] BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
jobs=1
merge=0
only=""
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    --only) only=$2; shift 2 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
bin_dir=${1:?usage: scripts/fuzz.sh [--seconds N] [--jobs N] [--merge] [--only NAME] BIN_DIR}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs must be a positive integer; got '$jobs'" >&2; exit 2; }
out_dir=${OUT_DIR:-$bin_dir/../fuzz-out}

# harness -> dictionary (empty: none; the op-sequence harnesses decode bytes)
declare -A dicts=(
  [fuzz_config]=fuzz/dict/config.dict
  [fuzz_replay_params]=fuzz/dict/replay_params.dict
  [fuzz_trace]=fuzz/dict/trace.dict
  [fuzz_tokenizer_vocab]=fuzz/dict/tokenizer_vocab.dict
  [fuzz_router]=""
  [fuzz_kv_blocks]=""
  [fuzz_scheduler]=""
  [fuzz_mrdn]=fuzz/dict/mrdn.dict
)
harnesses=(fuzz_config fuzz_replay_params fuzz_trace fuzz_tokenizer_vocab fuzz_router fuzz_kv_blocks fuzz_scheduler
           fuzz_mrdn)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# One harness: fuzz, check, merge if asked; its summary line goes to $work/summary.txt.
fuzz_one() {
  local h=$1 exe="$bin_dir/$1" work="$out_dir/$1"
  rm -rf "$work/new" "$work/summary.txt"
  mkdir -p "$work/new" "fuzz/corpus/$h" "fuzz/regressions/$h"
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$work/")
  [[ -n "${dicts[$h]}" ]] && args+=(-dict="${dicts[$h]}")
  local log="$work/log.txt"
  echo "fuzz: $h for ${seconds}s over fuzz/corpus/$h ($(ls "fuzz/corpus/$h" | wc -l) inputs) and fuzz/regressions/$h"
  if ! "$exe" "${args[@]}" "$work/new" "fuzz/corpus/$h" "fuzz/regressions/$h" >"$log" 2>&1; then
    grep -E "FUZZ FINDING|ERROR: |SUMMARY|runtime error|Test unit written" "$log" | head -20 >&2 || true
    echo "fuzz: $h FAILED (full log: $log; reproduce: $exe <input>)" >&2
    return 1
  fi
  local execs rate cov ft new
  execs=$(grep -oP 'stat::number_of_executed_units:\s*\K[0-9]+' "$log" || echo 0)
  rate=$(grep -oP 'stat::average_exec_per_sec:\s*\K[0-9]+' "$log" || echo 0)
  cov=$(grep -oP 'cov: \K[0-9]+' "$log" | tail -1 || echo 0)
  ft=$(grep -oP 'ft: \K[0-9]+' "$log" | tail -1 || echo 0)
  new=$(ls "$work/new" | wc -l)
  # Merged on edge coverage alone (-use_counters=0): hit-count features would
  # keep thousands of near-duplicate inputs and the corpus is checked in.
  if ((merge)) && ((new > 0)); then
    "$exe" -merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=2048 "fuzz/corpus/$h" "$work/new" >"$work/merge.txt" 2>&1
  fi
  printf '%-22s %10s %8s %6s %7s %5s\n' "$h" "$execs" "$rate" "$cov" "$ft" "$new" >"$work/summary.txt"
}

selected=()
for h in "${harnesses[@]}"; do
  [[ -n "$only" && "$h" != "$only" ]] && continue
  [[ -x "$bin_dir/$h" ]] || { echo "fuzz.sh: $bin_dir/$h is not built" >&2; exit 1; }
  selected+=("$h")
done
# A pool of $jobs harnesses; the first failure stops the rest.
status=0
running=0
for h in "${selected[@]}"; do
  if ((running >= jobs)); then
    wait -n || { status=1; break; }
    running=$((running - 1))
  fi
  fuzz_one "$h" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
((status == 0)) || exit 1
printf '%-22s %10s %8s %6s %7s %5s\n' harness execs exec/s cov ft new
for h in "${selected[@]}"; do cat "$out_dir/$h/summary.txt"; done
