"""meridian.engine_replay: vLLM 0.32's own scheduler classes on the simulator's
clock (docs/replay.md#engine-in-the-loop-replay). Real vLLM classes throughout;
the simulator's side is the C++ replay through the bindings."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("vllm")

from meridian._meridian import sim  # noqa: E402
from meridian.engine_replay import study  # noqa: E402
from meridian.engine_replay.build import SimClock, build_scheduler, scheduler_class  # noqa: E402
from meridian.engine_replay.engine import Arm, EngineRun  # noqa: E402
from meridian.engine_replay.tokens import END_THINK, EOS, THINK, TokenPlan  # noqa: E402

pytestmark = pytest.mark.slow(40)

# Short requests, 20 conversations a second and a KV pool of 239 blocks (3,824 tokens): the
# running requests overflow it, so vLLM preempts and recomputes.
SMALL_KV = """
[cost_model]
gpu_memory_gib = 22
[workload]
kind = "mixed"
arrival_rate = 20
duration_s = 10
[workload.think]
median = 200
max = 400
min = 16
[workload.answer]
median = 40
max = 100
min = 4
"""


def params(toml: str = "", kind: str = "mixed", duration_s: float = 20, rate: float | None = None):
    p = sim.parse_replay_params(toml, "<test>", kind)
    p.workload.duration_s = duration_s
    if rate is not None:
        p.workload.arrival_rate = rate
    return p


def run(arm: str, p, seed: int = 42, on_schedule=None):
    requests = sim.generate_workload(p.workload, seed)
    clock = SimClock()
    two = arm.endswith("async")
    cls = scheduler_class(arm)
    sched = build_scheduler(cls, p, two_in_flight=two, clock=clock)
    if on_schedule is not None:
        inner = sched.schedule

        def schedule(*a, **k):
            out = inner(*a, **k)
            on_schedule(sched, out)
            return out

        sched.schedule = schedule
    engine = EngineRun(Arm(arm, cls, two), sched, p, requests, clock=clock)
    result = engine.run()
    sched.shutdown()
    return result, engine, requests


def test_token_plan_is_a_pure_function_with_the_boundaries_in_place():
    p = params()
    reqs = sim.generate_workload(p.workload, 42)
    reasoning = next(r for r in reqs if r.reasoning and not r.after)
    chat = next(r for r in reqs if not r.reasoning and not r.after)
    plan = TokenPlan(reasoning, None)
    assert len(plan.prompt) == reasoning.prompt_tokens and plan.prompt[-1] == THINK
    outs = [plan.token(i) for i in range(plan.max_tokens)]
    assert outs[reasoning.think_tokens] == END_THINK and outs[-1] == EOS
    assert END_THINK not in outs[: reasoning.think_tokens] and EOS not in outs[:-1]
    assert outs == [TokenPlan(reasoning, None).token(i) for i in range(plan.max_tokens)]  # pure
    chat_plan = TokenPlan(chat, None)
    assert chat_plan.max_tokens == chat.answer_tokens and chat_plan.token(chat.answer_tokens - 1) == EOS
    assert THINK not in chat_plan.prompt
    # A follow-up's prompt starts with its parent's transcript, token for token.
    child = next(r for r in reqs if r.after)
    parent = reqs[child.after - 1]
    transcript = TokenPlan(parent, None).transcript()
    assert len(transcript) == parent.prompt_tokens + parent.answer_tokens
    assert TokenPlan(child, transcript).prompt[: len(transcript)] == transcript


def test_two_in_flight_steps_as_vllm_does_and_lockstep_does_not():
    """As vllm/tests/v1/core/test_async_scheduler.py steps it: with a step in flight,
    a decoding request scheduled again carries two output placeholders; lockstep, one."""
    seen = {"vllm-async": 0, "meridian-sync": 0}

    def watch(arm):
        def on_schedule(sched, out):
            for rid in out.num_scheduled_tokens:
                seen[arm] = max(seen[arm], sched.requests[rid].num_output_placeholders)
        return on_schedule

    p = params(duration_s=5)
    env_before = os.environ.get("MERIDIAN_MODEL")
    a, _, _ = run("vllm-async", p, on_schedule=watch("vllm-async"))
    s, _, _ = run("meridian-sync", p, on_schedule=watch("meridian-sync"))
    assert os.environ.get("MERIDIAN_MODEL") == env_before  # the preset is named for construction only
    assert seen == {"vllm-async": 2, "meridian-sync": 1}
    # A request's first token reaches the client one step later with two in flight.
    assert a.metrics["ttft_p50_ms"] > s.metrics["ttft_p50_ms"]
    assert a.metrics["completed"] == s.metrics["completed"] == a.metrics["requests"]


@pytest.mark.parametrize("arm", ["vllm-async", "vllm-sync", "meridian-sync"])
def test_token_streams_survive_preemption_and_recompute(arm):
    p = params(SMALL_KV, duration_s=10)
    result, engine, requests = run(arm, p)
    m = result.metrics
    assert m["preemptions"] > 0, "the small KV pool must force preemptions"
    assert m["completed"] == len(requests)
    for spec in requests:
        tl = engine.live[str(spec.id)].timeline
        assert tl.completed and tl.answer_tokens == spec.answer_tokens, spec.id
        assert tl.think_tokens == spec.think_tokens, spec.id  # no duplicate or lost token after recompute
    assert m["prefill_tokens"] > sum(r.prompt_tokens for r in requests)  # recompute was paid for


def test_a_chat_victim_whose_first_token_is_in_flight_counts_as_answer_phase():
    """Stock vLLM with two steps in flight preempts the newest requests first, chat requests
    right after their prefill among them. Such a victim is answering: its first token was
    sampled, though not yet recorded. preempted_answer_phase counts it."""
    p = params(SMALL_KV, duration_s=10)
    requests = sim.generate_workload(p.workload, 42)
    chat = {str(r.id) for r in requests if not r.reasoning}
    clock = SimClock()
    cls = scheduler_class("vllm-async")
    sched = build_scheduler(cls, p, two_in_flight=True, clock=clock)
    engine = EngineRun(Arm("vllm-async", cls, True), sched, p, requests, clock=clock)
    sampled: set[str] = set()
    victims = {"recorded": 0, "in_flight": 0}
    inner = sched.schedule

    def schedule(*a, **k):
        out = inner(*a, **k)
        for rid in out.preempted_req_ids or ():
            if rid in chat and rid in sampled:
                victims["recorded" if engine.live[rid].timeline.first_token_s >= 0 else "in_flight"] += 1
        for rid in out.num_scheduled_tokens:
            if sched.requests[rid].num_computed_tokens >= sched.requests[rid].num_prompt_tokens:
                sampled.add(rid)
        return out

    sched.schedule = schedule
    result = engine.run()
    sched.shutdown()
    assert victims["in_flight"] > 0, victims
    assert result.metrics["preempted_answer_phase"] >= victims["recorded"] + victims["in_flight"]


@pytest.mark.parametrize("arm", ["vllm-sync", "vllm-async"])
def test_a_scheduler_that_stops_scheduling_is_an_error_not_a_hang(arm):
    """A scheduler that schedules nothing while requests run leaves the simulated
    clock where it is, so the run would loop forever: after a bound it is an error
    that says what the engine held."""
    steps = [0]

    def starve(sched, out):
        steps[0] += 1
        if steps[0] == 40:
            sched.max_num_scheduled_tokens = 0  # vLLM's token budget: nothing fits any more

    with pytest.raises(RuntimeError, match=r"scheduled nothing in 1001 steps in a row .* requests running"):
        run(arm, params(duration_s=5), on_schedule=starve)


def test_prefix_hits_and_lockstep_timing_match_the_simulator_on_a_follow_up_trace():
    """Below saturation, lockstep vLLM and the simulator's vllm-fcfs schedule the same steps:
    the prompt ids make vLLM's block hashes hit where the simulator's prefix cache hits."""
    p = params(duration_s=30)
    assert any(r.after for r in sim.generate_workload(p.workload, 7))
    result, _, _ = run("vllm-sync", p, seed=7)
    simulated = dict(sim.run_replay(p, "vllm-fcfs", 7))
    engine = result.metrics
    assert engine["prefix_hit_rate"] > 0.3
    assert abs(engine["prefix_hit_rate"] - simulated["prefix_hit_rate"]) < 0.02
    for key in ("ttft_p50_ms", "output_tpot_p50_ms", "think_tpot_p50_ms", "e2e_p50_ms"):
        assert engine[key] == pytest.approx(simulated[key], rel=0.10), key


def test_the_simulators_async_model_matches_vllms_two_in_flight_stepping():
    """The engine replay's first correction: vLLM's AsyncScheduler, two steps in flight, against
    the simulator's vllm-fcfs with [engine] async_scheduling, and without it (the simulator before)."""
    p = params(duration_s=30)
    result, _, _ = run("vllm-async", p, seed=9)
    engine = result.metrics
    corrected = dict(sim.run_replay(study.sim_params(p, "vllm-async"), "vllm-fcfs", 9))
    before = dict(sim.run_replay(study.sim_params(p, "vllm-async", study.CORRECTIONS), "vllm-fcfs", 9))
    for key in ("ttft_p50_ms", "ttft_p90_ms", "output_tpot_p50_ms", "think_tpot_p50_ms", "e2e_p50_ms"):
        assert corrected[key] == pytest.approx(engine[key], rel=0.05), key
    # Lockstep, the simulator misses the step a new request waits with two in flight.
    assert before["ttft_p50_ms"] < 0.85 * engine["ttft_p50_ms"]
    assert corrected["simulated_tokens"] == pytest.approx(engine["simulated_tokens"], rel=0.01)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meridian.engine_replay", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def strip_wall(report: dict) -> dict:
    for arm in report["runs"].values():
        for key in ("sim_wall_s", "sim_tokens_per_s", "schedule_wall_s", "driver_wall_s"):
            arm.pop(key)
    for arm in report["deltas"].values():
        for key in ("sim_wall_s", "sim_tokens_per_s"):
            arm.pop(key)
    report.pop("intervals")
    report.pop("targets")
    return report


