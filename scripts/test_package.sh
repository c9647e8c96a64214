#!/usr/bin/env bash
# `make test-package`: the meridian wheel, built by scikit-build-core in the main build tree
# with that tree's settings (so the extension and the libraries it links are compiled once,
# by `make build`), then installed into .venv as a user installs a wheel. Skipped while what
# goes into the wheel is unchanged: the package's Python files, pyproject.toml, README.md and
# the built extension.
#   scripts/test_package.sh BUILD_DIR BUILD_TYPE DEFINE=VALUE ... [-- CMAKE_ARG ...]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:?usage: scripts/test_package.sh BUILD_DIR BUILD_TYPE [DEFINE=VALUE ...] [-- CMAKE_ARG ...]}
build_type=${2:?usage: scripts/test_package.sh BUILD_DIR BUILD_TYPE [DEFINE=VALUE ...] [-- CMAKE_ARG ...]}
shift 2
settings=(-Cbuild-dir="$build_dir" -Ccmake.build-type="$build_type")
while (($#)) && [[ $1 != -- ]]; do settings+=(-Ccmake.define."$1"); shift; done
if (($#)); then shift; for arg in "$@"; do settings+=(-Ccmake.args="$arg"); done; fi

# One cmake at a time in this tree: `make build` holds the same lock (Makefile).
mkdir -p "$build_dir"
exec 9>"$build_dir/.build.lock"
flock 9

python=.venv/bin/python
wheel_dir=$build_dir/wheel
shopt -s nullglob
extension=("$build_dir"/lib/_meridian*.so)
if ((${#extension[@]} != 1)); then
  echo "test-package: expected one $build_dir/lib/_meridian*.so (run \`make build\`); found ${#extension[@]}" >&2
  exit 1
fi
inputs=$({ find python/meridian -type f ! -path '*/__pycache__/*'; echo pyproject.toml; echo README.md
           echo "${extension[0]}"; echo "${settings[*]}"; } | sort | while read -r f; do
           if [[ -f $f ]]; then sha256sum "$f"; else echo "$f"; fi; done | sha256sum | cut -c1-64)
wheels=("$wheel_dir"/meridian-*.whl)
if ((${#wheels[@]} == 1)) && [[ -f $wheel_dir/.inputs && -f .venv/.installed-meridian-wheel ]] \
    && grep -qx "$inputs" "$wheel_dir/.inputs" && grep -qx "$inputs" .venv/.installed-meridian-wheel; then
  echo "test-package: $(basename "${wheels[0]}") unchanged and installed"
  exit 0
fi

rm -rf "$wheel_dir"
log=$build_dir/wheel.log
if ! "$python" -m pip wheel -q --no-build-isolation --no-deps -w "$wheel_dir" "${settings[@]}" . >"$log" 2>&1; then
  cat "$log"
  echo "test-package: building the wheel failed (log: $log)" >&2
  exit 1
fi
wheels=("$wheel_dir"/meridian-*.whl)
"$python" -m pip install -q --no-deps --force-reinstall "${wheels[0]}"
echo "$inputs" >"$wheel_dir/.inputs"
echo "$inputs" >.venv/.installed-meridian-wheel
echo "test-package: built and installed $(basename "${wheels[0]}")"
