"""Meridian's metrics from inside the real vLLM (CPU build, the tiny Qwen3 with
dummy weights) to a Prometheus scrape: generate, scrape, see the counters move.

1. ``LLM(...)`` in this process with ``meridian.vllm.Scheduler`` and
   ``ForceThinkEnd``: Meridian's own ``/metrics`` port ([telemetry]
   prometheus_port).
2. ``vllm serve`` with ``PROMETHEUS_MULTIPROC_DIR``: the same series on vLLM's
   own ``/metrics`` (served by the API-server process, written by the engine
   core process), and on Meridian's port of the engine core.

The prompts open a think block and the model (random weights) never closes it,
so Meridian's hard cap (max_think_tokens) forces every end of thinking: the
exit_think and hard_cap counters have exact expectations.
"""
from __future__ import annotations

import gc
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from vllm_rig import END_THINK, THINK, TINY_MODEL

# About 40 s on 2 cores: scheduled first (conftest.py), so parallel workers end together.
pytestmark = pytest.mark.slow(40)

REPO = pathlib.Path(__file__).resolve().parents[2]
MAX_THINK = 6
N_REQUESTS = 3
MAX_TOKENS = 14


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def check_moved(s: dict, *, forcing: bool) -> None:
    """What N_REQUESTS think-then-answer requests of MAX_TOKENS tokens make the
    counters do (every mismatch reported at once)."""
    visible = MAX_TOKENS - MAX_THINK - 1  # after </think>
    exact = {
        # The C++ scheduler plans vLLM's prefill of each prompt (the adapter passes the prompts
        # vLLM admits, ADR-0025), then each request from its first token on: one decode a step.
        ("meridian_scheduler_scheduled_tokens_total", ()):
            N_REQUESTS * (len(think_prompt()) + MAX_TOKENS - 1),
        ("meridian_phase_transitions_total", (("kind", "exit_think"),)): N_REQUESTS,
        ("meridian_requests_completed_total", (("how", "ended"),)): N_REQUESTS,
        ("meridian_think_tokens_per_request_count", ()): N_REQUESTS,
        ("meridian_request_ttft_seconds_count", ()): N_REQUESTS,
        ("meridian_request_ttfv_seconds_count", ()): N_REQUESTS,
        ("meridian_request_ttot_seconds_count", ()): N_REQUESTS,
        ("meridian_request_e2e_seconds_count", ()): N_REQUESTS,
        ("meridian_output_itl_seconds_count", ()): N_REQUESTS * (visible - 1),  # gaps between visible tokens
        ("meridian_failsafe_fallbacks_total", (("component", "scheduler"),)): 0,
        ("meridian_phase_router_tracked_requests", ()): 0,
    }
    if forcing:
        exact[("meridian_budget_force_reason_total", (("reason", "hard_cap"),))] = N_REQUESTS
        exact[("meridian_budget_force_triggered_total", ())] = N_REQUESTS
        exact[("meridian_failsafe_fallbacks_total", (("component", "logits_processor"),))] = 0
    wrong = {k: (value(s, k[0], **dict(k[1])), v) for k, v in exact.items() if value(s, k[0], **dict(k[1])) != v}
    slo = sum(value(s, "meridian_slo_requests_total", outcome=o) for o in ("met", "missed"))
    if slo != N_REQUESTS:
        wrong["slo met + missed"] = (slo, N_REQUESTS)
    for name, low in (("meridian_scheduler_steps_total", MAX_TOKENS - 1),
                      ("meridian_schedule_batch_duration_seconds_count", MAX_TOKENS - 1),
                      ("meridian_schedule_batch_duration_ns_count", MAX_TOKENS - 1),
                      ("meridian_request_e2e_seconds_sum", 1e-9), ("meridian_block_manager_capacity_bytes", 1)):
        if value(s, name) < low:
            wrong[name] = (value(s, name), f">= {low}")
    assert not wrong, "(got, expected): " + repr(wrong)


def think_prompt() -> list[int]:
    return [785, 3974, 13876, 38835, 916, 279, 15678, 5562, 13, 198, THINK, 198]