def test_cli_smoke_is_deterministic_and_in_the_replays_schema(tmp_path):
    args = ["--duration-s", "8", "--seeds", "1", "--arms", "vllm-async,meridian-async", "--jobs", "1"]
    first = cli("--out-dir", str(tmp_path / "a"), *args)
    assert first.returncode == 0, first.stderr[-3000:]
    second = cli("--out-dir", str(tmp_path / "b"), *args)
    assert second.returncode == 0, second.stderr[-3000:]
    a = json.loads((tmp_path / "a" / "ab-report.json").read_text())
    b = json.loads((tmp_path / "b" / "ab-report.json").read_text())
    assert set(a) == {"schema_version", "context", "runs", "intervals", "deltas", "targets"}
    assert list(a["runs"]) == ["vllm-async", "meridian-async"]
    catalog = [name for name, _, _ in sim.metric_catalog()]
    assert all(k in a["runs"]["vllm-async"] for k in catalog)
    assert a["context"]["kv_blocks"] == sim.RooflineCostModel(params().cost_model).kv_capacity_blocks(16)
    assert "scheduler_cpu" in a["context"] and a["targets"][0]["name"] == "driver_vs_schedule"
    a["context"].pop("command"), b["context"].pop("command")
    assert strip_wall(a) == strip_wall(b)  # same seed, same report
    assert "| slo_attainment_pct |" in first.stdout


