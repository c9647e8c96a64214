#!/usr/bin/env bash
# Compiles a virtual environment's installed Python files to bytecode, once per set of
# installs. uv installs without .pyc files, and where PYTHONDONTWRITEBYTECODE is set (as on
# CI machines) Python never writes them, so every interpreter that imports vLLM would compile
# torch, transformers and vLLM from source again: 14 CPU-seconds per `import vllm` instead of
# 6, three times per `vllm serve` start (docs/testing.md#build-caches). Skipped while the
# venv's dependency stamps (.installed-*.sha256, not meridian's own: pip compiles the wheel
# it installs, and it is small) are what they were at the last compile.
#   scripts/compile_bytecode.sh VENV
set -euo pipefail
venv=${1:?"usage: scripts/compile_bytecode.sh VENV"}
[[ -x $venv/bin/python ]] || { echo "compile_bytecode: no Python in $venv" >&2; exit 2; }

stamp=$venv/.bytecode.sha256
want=$(find "$venv" -maxdepth 1 -name '.installed-*.sha256' ! -name '.installed-meridian*' | sort | xargs -r cat |
  sha256sum | cut -d' ' -f1)
if [[ -f $stamp ]] && grep -qx "$want" "$stamp"; then
  exit 0
fi
started=$SECONDS
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# A file that does not compile (packages ship Python 2 fixtures and templates named .py) keeps
# no .pyc and is compiled at import as before, so compileall's status for those is not an error;
# a missing or unreadable site-packages is.
[[ -d $site ]] || { echo "compile_bytecode: no site-packages at $site" >&2; exit 2; }
"$venv/bin/python" -m compileall -q -q -j 0 "$site" >/dev/null || true
echo "$want" >"$stamp"
echo "compile_bytecode: $venv compiled to bytecode in $((SECONDS - started)) s"
