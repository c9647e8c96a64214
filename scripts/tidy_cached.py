#!/usr/bin/env python3
"""clang-tidy over translation units, skipping those already found clean with the same inputs.

`make lint` runs this instead of run-clang-tidy (docs/testing.md#build-caches, ADR-0021). A
translation unit's result is a function of clang-tidy's version, its effective configuration,
the extra arguments, the compile command and the contents of every file the unit reads; the
key hashes exactly those. The files it reads come from the build's own dependency record
(`ninja -t deps`, written by the compiler), so a change to a header re-checks every unit that
includes it and nothing else. Only clean results are remembered, and a unit whose dependency
record is missing or stale is always checked, never remembered.

Paths inside the source tree enter the key relative to it, so a fresh clone on the same machine
reuses the results of another (the cache lives in $MERIDIAN_TIDY_CACHE, default
~/.cache/meridian/clang-tidy).

    scripts/tidy_cached.py -p BUILD_DIR [-j N] [--extra-arg=ARG ...] FILE ...
Exits 1 when any unit has a finding (its diagnostics are printed), 2 on a usage error.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import shlex
import subprocess
import sys

KEY_VERSION = "1"  # bump when the key's recipe changes


def sha256_file(path: pathlib.Path, memo: dict[pathlib.Path, str]) -> str:
    digest = memo.get(path)
    if digest is None:
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest = "missing"
        memo[path] = digest
    return digest


def relative_to_source(text: str, source_dir: str) -> str:
    return text.replace(source_dir, "<src>")


def ninja_deps(build_dir: pathlib.Path) -> dict[str, tuple[bool, list[str]]]:
    """Object path (relative to the build dir) -> (record valid, files read)."""
    out = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True, check=True)
    deps: dict[str, tuple[bool, list[str]]] = {}
    current: list[str] | None = None
    for line in out.stdout.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" ") and ": #deps" in line:
            target = line.split(": #deps", 1)[0]
            current = []
            deps[target] = ("(VALID)" in line, current)
        elif current is not None:
            current.append(line.strip())
    return deps


def object_of(command: list[str]) -> str | None:
    for flag, value in zip(command, command[1:]):
        if flag == "-o":
            return value
    return None


def unit_key(entry: dict, common: str, deps: dict, source_dir: str, memo: dict) -> str | None:
    command = entry.get("arguments") or shlex.split(entry["command"])
    obj = object_of(command)
    record = deps.get(obj) if obj else None
    if record is None or not record[0]:
        return None
    h = hashlib.sha256()
    h.update(common.encode())
    h.update(relative_to_source(" ".join(command), source_dir).encode())
    h.update(relative_to_source(entry["file"], source_dir).encode())
    directory = pathlib.Path(entry["directory"])
    # The configuration clang-tidy reads for this file: every .clang-tidy above it.
    configs = [str(d / ".clang-tidy") for d in pathlib.Path(entry["file"]).resolve().parents
               if (d / ".clang-tidy").is_file()]
    for dep in sorted(set(record[1]) | {entry["file"], *configs}):
        path = (directory / dep).resolve()
        h.update(b"\0" + relative_to_source(str(path), source_dir).encode())
        h.update(sha256_file(path, memo).encode())
    return h.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-p", dest="build_dir", required=True, help="build directory with compile_commands.json")
    parser.add_argument("-j", dest="jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--extra-arg", action="append", default=[], help="passed to clang-tidy")
    parser.add_argument("--clang-tidy", default="clang-tidy")
    parser.add_argument("--cache-dir", default=os.environ.get("MERIDIAN_TIDY_CACHE"))
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    build_dir = pathlib.Path(args.build_dir).resolve()
    source_dir = str(pathlib.Path.cwd().resolve())
    cache = pathlib.Path(args.cache_dir or pathlib.Path.home() / ".cache" / "meridian" / "clang-tidy")
    try:
        database = json.loads((build_dir / "compile_commands.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"tidy: cannot read {build_dir / 'compile_commands.json'}: {exc} (run `make build`)", file=sys.stderr)
        return 2
    entries = {str(pathlib.Path(e["file"]).resolve()): e for e in database}
    units = []
    for name in args.files:
        path = str(pathlib.Path(name).resolve())
        if path not in entries:
            print(f"tidy: {name} is not in {build_dir}/compile_commands.json", file=sys.stderr)
            return 2
        units.append(entries[path])

    version = subprocess.run([args.clang_tidy, "--version"], capture_output=True, text=True, check=True).stdout
    config = subprocess.run([args.clang_tidy, "--dump-config", *(f"--extra-arg={a}" for a in args.extra_arg)],
                            capture_output=True, text=True, check=True, cwd=source_dir).stdout
    common = "\0".join([KEY_VERSION, version, config, *args.extra_arg])
    deps = ninja_deps(build_dir)
    memo: dict[pathlib.Path, str] = {}
    keys = [unit_key(e, common, deps, source_dir, memo) for e in units]

    to_check = [(e, k) for e, k in zip(units, keys) if k is None or not (cache / k[:2] / k).exists()]
    extra = [f"--extra-arg={a}" for a in args.extra_arg]

    def check(entry: dict) -> subprocess.CompletedProcess:
        return subprocess.run([args.clang_tidy, "-quiet", "-p", str(build_dir), *extra, entry["file"]],
                              capture_output=True, text=True)

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (entry, key), result in zip(to_check, pool.map(lambda t: check(t[0]), to_check)):
            findings = "warning:" in result.stdout or "error:" in result.stdout
            if result.returncode != 0 or findings:
                failed += 1
                print(f"--- {os.path.relpath(entry['file'], source_dir)}")
                print(result.stdout, end="")
                print(result.stderr, end="", file=sys.stderr)
            elif key is not None:
                (cache / key[:2]).mkdir(parents=True, exist_ok=True)
                (cache / key[:2] / key).write_text(os.path.relpath(entry["file"], source_dir) + "\n")
    print(f"clang-tidy: {len(units)} translation units, {len(units) - len(to_check)} unchanged since found clean, "
          f"{len(to_check)} checked, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