# Short single-turn requests: a goodput search and the fidelity loads in seconds.
SHORT = """
[workload]
kind = "mixed"
mean_turns = 1
[workload.think]
median = 120
max = 300
min = 16
[workload.answer]
median = 30
max = 60
min = 4
[workload.chat_output]
median = 30
max = 60
min = 4
"""


def test_goodput_and_fidelity_reports(tmp_path):
    config = tmp_path / "replay.toml"
    config.write_text(SHORT)
    out = tmp_path / "out"
    r = cli("--out-dir", str(out), "--config", str(config), "--duration-s", "4", "--seeds", "1",
            "--arms", "vllm-async,vllm-sync", "--jobs", "1", "--goodput", "--fidelity")
    assert r.returncode == 0, r.stderr[-3000:]
    goodput = json.loads((out / "goodput.json").read_text())
    simulator = goodput["simulator"]
    assert {"vllm-fcfs", "vllm-fcfs (async)", "meridian-no-forcing"} <= set(simulator)
    for arm, model in (("vllm-async", "vllm-fcfs (async)"), ("vllm-sync", "vllm-fcfs")):
        entry = goodput["policies"][arm]
        assert entry["goodput_rps"] > 0 and entry["simulator_model"] == model
        assert entry["base_rate"] == simulator[model]["per_seed"]  # the search starts at the simulator's
        assert all(p["rate"] > 0 for p in entry["points"])
    assert "simulator ÷ engine" in (out / "goodput.md").read_text()
    fidelity = json.loads((out / "fidelity.json").read_text())
    assert set(fidelity["loads"]) == {"0.5x", "0.9x", "1.1x"}
    labels = {label for label, _ in study.FIDELITY_METRICS}
    for arm in ("vllm-async", "vllm-sync"):
        assert labels | {"goodput"} <= set(fidelity["worst_error"][arm]), arm
        assert set(fidelity["within_10pct"][arm]) == set(fidelity["worst_error"][arm])
    variants = fidelity["corrections_worst_error"]
    assert set(variants["vllm-async"]) == {"corrected", "before (all corrections off)",
                                           "without scheduler_reserve_full_isl", "without kv_free_tail_first",
                                           "without async_scheduling"}
    assert "without async_scheduling" not in variants["vllm-sync"]  # lockstep has nothing to correct there
    # The async correction is what brings vllm-async's TTFT in.
    assert variants["vllm-async"]["corrected"]["TTFT P50"] < variants["vllm-async"]["without async_scheduling"]["TTFT P50"]
    md = (out / "fidelity.md").read_text()
    assert "## Each correction: worst error before → after" in md and "vllm-async vs vllm-fcfs (async)" in md


