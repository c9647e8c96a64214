#!/usr/bin/env bash
# Installs what Meridian needs to build and test: the Debian packages in
# scripts/apt-packages.txt and, in .venv, the Python packages of each
# requirements file given (default: requirements-dev.txt, then vLLM's pinned
# dependencies and vLLM itself). A file whose name contains "nodeps" is
# installed with --no-deps. Idempotent and silent when everything is present.
# Python packages go in through uv (pinned below, bootstrapped into .venv with
# pip): it keeps one cache per machine (~/.cache/uv) and links packages from it,
# so a fresh clone's .venv, vLLM and torch included, is ready in seconds once
# any clone on the machine has downloaded them (docs/testing.md#build-caches).
#   scripts/setup.sh [APT_FILE [REQUIREMENTS_FILE ...]]
set -euo pipefail
cd "$(dirname "$0")/.."

packages_file=${1:-scripts/apt-packages.txt}
shift || true
requirements_files=("$@")
if ((${#requirements_files[@]} == 0)); then
  requirements_files=(requirements-dev.txt requirements-vllm.txt requirements-vllm-nodeps.txt
    requirements-fabrics-nodeps.txt)
fi

missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done < "$packages_file"

if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
uv_version=0.13.8
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv with $($python --version 2>&1)"
  "$python" -m venv .venv
fi
if [[ "$(.venv/bin/uv --version 2>/dev/null)" != "uv $uv_version"* ]]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$uv_version"
fi
# The system's CA store, as pip is configured here.
export UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-1}

# One stamp per requirements file, so `make demo` and `make test` do not
# undo each other's record; a file with no requirements installs nothing.
for requirements_file in "${requirements_files[@]}"; do
  stamp=".venv/.installed-$(basename "$requirements_file").sha256"
  want=$(sha256sum "$requirements_file" | cut -d' ' -f1)
  if ! grep -qvE '^\s*(#|$)' "$requirements_file"; then
    continue  # nothing to install
  elif [[ ! -f "$stamp" ]] || ! grep -qx "$want" "$stamp"; then
    echo "setup: installing Python packages from $requirements_file"
    no_deps=()
    if [[ "$requirements_file" == *nodeps* ]]; then no_deps=(--no-deps); fi
    .venv/bin/uv pip install -q --python .venv/bin/python "${no_deps[@]}" -r "$requirements_file"
    echo "$want" > "$stamp"
  fi
done

# Bytecode for everything installed, once per set of installs (scripts/compile_bytecode.sh).
scripts/compile_bytecode.sh .venv
