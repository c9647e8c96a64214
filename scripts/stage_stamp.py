#!/usr/bin/env python3
"""What changed, for one stage of `make test`, since that stage last passed in this checkout.

`scripts/make_test.sh` asks before a stage runs and records after it passes
(docs/testing.md#incremental-runs). A stage's inputs are every file of the checkout that
git sees (tracked, or untracked and not ignored) except the paths listed for it below, which
that stage provably never reads, plus an environment line: the Debian packages installed, the
Python interpreter, the Python environments' install stamps, the variables that change how
the stage builds or runs, and the build directories it uses. A stage whose inputs are all
unchanged is not run again; a record lives in BUILD_DIR/.make-test/, so a fresh clone, `make
clean` or a new build directory runs everything.

    scripts/stage_stamp.py check STAGE     exit 0: unchanged since its last pass; 1: changed
                                           (the changed paths are printed, one per line); the
                                           inputs as they are now are kept aside for `record`
    scripts/stage_stamp.py record STAGE    after STAGE passed: those files, and the environment
                                           as the stage left it, become its last pass (a file
                                           edited while it ran is not taken as tested)
    scripts/stage_stamp.py pytest-modules PATH ...
                                           when every PATH is a pytest module
                                           (tests/python/test_*.py), the modules to run again:
                                           those that still exist and every test module that
                                           imports one of them, directly or not; exit 1
                                           (print nothing) when any PATH is something else
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys

# Paths a stage never reads (prefixes of paths relative to the checkout).
CPP_ONLY = ("tests/python/", "python/", "bindings/python/", "deploy/")
EXCLUDED = {
    "test-python": ("tests/cpp/", "fuzz/"),
    "docs-check": ("tests/cpp/", "tests/python/", "fuzz/"),
    "test-vllm-compat": ("tests/cpp/", "fuzz/", "docs/", "deploy/"),
    "test-asan": CPP_ONLY,
    "test-tsan": CPP_ONLY,
    "fuzz-smoke": CPP_ONLY,
}
# The build trees each stage uses (suffixes of BUILD_DIR); their CMake caches are part of the
# environment, less scikit-build-core's per-run scratch paths.
BUILD_TREES = {"test-python": ("",), "docs-check": ("",), "test-vllm-compat": ("",), "test-asan": ("-asan",),
               "test-tsan": ("-tsan",), "fuzz-smoke": ("-fuzz",)}
# The Python environments a stage runs in (their install stamps are part of its environment).
VENVS = {"test-python": (".venv",), "docs-check": (".venv",), "test-vllm-compat": (".venv-vllm-0.33",)}
ENV_VARIABLES = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CMAKE_FLAGS", "BUILD_TYPE", "JOBS", "ASAN_OPTIONS",
                 "UBSAN_OPTIONS", "TSAN_OPTIONS", "FUZZ_SMOKE_SECONDS", "PYTHON", "PYTEST_ADDOPTS", "MERIDIAN_CONFIG")


def checkout_files(root: pathlib.Path) -> dict[str, str]:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    paths = sorted(p for p in set(listed) if p and (root / p).is_file())
    hashes = subprocess.run(["git", "-C", str(root), "hash-object", "--stdin-paths"], input="\n".join(paths),
                            capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(paths, hashes))


def environment(root: pathlib.Path, stage: str, build_dir: pathlib.Path) -> str:
    h = hashlib.sha256()
    h.update(subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"], capture_output=True,
                            check=False).stdout)
    for venv in VENVS.get(stage, ()):
        python = root / venv / "bin" / "python"
        h.update(f"{venv} -> {os.path.realpath(python) if python.exists() else 'none'}\n".encode())
        for stamp in sorted((root / venv).glob(".installed-*")):
            h.update(stamp.name.encode() + stamp.read_bytes())
    for name in ENV_VARIABLES:
        h.update(f"{name}={os.environ.get(name, '<unset>')}\n".encode())
    for suffix in BUILD_TREES.get(stage, ("",)):
        cache = pathlib.Path(f"{build_dir}{suffix}") / "CMakeCache.txt"
        if cache.exists():
            lines = [line for line in cache.read_text(errors="replace").splitlines() if "SKBUILD_" not in line]
            h.update("\n".join(lines).encode())
        else:
            h.update(f"no {cache}".encode())
    return h.hexdigest()


def inputs(root: pathlib.Path, stage: str, build_dir: pathlib.Path) -> dict:
    excluded = EXCLUDED.get(stage, ())
    files = {p: h for p, h in checkout_files(root).items() if not p.startswith(excluded)}
    return {"environment": environment(root, stage, build_dir), "files": files}


TEST_MODULE = re.compile(r"^tests/python/(test_\w+)\.py$")


def pytest_modules(root: pathlib.Path, changed: list[str]) -> list[str] | None:
    """The changed test modules and the test modules that import them (transitively)."""
    names = []
    for path in changed:
        match = TEST_MODULE.match(path)
        if not match:
            return None
        names.append(match.group(1))
    modules = {m.stem: m.read_text(encoding="utf-8", errors="replace")
               for m in (root / "tests" / "python").glob("test_*.py")}
    wanted = set(names)
    grew = True
    while grew:
        grew = False
        for name, text in modules.items():
            if name not in wanted and any(re.search(rf"^\s*(from|import)\s+{w}\b", text, re.M) for w in wanted):
                wanted.add(name)
                grew = True
    return sorted(f"tests/python/{name}.py" for name in wanted if name in modules)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "pytest-modules":
        modules = pytest_modules(pathlib.Path(__file__).resolve().parents[1], argv[2:])
        if modules is None:
            return 1
        print("\n".join(modules))
        return 0
    if len(argv) != 3 or argv[1] not in {"check", "record"}:
        print(__doc__, file=sys.stderr)
        return 2
    action, stage = argv[1], argv[2]
    root = pathlib.Path(__file__).resolve().parents[1]
    build_dir = (root / os.environ.get("BUILD_DIR", "build")).resolve()
    record = build_dir / ".make-test" / f"{stage}.json"
    pending = record.with_suffix(".pending")
    if action == "record":
        if not pending.exists():
            print(f"stage_stamp: no `check {stage}` before this record", file=sys.stderr)
            return 2
        # The files as they were before the stage ran (an edit made meanwhile is not taken as
        # tested); the environment as the stage left it, since the stage itself makes part of
        # it (its build trees' CMake caches, the environments' install stamps).
        passed = json.loads(pending.read_text())
        passed["environment"] = environment(root, stage, build_dir)
        record.write_text(json.dumps(passed))
        pending.unlink()
        return 0
    now = inputs(root, stage, build_dir)
    record.parent.mkdir(parents=True, exist_ok=True)
    pending.write_text(json.dumps(now))
    try:
        last = json.loads(record.read_text())
    except (OSError, ValueError):
        print("<no pass recorded>")
        return 1
    if last.get("environment") != now["environment"]:
        print("<environment>")
    before, after = last.get("files", {}), now["files"]
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    for path in changed:
        print(path)
    return 1 if changed or last.get("environment") != now["environment"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