def test_the_engine_replay_judges_its_runs_by_the_simulators_ruler():
    """One rule in C++ for both replays: an engine run's verdict is sim.judge_run on its timelines,
    and a run stopped once its verdict is decided reaches the verdict of the full run."""
    p = sim.parse_replay_params(SHORT, "<test>")
    p.workload.duration_s = 6
    job = study.Job(p.to_toml(), "vllm-async", 42, 0.0)
    for rate in (2.0, 400.0):  # well inside capacity; far past it
        full = study.run_once(job, rate)
        stopped = study.run_once(job, rate, stop_when_decided=True)
        assert full["verdict"]["meets"] == stopped["verdict"]["meets"], rate
        assert full["stopped_early"] == 0
        assert full["upper_bound_rps"] > 0
        if stopped["stopped_early"]:
            assert not full["verdict"]["meets"] and stopped["verdict"]["reason"] != "met"
            assert stopped["makespan_s"] <= full["makespan_s"]
    assert study.run_once(job, 2.0)["verdict"]["meets"]
    assert not study.run_once(job, 400.0)["verdict"]["meets"]
    # The same timelines judged directly: one rule, not two.
    p.workload.arrival_rate = 2.0
    result, engine, _ = run("vllm-async", p)
    direct = sim.judge_run(engine._timelines(), engine.window_end, p.slo)
    assert direct == result.verdict
    assert result.metrics["meets_ruler"] == (1.0 if direct["meets"] else 0.0)


def test_window_check_and_physical_bound_in_the_goodput_report(tmp_path):
    config = tmp_path / "replay.toml"
    config.write_text(SHORT)
    out = tmp_path / "out"
    r = cli("--out-dir", str(out), "--config", str(config), "--duration-s", "4", "--seeds", "1",
            "--arms", "vllm-async", "--jobs", "1", "--goodput", "--window-check")
    assert r.returncode == 0, r.stderr[-3000:]
    goodput = json.loads((out / "goodput.json").read_text())
    assert goodput["ruler"] == "sustainable" and goodput["window_s"] == 4
    entry = goodput["policies"]["vllm-async"]
    assert entry["upper_bound_rps"]["mean"] > 0 and not entry["above_bound"]
    assert entry["fraction_of_bound"]["mean"] == pytest.approx(entry["goodput_rps"] / entry["upper_bound_rps"]["mean"])
    check = goodput["window_check"]
    assert check["doubled_window_s"] == 8 and set(check["policies"]) == {"vllm-async"}
    c = check["policies"]["vllm-async"]
    assert c["doubled_goodput_rps"] > 0 and c["agree"] == (abs(c["ratio"] - 1) <= 0.05)
    assert "## Window check: 4 s against 8 s of arrivals" in (out / "goodput.md").read_text()
    bad = cli("--out-dir", str(tmp_path / "x"), "--window-check")
    assert bad.returncode == 2 and "--window-check" in bad.stderr


