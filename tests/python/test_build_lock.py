"""`make build` and the wheel step hold one lock per build tree, because `make test` runs
lanes side by side that each build the same tree, and two cmake runs at once break it
(ninja: "failed recompaction"; CI failed so at stop 43). docs/testing.md#one-build-at-a-time."""
import fcntl
import os
import pathlib
import signal
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_make_build_and_the_wheel_step_wait_while_another_holds_the_tree(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    with open(build / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        make = subprocess.Popen(["make", "--no-print-directory", "build", f"BUILD_DIR={build}"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        package = subprocess.Popen(["scripts/test_package.sh", str(build), "RelWithDebInfo"], cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(3)
            assert make.poll() is None, make.communicate()[0]
            assert package.poll() is None, package.communicate()[0]
            assert not (build / "CMakeFiles").exists(), "cmake ran in a tree another process holds"
            fcntl.flock(lock, fcntl.LOCK_UN)
            # Released: the wheel step goes on (and finds no extension in the empty tree), and
            # make goes on to configure the tree.
            out, _ = package.communicate(timeout=60)
            assert package.returncode == 1
            assert "expected one" in out and "_meridian*.so" in out
            assert wait_for(lambda: (build / "CMakeFiles").exists(), 120), "make build never configured"
        finally:
            if make.poll() is None:
                os.killpg(make.pid, signal.SIGTERM)
            make.wait(timeout=60)
            if package.poll() is None:
                package.kill()
                package.wait()
