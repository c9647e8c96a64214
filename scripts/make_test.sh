#!/usr/bin/env bash
# `make test`: every check CI runs, as stages of `make`, timed, with a summary at the end
# (docs/testing.md#how-long-make-test-takes). Lanes joined by "+" run side by side (a lane is
# stages joined by ">", run in turn), each stage's output in a log printed when the lanes end;
# single stages stream as they run. The first failing group stops the run; the summary says
# which stage failed.
# Incremental (docs/testing.md#incremental-runs): a stage in $stamped whose inputs are all
# unchanged since it last passed in this checkout (scripts/stage_stamp.py) is not run again,
# and when only pytest modules changed, pytest runs just those. MAKE_TEST_ALL=1, or CI set,
# runs everything.
#   scripts/make_test.sh [STAGE ...]    (default: the full list below)
# Environment: MAKE (default make), BUILD_DIR (default build; the summary is written to
# $BUILD_DIR/test-times.txt), MAKE_TEST_STAGE_LIMIT (default 1800: seconds one stage may run
# before it is stopped and fails, so a hang ends in its log rather than in CI's own timeout).
set -euo pipefail
cd "$(dirname "$0")/.."

make_cmd=${MAKE:-make}
build_dir=${BUILD_DIR:-build}
stage_limit=${MAKE_TEST_STAGE_LIMIT:-1800}
stages=("$@")
if ((${#stages[@]} == 0)); then
  # Fastest failures first; then three lanes side by side. pytest's vLLM servers leave a core
  # idle much of the time; the other two lanes fill it, balanced so that all end together on
  # 2 cores (docs/testing.md#how-long-make-test-takes).
  stages=(setup build format-check test-cpp test-package
          "test-python>test-install+test-asan>test-tsan>lint>test-vllm-compat+docs-check>fuzz-smoke>test-study")
fi
stamped=" test-python docs-check test-vllm-compat test-asan test-tsan fuzz-smoke "
incremental=1
if [[ -n ${MAKE_TEST_ALL:-} || -n ${CI:-} ]]; then incremental=0; fi

names=()
seconds=()
results=()
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT
started_all=$(date +%s.%N)

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

summary() {
  local total
  total=$(elapsed "$started_all")
  {
    printf '\n%-18s %9s  %s\n' stage seconds result
    for i in "${!names[@]}"; do printf '%-18s %9s  %s\n' "${names[$i]}" "${seconds[$i]}" "${results[$i]}"; done
    printf '%-18s %9s\n' total "$total"
  } | tee "$log_dir/summary.txt"
  mkdir -p "$build_dir" && cp "$log_dir/summary.txt" "$build_dir/test-times.txt" || true
}

# Runs one stage: `make STAGE`, or nothing when its inputs are unchanged since its last
# pass. Prints "skipped" as its result line's suffix through $log_dir/STAGE.note.
run_stage() {
  local stage=$1 changed status=0
  local args=()
  if ((incremental)) && [[ $stamped == *" $stage "* ]]; then
    if changed=$(python3 scripts/stage_stamp.py check "$stage"); then
      echo "$stage: inputs unchanged since its last pass in this checkout; not run again"
      echo "skipped: unchanged since last pass" >"$log_dir/$stage.note"
      return 0
    fi
    local modules
    # shellcheck disable=SC2086  # one changed path per word
    if [[ $stage == test-python ]] && modules=$(python3 scripts/stage_stamp.py pytest-modules $changed); then
      local files=()
      while read -r f; do [[ -n $f ]] && files+=("$f"); done <<<"$modules"
      echo "test-python: only test modules changed since the last pass; running them and their importers:" \
           "${files[*]:-none left}"
      echo "ok: ${#files[@]} changed module(s) only" >"$log_dir/$stage.note"
      ((${#files[@]})) || { python3 scripts/stage_stamp.py record "$stage"; return 0; }
      args=("PYTEST_FILES=${files[*]}")
    fi
  fi
  timeout --kill-after=30 "$stage_limit" "$make_cmd" --no-print-directory "$stage" "${args[@]}" || status=$?
  if ((status == 124 || status == 137)); then
    echo "$stage: stopped after $stage_limit s (MAKE_TEST_STAGE_LIMIT): a hang, or a stage far over its time"
  fi
  if ((status == 0 && incremental)) && [[ $stamped == *" $stage "* ]]; then
    python3 scripts/stage_stamp.py record "$stage"
  fi
  return "$status"
}

result_of() {  # STAGE STATUS
  if (($2 != 0)); then echo "FAILED (exit $2)"; elif [[ -f $log_dir/$1.note ]]; then cat "$log_dir/$1.note"
  else echo ok; fi
}

# One group: a single stage, or lanes joined by "+" that run side by side, each lane a chain
# of stages joined by ">" that run one after another (a lane stops at its first failure).
run_group() {
  local group=$1 stage
  if [[ $group != *[+\>]* ]]; then
    stage=$group
    echo "== $stage"
    local t0 status=0
    t0=$(date +%s.%N)
    run_stage "$stage" || status=$?
    names+=("$stage"); seconds+=("$(elapsed "$t0")")
    results+=("$(result_of "$stage" "$status")")
    return "$status"
  fi
  local lanes lane pids=() failed=0 i
  IFS=+ read -r -a lanes <<<"$group"
  echo "== side by side: ${lanes[*]}"
  for lane in "${lanes[@]}"; do
    (
      IFS='>' read -r -a chain <<<"$lane"
      for stage in "${chain[@]}"; do
        date +%s.%N >"$log_dir/$stage.start"
        status=0
        run_stage "$stage" >"$log_dir/$stage.log" 2>&1 || status=$?
        echo "$status" >"$log_dir/$stage.status"
        date +%s.%N >"$log_dir/$stage.end"
        # A progress line as it happens (the logs print when every lane is done).
        echo "   $stage: exit $status after $(awk -v a="$(cat "$log_dir/$stage.start")" \
          -v b="$(cat "$log_dir/$stage.end")" 'BEGIN { printf "%.0f", b - a }') s"
        ((status == 0)) || exit 1
      done
    ) &
    pids+=($!)
  done
  for i in "${!lanes[@]}"; do wait "${pids[$i]}" || true; done
  for lane in "${lanes[@]}"; do
    IFS='>' read -r -a chain <<<"$lane"
    for stage in "${chain[@]}"; do
      [[ -f $log_dir/$stage.status ]] || continue  # not reached: its lane failed before it
      local status
      status=$(cat "$log_dir/$stage.status")
      echo "-- $stage"
      cat "$log_dir/$stage.log"
      names+=("$stage")
      seconds+=("$(awk -v a="$(cat "$log_dir/$stage.start")" -v b="$(cat "$log_dir/$stage.end")" \
                  'BEGIN { printf "%.1f", b - a }')")
      results+=("$(result_of "$stage" "$status")")
      ((status == 0)) || failed=1
    done
  done
  return "$failed"
}

for group in "${stages[@]}"; do
  if ! run_group "$group"; then
    summary
    echo "make test: FAILED in $group" >&2
    exit 1
  fi
done
summary
echo "make test: all checks passed"