def test_vllm_best_arm_runs_the_setting_and_reports_meridians_ratio_to_it(tmp_path):
    """vllm-best-async: vLLM's stock async scheduler with a setting of the vllm-best grid (here
    named; by default the simulator's search picks it), searched like any arm, with
    meridian-async's ratio to it beside the simulator's."""
    config = tmp_path / "replay.toml"
    config.write_text(SHORT)
    out = tmp_path / "out"
    label = "max_num_batched_tokens=512 long_prefill_token_threshold=256 priority"
    r = cli("--out-dir", str(out), "--config", str(config), "--duration-s", "4", "--seeds", "1",
            "--arms", "meridian-async,vllm-best-async", "--vllm-best-setting", label, "--jobs", "1", "--goodput")
    assert r.returncode == 0, r.stderr[-3000:]
    goodput = json.loads((out / "goodput.json").read_text())
    assert goodput["context"]["vllm_best_setting"] == label
    entry = goodput["policies"]["vllm-best-async"]
    assert entry["goodput_rps"] > 0 and entry["simulator_model"] == "vllm-best (async)"
    assert entry["base_rate"] == goodput["simulator"]["vllm-best (async)"]["per_seed"]
    assert goodput["ratios"]["meridian-async"]["vllm-best-async"]["mean"] > 0
    assert goodput["simulator"]["ratio_meridian_no_forcing_to_vllm_best_async"]["mean"] > 0
    assert f"meridian-async ÷ vllm-best-async ({label})" in (out / "goodput.md").read_text()


def test_vllm_best_arm_builds_the_setting_into_vllms_scheduler():
    job = study.Job(params().to_toml(), "vllm-best-async", 42, 0.0, (1024, 256, True))
    p = study._params(job)
    sched = build_scheduler(scheduler_class("vllm-best-async"), p, two_in_flight=True, clock=SimClock(),
                            priority=True)
    assert sched.max_num_scheduled_tokens == 1024
    assert sched.scheduler_config.long_prefill_token_threshold == 256
    assert sched.policy.value == "priority"
    sched.shutdown()


def test_meridian_arms_are_given_the_slo_they_are_judged_by(tmp_path, monkeypatch):
    """As the simulator gives its Meridian policies [slo] (ADR-0026, ADR-0027), through a
    configuration file that is gone once the scheduler is built (a replay leaves no files)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("MERIDIAN_CONFIG", raising=False)
    p = params("[slo]\nttft_ms = 2000.0\nttfv_ms = 60000.0\noutput_tpot_ms = 40.0\nthink_tpot_ms = 120.0\n")
    sched = build_scheduler(scheduler_class("meridian-async"), p, two_in_flight=True, clock=SimClock())
    options = sched.meridian.core.options
    assert (options.output_tpot_budget_ms, options.think_tpot_budget_ms) == (40.0, 120.0)
    assert (options.ttft_slo_ms, options.ttfv_slo_ms) == (2000.0, 60000.0)
    assert sched.meridian.admit_after_ns == 1_000_000_000
    assert list(tmp_path.iterdir()) == []
    assert "MERIDIAN_CONFIG" not in os.environ
    sched.shutdown()


def test_the_window_is_the_workloads_own_unless_given(tmp_path):
    """No --duration-s: the workload's window (its preset's, or the config's [workload] duration_s),
    which the simulator's goodput uses too; --duration-s overrides both."""
    from meridian.engine_replay import cli as module

    def window(*argv: str) -> float:
        return module.load_params(module.parse_args(["--out-dir", str(tmp_path), *argv])).workload.duration_s

    def preset(kind: str) -> float:
        return sim.parse_replay_params("", "<defaults>", kind).workload.duration_s

    assert window() == preset("mixed") == 3600
    assert window("--workload", "long-think") == preset("long-think") == 14400
    config = tmp_path / "replay.toml"
    config.write_text("[workload]\nduration_s = 45\n")
    assert window("--config", str(config)) == 45
    assert window("--config", str(config), "--duration-s", "12") == 12