@pytest.mark.e2e
def test_llm_metrics_on_meridians_port(tmp_path, monkeypatch):
    from meridian.vllm import ForceThinkEnd
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    port = free_port()
    (tmp_path / "meridian.toml").write_text(
        f"[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = {MAX_THINK}\n"
        f"[telemetry]\nprometheus_host = \"127.0.0.1\"\nprometheus_port = {port}\n")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    monkeypatch.setenv("MERIDIAN_CONFIG", str(tmp_path / "meridian.toml"))
    llm = LLM(model=str(TINY_MODEL), load_format="dummy", enforce_eager=True, dtype="float32", max_model_len=256,
              max_num_seqs=8, reasoning_parser="qwen3", logits_processors=[ForceThinkEnd],
              scheduler_cls="meridian.vllm.Scheduler", seed=0)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        before = scrape(url)  # served from start-up, all zero
        assert value(before, "meridian_scheduler_steps_total") == 0
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=think_prompt())] * N_REQUESTS, params)
        for out in outputs:  # the premise: Meridian forced </think> at the cap
            assert list(out.outputs[0].token_ids).index(END_THINK) == MAX_THINK
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        assert scheduler.meridian_stats()["metrics_port"] == port
        after = scrape(url)
        check_moved(after, forcing=True)  # the logits processor shares the engine's process here
        assert value(after, "meridian_scheduler_steps_total") == scheduler.meridian.core.counters.steps
    finally:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()
    with pytest.raises(OSError):  # the engine's shutdown closed the port
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def serve_command(model: str, flags: list[str]) -> list[str]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from serve_bench.server import serve_command as bench_serve_command
    finally:
        sys.path.pop(0)
    return bench_serve_command(sys.executable, model, flags, None)


@pytest.mark.e2e
def test_vllm_serve_metrics_reach_vllms_own_metrics_endpoint(tmp_path):
    import meridian

    multiproc = tmp_path / "prometheus-multiproc"
    multiproc.mkdir()
    api_port, meridian_port = free_port(), free_port()
    (tmp_path / "meridian.toml").write_text(
        f"[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = {MAX_THINK}\n"
        f"[telemetry]\nprometheus_port = {meridian_port}\n")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(multiproc), MERIDIAN_CONFIG=str(tmp_path / "meridian.toml"))
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # `vllm serve` as deployed: the engine core in its own process
    package_root = str(pathlib.Path(meridian.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    flags = ["--load-format", "dummy", "--enforce-eager", "--dtype", "float32", "--reasoning-parser", "qwen3",
             "--max-model-len", "256", "--max-num-seqs", "8", "--port", str(api_port), "--host", "127.0.0.1",
             "--scheduler-cls", "meridian.vllm.Scheduler", "--logits-processors", "meridian.vllm:ForceThinkEnd"]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(serve_command(str(TINY_MODEL), flags), env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{api_port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-5000:]
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "vllm serve did not start in 300 s"
                time.sleep(1)
        body = json.dumps({"model": str(TINY_MODEL), "prompt": think_prompt(), "max_tokens": MAX_TOKENS,
                           "temperature": 0, "ignore_eos": True, "return_token_ids": True}).encode()
        for _ in range(N_REQUESTS):
            req = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
            assert reply["choices"][0]["token_ids"].index(END_THINK) == MAX_THINK  # forced at the cap
        # vLLM's own /metrics: the engine core's series, through the multiprocess files.
        vllm_side = scrape(base + "/metrics")
        assert value(vllm_side, "vllm:request_success_total", finished_reason="length",
                     model_name=str(TINY_MODEL), engine="0") == N_REQUESTS  # vLLM's, on the same page
        check_moved(vllm_side, forcing=True)
        # Meridian's own port on the engine core: the same numbers.
        ours = scrape(f"http://127.0.0.1:{meridian_port}/metrics")
        check_moved(ours, forcing=False)
        assert value(ours, "meridian_scheduler_steps_total") == value(vllm_side, "meridian_scheduler_steps_total")
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
