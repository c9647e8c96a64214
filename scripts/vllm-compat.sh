#!/usr/bin/env bash
# Runs Meridian's vLLM tests against vLLM 0.33.0 in its own environment,
# .venv-vllm-0.33 (git-ignored): the pinned dependencies of
# requirements-vllm-0.33.txt, vllm==0.33.0 with --no-deps (its declared
# certifi>=2026.10.19 is not on the index), this checkout's meridian package
# and pytest. Idempotent: each install is skipped while its stamp matches.
# Prints "vllm 0.33.0: N passed, M failed" last and exits with pytest's status.
# --wheel FILE installs that meridian wheel (built once by `make test-package` for
# the same Python) instead of building this checkout a second time.
#   scripts/vllm-compat.sh [--wheel FILE] [PYTEST_OPTION ...] [TEST_FILE ...]
#   (default: tests/python/test_vllm_scheduler.py; options start with "-", e.g. -m "not e2e"
#   must be given as -m and "not e2e" joined: -m"not e2e")
# The official 0.33.0 wheel has no CPU kernels: without a GPU only
# scheduler-level tests (no LLM(...) generation) can pass here.
set -euo pipefail
cd "$(dirname "$0")/.."

vllm_version=0.33.0
venv=.venv-vllm-0.33
requirements="requirements-vllm-0.33.txt"
python=${PYTHON:-python3}
tests=()
pytest_options=()
wheel=""
if [[ ${1:-} == --wheel ]]; then
  wheel=${2:?"vllm-compat: --wheel needs a file"}
  [[ -f $wheel ]] || { echo "vllm-compat: no such wheel: $wheel" >&2; exit 2; }
  shift 2
fi
for arg in "$@"; do
  if [[ $arg == -* ]]; then pytest_options+=("$arg"); continue; fi
  [[ -e "$arg" ]] || { echo "vllm-compat: no such test file: $arg" >&2; exit 2; }
  tests+=("$arg")
done
if ((${#tests[@]} == 0)); then tests=(tests/python/test_vllm_scheduler.py); fi

if [[ ! -x $venv/bin/python ]]; then
  echo "vllm-compat: creating $venv with $($python --version 2>&1)"
  "$python" -m venv "$venv"
fi
# uv from .venv (make setup) links the packages from the machine's cache, so a
# fresh clone's environment is made in seconds; pip otherwise.
if [[ -x .venv/bin/uv ]]; then
  export UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-1}
  pip=(.venv/bin/uv pip install -q --python "$venv/bin/python")
  reinstall=(--reinstall-package meridian)
else
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  reinstall=(--force-reinstall)
fi

# 1. Dependencies, then vLLM itself: one stamp for both.
stamp=$venv/.installed-deps.sha256
want=$( (sha256sum "$requirements"; echo "vllm==$vllm_version") | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp ]] || ! grep -qx "$want" "$stamp"; then
  started=$SECONDS
  echo "vllm-compat: installing $requirements and vllm==$vllm_version (--no-deps) into $venv"
  "${pip[@]}" -r "$requirements"
  "${pip[@]}" --no-deps "vllm==$vllm_version"
  echo "$want" > "$stamp"
  echo "vllm-compat: installed in $((SECONDS - started)) s; $venv is $(du -sh "$venv" | cut -f1)"
fi
scripts/compile_bytecode.sh "$venv"

# 2. This checkout's meridian package: the given wheel, or a build of the checkout
# (a private build directory, so the shared build trees are not touched); each
# reinstalled when it changes.
stamp=$venv/.installed-meridian.sha256
if [[ -n $wheel ]]; then
  want=$(sha256sum "$wheel" | cut -d' ' -f1)
else
  want=$(find pyproject.toml CMakeLists.txt cmake bindings include src python -type f \
           ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
fi
if [[ ! -f $stamp ]] || ! grep -qx "$want" "$stamp"; then
  echo "vllm-compat: installing this checkout's meridian package into $venv${wheel:+ from $wheel}"
  if [[ -n $wheel ]]; then
    "${pip[@]}" --no-deps "${reinstall[@]}" "$wheel"
  else
    "${pip[@]}" --no-build-isolation --no-deps "${reinstall[@]}" --config-setting=build-dir="$venv/meridian-build" .
  fi
  echo "$want" > "$stamp"
fi

# 3. The tests, with the environment vLLM needs on a machine without a GPU.
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1}
export VLLM_TARGET_DEVICE=${VLLM_TARGET_DEVICE:-cpu} VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0}
export VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1  # VLLM_CACHE_ROOT: tests/python/conftest.py's, per vLLM version
installed=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))')
status=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$cache/junit.xml" "${pytest_options[@]}" "${tests[@]}" || status=$?
"$venv/bin/python" - "$cache/junit.xml" "$installed" <<'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print(f"vllm {sys.argv[2]}: 0 passed, 0 failed (pytest wrote no report)")
    sys.exit(0)
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
count = lambda key: sum(int(s.get(key, 0)) for s in suites)  # noqa: E731
failed = count("failures") + count("errors")
skipped = count("skipped")
passed = count("tests") - failed - skipped
print(f"vllm {sys.argv[2]}: {passed} passed, {failed} failed" + (f" ({skipped} skipped)" if skipped else ""))
EOF
exit $status