@pytest.mark.parametrize(("args", "message"), [
    (["--arms", "vllm-async,fast"], "unknown arm 'fast'"),
    (["--arms", "vllm-best-async", "--vllm-best-setting", "max_num_batched_tokens=3"],
     "is not a setting of the vllm-best grid"),
    (["--vllm-best-setting", "max_num_batched_tokens=512 long_prefill_token_threshold=0 fcfs"],
     "only the vllm-best-async arm uses it"),
    (["--arms", "vllm-best-async", "--fidelity"], "the vllm-best-async arm has no fidelity study"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--duration-s", "-1"], "--duration-s must be in (0, 1e6)"),
    (["--config", "/nonexistent/replay.toml"], "--config: no such file"),
])
def test_bad_arguments_are_named(tmp_path, args, message):
    r = cli("--out-dir", str(tmp_path), *args, timeout=60)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_bad_config_names_the_field(tmp_path):
    bad = tmp_path / "replay.toml"
    bad.write_text("[slo]\nttft_ms = -5\n")
    r = cli("--out-dir", str(tmp_path / "o"), "--config", str(bad), timeout=60)
    assert r.returncode != 0 and "slo.ttft_ms" in r.stderr, r.stderr


def test_console_script_forwards_other_commands_to_the_cpp_cli(tmp_path, meridian_bin):
    from meridian.engine_replay import cli as module

    script = (f"import sys; sys.argv = ['meridian', 'check-config', '--help']; "
              f"from meridian.engine_replay.cli import console_main; raise SystemExit(console_main())")
    env = dict(os.environ, MERIDIAN_BIN=str(meridian_bin))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=60, check=False)
    assert r.returncode == 0 and "check-config" in r.stdout, r.stderr
    env.pop("MERIDIAN_BIN")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=60, check=False)
    assert r.returncode == 2 and "MERIDIAN_BIN" in r.stderr
    assert pathlib.Path(module.__file__).name == "cli.py"


def test_console_script_never_runs_a_binary_from_the_callers_directory(tmp_path):
    """A `./build/bin/meridian` in the working directory is whatever that directory holds: the
    console script neither runs it nor a relative $MERIDIAN_BIN that names it."""
    planted = tmp_path / "build" / "bin" / "meridian"
    planted.parent.mkdir(parents=True)
    marker = tmp_path / "ran"
    planted.write_text(f"#!/bin/sh\ntouch {marker}\n")
    planted.chmod(0o755)
    script = ("import sys; sys.argv = ['meridian', 'check-config', '--help']; "
              "from meridian.engine_replay.cli import console_main; raise SystemExit(console_main())")
    env = {k: v for k, v in os.environ.items() if k != "MERIDIAN_BIN"}
    for extra in ({}, {"MERIDIAN_BIN": "build/bin/meridian"}, {"MERIDIAN_BIN": str(tmp_path)}):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**env, **extra},
                           cwd=tmp_path, timeout=60, check=False)
        assert r.returncode == 2 and "MERIDIAN_BIN" in r.stderr, (extra, r.stderr)
        assert len(r.stderr.splitlines()) == 1, r.stderr
        assert not marker.exists(), extra


@pytest.mark.parametrize("call", ["generate_workload", "run_replay"])
def test_the_python_simulator_api_enforces_the_request_limit(call):
    """Memory without bound (issue 48): the API once skipped the CLI's request limit and grew,
    holding the interpreter lock, until the OOM killer. The limit is in the C++ entry point
    every caller shares, so it raises at once, naming the field."""
    p = params(duration_s=3600, rate=1e6)
    with pytest.raises(ValueError, match=r"workload\.arrival_rate .*the expected request count\) must be <= "
                                         r"5000000"):
        if call == "generate_workload":
            sim.generate_workload(p.workload, 1)
        else:
            sim.run_replay(p, "vllm-fcfs", 1)
