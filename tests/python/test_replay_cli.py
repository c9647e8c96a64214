"""`meridian replay` as an operator runs it: the report contract of SPEC §4,
determinism, bad input, and the plots made from its output."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTRACT_POLICIES = ["meridian", "vllm-fcfs", "vllm-priority", "static-budget"]
ALL_POLICIES = CONTRACT_POLICIES + ["meridian-no-forcing", "vllm-fcfs-tuned"]
CONTRACT_METRICS = [
    "ttft_p95_ms", "ttot_p95_ms", "output_itl_p99_ms", "think_tpot_p99_ms", "think_tokens_avg",
    "throughput_tokens_per_s", "preemptions", "output_critical_eviction_events", "simulated_tokens", "sim_wall_s",
    "ttfv_p95_ms", "slo_attainment_pct",
]


def replay(meridian_bin, out_dir, *args):
    cmd = [str(meridian_bin), "replay", "--duration-s", "30", "--out-dir", str(out_dir), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def report_dir(meridian_bin, tmp_path_factory):  # one replay per test: it takes a fraction of a second
    out = tmp_path_factory.mktemp("replay")
    result = replay(meridian_bin, out)
    assert result.returncode == 0, result.stderr
    assert "| metric |" in result.stdout  # the table is printed
    return out


def test_ab_report_has_the_contract_keys(report_dir):
    report = json.loads((report_dir / "ab-report.json").read_text())
    assert report["context"]["seeds"] == [42, 43, 44, 45, 46]  # five seeds by default
    for policy in ALL_POLICIES:
        for metric in CONTRACT_METRICS:
            value = report["runs"][policy][metric]
            assert isinstance(value, (int, float)), (policy, metric)
            interval = report["intervals"][policy][metric]
            assert len(interval["per_seed"]) == 5, (policy, metric)
            low, high = interval["ci95"]
            assert low <= value <= high, (policy, metric, interval)
            # The reported value is the mean of the per-seed values.
            assert value == pytest.approx(sum(interval["per_seed"]) / 5, rel=1e-9, abs=1e-9), (policy, metric)
        assert report["runs"][policy]["completed"] == report["runs"][policy]["requests"]
        assert 0 <= report["runs"][policy]["slo_attainment_pct"] <= 100
    delta = report["deltas"]["vllm-fcfs-tuned"]["meridian-no-forcing"]["output_itl_p99_ms"]
    assert set(delta) >= {"delta_pct", "ci95", "per_seed", "flag", "crosses_zero"}
    flags = {d["flag"] for d in report["deltas"]["vllm-fcfs"]["meridian"].values()}
    assert flags <= {"WIN", "win", "FLAT", "loss", "LOSS"}
    assert {t["name"] for t in report["targets"]} >= {"ttot_p95_vs_vllm_fcfs", "output_itl_p99_vs_vllm_fcfs"}
    for policy in CONTRACT_POLICIES:
        per = json.loads((report_dir / policy / "report.json").read_text())
        assert per["policy"] == policy
        assert per["series"] and per["cdf"]["output_itl_ms"]
    assert (report_dir / "ab-report.md").read_text().startswith("# Meridian A/B replay")


def test_same_seed_same_report(meridian_bin, report_dir, tmp_path):
    again = replay(meridian_bin, tmp_path)
    assert again.returncode == 0, again.stderr

    def stable(path):
        runs = json.loads(path.read_text())["runs"]
        return {p: {k: v for k, v in m.items() if not k.startswith("sim_")} for p, m in runs.items()}

    assert stable(report_dir / "ab-report.json") == stable(tmp_path / "ab-report.json")


def test_trace_replay_and_written_workload_round_trip(meridian_bin, report_dir, tmp_path):
    result = replay(meridian_bin, tmp_path, "--trace", report_dir / "workload.jsonl", "--policies", "vllm-fcfs")
    assert result.returncode == 0, result.stderr
    # workload.jsonl is the first seed's workload; a trace is the same workload under every seed.
    original = json.loads((report_dir / "ab-report.json").read_text())["intervals"]["vllm-fcfs"]
    traced = json.loads((tmp_path / "ab-report.json").read_text())["intervals"]["vllm-fcfs"]
    assert traced["requests"]["per_seed"] == [original["requests"]["per_seed"][0]] * 5
    assert traced["output_tokens_total"]["per_seed"][0] == original["output_tokens_total"]["per_seed"][0]


def test_bad_input_names_the_field(meridian_bin, tmp_path):
    params = tmp_path / "replay.toml"
    params.write_text("[cost_model]\nbandwidth_efficiency = 1.5\n")
    result = replay(meridian_bin, tmp_path, "--params", params)
    assert result.returncode == 1
    assert "cost_model.bandwidth_efficiency must be in (0, 1]; got 1.5" in result.stderr
    params.write_text("[slo]\nttfv_ms = -5\n")
    result = replay(meridian_bin, tmp_path, "--params", params)
    assert result.returncode == 1
    assert "slo.ttfv_ms must be in [0, 1000000000]; got -5" in result.stderr
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "answer_tokens": 5}\n{"arrival_s": 1}\n')
    result = replay(meridian_bin, tmp_path, "--trace", trace)
    assert result.returncode == 1
    assert f"{trace}:2: prompt_tokens: is required" in result.stderr
    # A fan-out (two follow-ups of one turn) is refused with its line, not replayed as one
    # request with the rest never arriving (issue 27).
    first = '{"arrival_s": 0, "prompt_tokens": 10, "answer_tokens": 5, "conversation": 1}\n'
    turn = '{"after": 1, "prompt_tokens": 10, "answer_tokens": 5, "conversation": 1}\n'
    trace.write_text(first + turn + turn)
    result = replay(meridian_bin, tmp_path, "--trace", trace)
    assert result.returncode == 1
    assert f"{trace}:3: after: request 1 (line 1) already has a follow-up on line 2" in result.stderr
    result = replay(meridian_bin, tmp_path, "--policies", "vllm-fifo")
    assert result.returncode == 2  # a usage error
    assert 'unknown policy "vllm-fifo"' in result.stderr


@pytest.mark.parametrize(
    "args, params, needle",
    [
        # Issue 27: each value in range alone, the derived quantity not: the link read as infinitely
        # fast (7,019 blocks offloaded, 0 % busy) and pacing silently stopped.
        (["--disagg-fabric", "nixl", "--disagg-bandwidth-gbps", "1e-12"], None,
         "--disagg-bandwidth-gbps: disagg.bandwidth_gbps = 1e-12 GB/s takes"),
        ([], '[disagg]\nfabric = "nixl"\nhash_gbps = 1e-300\n', "disagg.hash_gbps = 1e-300 GB/s takes"),
        (["--metrics-port", "0", "--realtime-factor", "1e-300"], None,
         "--realtime-factor: 1e-300 paces a run of up to 86400 simulated seconds"),
    ],
)
def test_derived_quantities_are_checked_before_the_run(meridian_bin, tmp_path, args, params, needle):
    if params is not None:
        (tmp_path / "p.toml").write_text(params)
        args = [*args, "--params", tmp_path / "p.toml"]
    result = replay(meridian_bin, tmp_path / "out", *args)
    assert result.returncode in (1, 2)
    assert needle in result.stderr, result.stderr
    assert "replay started" not in result.stderr  # refused before any work
    assert not (tmp_path / "out" / "ab-report.json").exists()


def test_a_blocked_report_path_fails_before_the_run(meridian_bin, tmp_path):
    """Issue 27: a blocked ab-report.json failed only after the whole run."""
    (tmp_path / "ab-report.json").mkdir()
    result = replay(meridian_bin, tmp_path, "--seeds", "1")
    assert result.returncode == 1
    assert f"cannot write {tmp_path / 'ab-report.json'}: something that is not a file is in its place" in result.stderr
    assert "replay started" not in result.stderr


def test_replay_reads_meridian_config_as_documented(meridian_bin, tmp_path, monkeypatch):
    """docs/configuration.md: a wrong $MERIDIAN_CONFIG is an error; replay used the defaults."""
    result = subprocess.run([str(meridian_bin), "replay", "--duration-s", "5", "--seeds", "1", "--out-dir",
                             str(tmp_path)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "MERIDIAN_CONFIG": str(tmp_path / "absent.toml")})
    assert result.returncode == 1
    assert f"cannot read config file '{tmp_path / 'absent.toml'}'" in result.stderr
    cfg = tmp_path / "m.toml"
    cfg.write_text("[scheduler]\nmax_think_tokens = 4096\n")
    result = subprocess.run([str(meridian_bin), "replay", "--duration-s", "5", "--seeds", "1", "--policies",
                             "meridian", "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "MERIDIAN_CONFIG": str(cfg)})
    assert result.returncode == 0, result.stderr
    assert f"configuration loaded from {cfg}" in result.stderr


def test_goodput_and_pareto_reports_and_plots(meridian_bin, tmp_path):
    pytest.importorskip("matplotlib")
    result = replay(meridian_bin, tmp_path, "--goodput", "--pareto", "--seeds", "2",
                    "--policies", "vllm-fcfs,vllm-fcfs-tuned,meridian-no-forcing,meridian")
    assert result.returncode == 0, result.stderr
    assert "# Goodput" in result.stdout and "# Forcing" in result.stdout
    goodput = json.loads((tmp_path / "goodput.json").read_text())
    assert goodput["slo"] == {"ttft_ms": 1000, "ttfv_ms": 0, "output_tpot_ms": 20, "think_tpot_ms": 80}
    assert goodput["attainment_target_pct"] == 90
    assert goodput["seeds"] == [42, 43]
    for policy in ["vllm-fcfs", "vllm-fcfs-tuned", "meridian-no-forcing", "meridian"]:
        entry = goodput["policies"][policy]
        assert entry["goodput_rps"] > 0, policy
        assert len(entry["per_seed"]) == 2
        assert entry["goodput_rps"] == pytest.approx(sum(entry["per_seed"]) / 2)
        # Each seed's goodput is a rate whose run met the ruler: each class at >= 90 % after the warm-up,
        # sustainable; no rate above it that the search ran did, below the first failure.
        for seed, value in zip(goodput["seeds"], entry["per_seed"]):
            met = [p for p in entry["points"] if p["seed"] == seed and p["rate"] == value]
            assert met and met[0]["meets"] and met[0]["sustainable"], (policy, seed)
            assert met[0]["chat_pct"] >= 90 and met[0]["reasoning_pct"] >= 90, (policy, seed)
            first_fail = min((p["rate"] for p in entry["points"] if p["seed"] == seed and not p["meets"]),
                             default=float("inf"))
            assert value < first_fail, (policy, seed)
        # Its physical bound, for its own work, is above it.
        assert entry["upper_bound_rps"]["mean"] > entry["goodput_rps"] and not entry["above_bound"], policy
        assert entry["fraction_of_bound"]["mean"] == pytest.approx(
            sum(g / b for g, b in zip(entry["per_seed"], entry["upper_bound_rps"]["per_seed"])) / 2)
    assert goodput["ruler"]["name"] == "sustainable" and goodput["window_s"] == 30
    assert set(goodput["ratios"]["meridian-no-forcing"]) == {"vllm-fcfs", "vllm-fcfs-tuned"}
    pareto = json.loads((tmp_path / "pareto.json").read_text())
    budgets = [p["thinking_token_budget"] for p in pareto["points"] if p["policy"] == "static-budget"]
    assert min(budgets) <= 1024 and max(budgets) >= 8192
    assert any(p["policy"] == "meridian" for p in pareto["points"])
    assert "proxy" in pareto["forced_before_answer_is"]
    plots = subprocess.run([sys.executable, str(REPO / "benchmarks" / "plot_replay.py"), str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert plots.returncode == 0, plots.stderr
    for name in ["goodput.png", "pareto.png"]:
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_vllm_best_is_the_best_of_the_settings_and_runs_at_its_setting(meridian_bin, tmp_path):
    result = replay(meridian_bin, tmp_path, "--goodput", "--seeds", "1", "--workload", "long-prompt",
                    "--policies", "vllm-fcfs,vllm-best,meridian-no-forcing")
    assert result.returncode == 0, result.stderr
    goodput = json.loads((tmp_path / "goodput.json").read_text())
    sweep = goodput["vllm_best"]
    assert len(sweep["settings"]) == 26
    # Every setting screened once; the finalists (four, vLLM's default and the tuned baselines'
    # settings) searched; the winner is the best finalist.
    finalists = [e for e in sweep["settings"] if e["finalist"]]
    assert 5 <= len(finalists) <= 7 and all(e["goodput_rps"] is not None for e in finalists)
    assert all("screen" in e for e in sweep["settings"] if not e["finalist"])
    best = max(finalists, key=lambda e: e["goodput_rps"])
    assert goodput["policies"]["vllm-best"]["goodput_rps"] == best["goodput_rps"]
    assert goodput["policies"]["vllm-best"]["setting"]["label"] == sweep["winner"]["label"]
    assert goodput["policies"]["vllm-best"]["goodput_rps"] >= goodput["policies"]["vllm-fcfs"]["goodput_rps"]
    assert "vllm-best" in goodput["ratios"]["meridian-no-forcing"]
    assert any(t["name"] == "goodput_no_forcing_vs_vllm_best" for t in goodput["targets"])
    assert sweep["winner"]["label"] in result.stdout  # the Markdown names the setting that won
    ab = json.loads((tmp_path / "ab-report.json").read_text())
    assert "vllm-best" in ab["runs"] and ab["context"]["vllm_best"] == sweep["winner"]["label"]
    # Its setting comes from a goodput search: not from a trace, and searched first without --goodput.
    result = replay(meridian_bin, tmp_path / "t", "--policies", "vllm-best", "--trace",
                    REPO / "benchmarks" / "traces" / "example.jsonl")
    assert result.returncode == 2 and "vllm-best" in result.stderr
    result = replay(meridian_bin, tmp_path / "s", "--seeds", "1", "--policies", "vllm-fcfs,vllm-best")
    assert result.returncode == 0, result.stderr
    assert "vllm-best: max_num_batched_tokens=" in result.stdout
    assert set(json.loads((tmp_path / "s" / "ab-report.json").read_text())["runs"]) == {"vllm-fcfs", "vllm-best"}
    # 'all' without --goodput has no setting to run vllm-best at: it is left out.
    result = replay(meridian_bin, tmp_path / "a", "--seeds", "1")
    assert result.returncode == 0, result.stderr
    assert "vllm-best" not in json.loads((tmp_path / "a" / "ab-report.json").read_text())["runs"]


def test_workload_kinds(meridian_bin, tmp_path):
    for kind in ["long-think", "long-prompt", "seeds-mix"]:
        result = replay(meridian_bin, tmp_path / kind, "--workload", kind, "--seeds", "1",
                        "--policies", "vllm-fcfs")
        assert result.returncode == 0, (kind, result.stderr)
        report = json.loads((tmp_path / kind / "ab-report.json").read_text())
        assert report["context"]["workload"] == kind
    result = replay(meridian_bin, tmp_path, "--workload", "chatty")
    assert result.returncode == 1
    assert "workload.kind must be one of mixed, seeds-mix, long-think, long-prompt" in result.stderr
    result = replay(meridian_bin, tmp_path, "--goodput", "--trace", REPO / "benchmarks" / "traces" / "example.jsonl")
    assert result.returncode == 2
    assert "cannot be used with --trace" in result.stderr


def test_load_sweep_and_plots(meridian_bin, report_dir, tmp_path):
    pytest.importorskip("matplotlib")
    result = replay(meridian_bin, report_dir, "--load-sweep", "1,2", "--policies", "vllm-fcfs,meridian",
                    "--seeds", "2")
    assert result.returncode == 0, result.stderr
    sweep = json.loads((report_dir / "load-sweep.json").read_text())
    assert sweep["rates"] == [1, 2]
    assert len(sweep["runs"]["meridian"]) == 2
    plots = subprocess.run([sys.executable, str(REPO / "benchmarks" / "plot_replay.py"), str(report_dir)],
                           capture_output=True, text=True, timeout=120)
    assert plots.returncode == 0, plots.stderr
    for name in ["latency_cdf.png", "itl_over_time.png", "queue_depths.png", "load_sweep.png"]:
        png = report_dir / "plots" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


@pytest.mark.parametrize("setting, message", [
    # Each passed validation and then hung or filled memory (issue 15).
    ("[engine]\nseries_interval_s = 1e-10\n", "engine.series_interval_s must be in [0.001, 2592000]; got 1e-10"),
    ("[engine]\nseries_interval_s = 1e-9\n", "engine.series_interval_s must be in [0.001, 2592000]; got 1e-09"),
    ("[engine]\nseries_interval_s = 1e300\n", "engine.series_interval_s must be in [0.001, 2592000]; got 1e+300"),
    ("[engine]\nmax_sim_time_s = inf\n", "engine.max_sim_time_s must be a finite number in (0, 2592000]; got inf"),
])
def test_replay_parameters_that_would_hang_are_rejected(meridian_bin, tmp_path, setting, message):
    params = tmp_path / "replay.toml"
    params.write_text(setting)
    result = replay(meridian_bin, tmp_path, "--params", params)
    assert result.returncode == 1
    assert message in result.stderr


def test_an_arrival_rate_that_would_fill_memory_is_rejected(meridian_bin, tmp_path):
    result = replay(meridian_bin, tmp_path, "--arrival-rate", "1e6")
    assert result.returncode == 2  # the value came from the command line: a usage error naming the option
    assert "--arrival-rate: workload.arrival_rate must be in (0, 10000]; got 1e+06" in result.stderr
    result = subprocess.run([str(meridian_bin), "replay", "--arrival-rate", "9000", "--duration-s", "3600",
                             "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "(the expected request count) must be <= 5000000" in result.stderr


@pytest.mark.parametrize("args, message", [
    # CLI11 wrapped these into unsigned options (issue 15: `--seed -1` ran seed 2^64 - 1).
    (["--seed", "-1"], "--seed: must be an integer in [0, 18446744073709551615]; got '-1'"),
    (["--seeds", "-1"], "--seeds: must be an integer in [1, 1000]; got '-1'"),
    (["--seeds", "0"], "--seeds: must be an integer in [1, 1000]; got '0'"),
    (["--jobs", "-1"], "--jobs: must be an integer in [0, 1024]; got '-1'"),
    (["--seed", "99999999999999999999"], "--seed: must be an integer in"),
    (["--seed", "18446744073709551615", "--seeds", "2"], "runs past the largest seed"),
    (["--arrival-rate", "nan"], "--arrival-rate: must be a finite number in (0,"),
    (["--duration-s", "-5"], "--duration-s: must be a finite number in (0,"),
    (["--reasoning-ratio", "1.5"], "--reasoning-ratio: must be a finite number in [0, 1]; got '1.5'"),
])
def test_bad_option_values_are_usage_errors(meridian_bin, tmp_path, args, message):
    result = replay(meridian_bin, tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "ab-report.json").exists()


def test_load_sweep_checks_every_rate_before_running_any(meridian_bin, tmp_path):
    # Issue 15: `--load-sweep 1,2,0` ran two rates, then failed naming no option.
    result = replay(meridian_bin, tmp_path, "--load-sweep", "1,2,0")
    assert result.returncode == 2
    assert "--load-sweep: item 3: must be a finite number in (0," in result.stderr and "got '0'" in result.stderr
    result = replay(meridian_bin, tmp_path, "--load-sweep", "1,2,20000")
    assert result.returncode == 2
    assert ("--load-sweep: rate 20000 (element 3 of 3): workload.arrival_rate must be in (0, 10000]"
            in result.stderr)
    assert "rate" not in result.stdout  # nothing ran
    assert not (tmp_path / "load-sweep.json").exists()


def test_a_request_that_can_never_fit_is_aborted_and_every_request_is_in_one_bucket(meridian_bin, tmp_path):
    # Issue 15: vLLM's policies recomputed it for minutes; Meridian's threw out of the run.
    trace = tmp_path / "huge.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 100, "answer_tokens": 5}\n'
                     '{"arrival_s": 0.1, "prompt_tokens": 4294967295, "answer_tokens": 5}\n'
                     '{"arrival_s": 2e6, "prompt_tokens": 100, "answer_tokens": 5}\n')  # after the time limit
    params = tmp_path / "replay.toml"
    params.write_text("[engine]\nmax_sim_time_s = 3600\n")
    result = replay(meridian_bin, tmp_path, "--trace", trace, "--params", params, "--seeds", "1")
    assert result.returncode == 0, result.stderr
    runs = json.loads((tmp_path / "ab-report.json").read_text())["runs"]
    for policy in ALL_POLICIES:
        m = runs[policy]
        assert (m["completed"], m["aborted"], m["never_arrived"]) == (1, 1, 1), policy
        buckets = m["completed"] + m["aborted"] + m["rejected"] + m["unfinished"] + m["never_arrived"]
        assert buckets == m["requests"] == 3, policy


def test_a_trace_arrival_beyond_the_clock_is_rejected(meridian_bin, tmp_path):
    # Issue 15: arrival_s = 1e10 overflowed the nanosecond clock and reported a TTFT of -9.2e12 ms.
    trace = tmp_path / "late.jsonl"
    trace.write_text('{"arrival_s": 1e10, "prompt_tokens": 100, "answer_tokens": 5}\n')
    result = replay(meridian_bin, tmp_path, "--trace", trace)
    assert result.returncode == 1
    assert f"{trace}:1: arrival_s: must be a finite number of seconds in [0, 1e+09]; got 10000000000.0" \
        in result.stderr


DISAGG_KEYS = ["disagg_offloaded_blocks", "disagg_fallbacks", "disagg_transfer_bytes", "disagg_pull_blocks"]


def test_disaggregated_mode_end_to_end(meridian_bin, tmp_path):
    params = tmp_path / "pressure.toml"  # a small KV budget: long reasoning requests preempt
    params.write_text('[cost_model]\ngpu_memory_gib = 26\n[workload]\nkind = "long-think"\n')
    result = replay(meridian_bin, tmp_path / "out", "--params", params, "--arrival-rate", "2", "--seeds", "1",
                    "--policies", "meridian,vllm-fcfs", "--disagg-fabric", "nixl",
                    "--disagg-bandwidth-gbps", "1.5", "--disagg-latency-us", "200")
    assert result.returncode == 0, result.stderr
    meridian = json.loads((tmp_path / "out" / "meridian" / "report.json").read_text())["metrics"]
    for key in DISAGG_KEYS:
        assert isinstance(meridian[key], (int, float)), key
    assert meridian["disagg_offloaded_blocks"] > 0 and meridian["disagg_pull_blocks"] > 0
    assert meridian["disagg_transfer_bytes"] == (
        (meridian["disagg_offloaded_blocks"] + meridian["disagg_pull_blocks"]) * (16 * 147456 + 32))
    assert meridian["completed"] == meridian["requests"]
    baseline = json.loads((tmp_path / "out" / "vllm-fcfs" / "report.json").read_text())["metrics"]
    assert all(baseline[key] == 0 for key in DISAGG_KEYS)  # no fabric for the vLLM baselines
    written = (tmp_path / "out" / "replay-params.toml").read_text()
    assert '[disagg]\nfabric = "nixl"\nbandwidth_gbps = 1.5\nlatency_us = 200.0\n' in written
    # Off (the default), no key and no [disagg] table appear.
    off = replay(meridian_bin, tmp_path / "off", "--params", params, "--seeds", "1", "--policies", "meridian")
    assert off.returncode == 0, off.stderr
    metrics = json.loads((tmp_path / "off" / "meridian" / "report.json").read_text())["metrics"]
    assert not [k for k in metrics if k.startswith("disagg_")]
    assert "[disagg]" not in (tmp_path / "off" / "replay-params.toml").read_text()


def test_disaggregated_mode_bad_input_names_the_option(meridian_bin, tmp_path):
    result = replay(meridian_bin, tmp_path, "--disagg-bandwidth-gbps", "3")
    assert result.returncode != 0
    assert "--disagg-bandwidth-gbps and --disagg-latency-us need the disaggregated mode on" in result.stderr
    result = replay(meridian_bin, tmp_path, "--disagg-fabric", "rdma")
    assert result.returncode != 0 and "--disagg-fabric" in result.stderr
    params = tmp_path / "bad.toml"
    params.write_text('[disagg]\nfabric = "nixl"\nmax_inflight_batches = 0\n')
    result = replay(meridian_bin, tmp_path, "--params", params)
    assert result.returncode != 0
    assert "disagg.max_inflight_batches" in result.stderr


def test_a_ttfv_bound_is_judged_on_reasoning_requests(meridian_bin, tmp_path):
    """[slo] ttfv_ms binds the first answer token of reasoning requests: a bound below every
    reasoning request's TTFV fails exactly those, and the report names the bound missed."""
    runs = {}
    for name, ttfv in [("off", 0), ("tight", 1)]:
        params = tmp_path / f"{name}.toml"
        params.write_text(f"[slo]\nttfv_ms = {ttfv}\n")
        out = tmp_path / name
        result = replay(meridian_bin, out, "--params", params, "--policies", "vllm-fcfs", "--seeds", "1")
        assert result.returncode == 0, result.stderr
        report = json.loads((out / "ab-report.json").read_text())
        assert report["context"]["slo"]["ttfv_ms"] == ttfv
        runs[name] = report["runs"]["vllm-fcfs"]
    assert runs["off"]["slo_miss_ttfv_pct"] == 0
    assert runs["tight"]["slo_attainment_reasoning_pct"] == 0
    assert runs["tight"]["slo_attainment_chat_pct"] == runs["off"]["slo_attainment_chat_pct"]
    assert runs["tight"]["slo_miss_ttfv_pct"] > 0


def test_slo_grid_writes_every_set_and_its_plot(meridian_bin, tmp_path):
    result = replay(meridian_bin, tmp_path, "--slo-grid", "--seeds", "1", "--policies",
                    "vllm-fcfs,pascal,meridian-no-forcing")
    assert result.returncode == 0, result.stderr
    assert "# SLO grid" in result.stdout
    grid = json.loads((tmp_path / "slo-grid.json").read_text())
    assert [s["slo"]["ttft_ms"] for s in grid["sets"]] == [500] * 4 + [2000] * 4 + [1000, 1000, 2000, 1500]
    assert grid["sets"][-3]["slo"]["ttfv_ms"] == 60000 and grid["sets"][-4]["slo"]["ttfv_ms"] == 0
    # MLPerf Inference's DeepSeek-R1 sets by name, at their 99th percentile.
    assert [s["label"] for s in grid["sets"][-2:]] == ["mlperf deepseek-r1 server", "mlperf deepseek-r1 interactive"]
    assert [s["slo"]["attainment_pct"] for s in grid["sets"]] == [90] * 10 + [99, 99]
    assert grid["ruler"]["name"] == "sustainable"
    for s in grid["sets"]:
        assert set(s["goodput_rps"]) == {"vllm-fcfs", "pascal", "meridian-no-forcing"}
        assert set(s["upper_bound_rps"]) == set(s["goodput_rps"]) and not any(s["above_bound"].values())
    for s in grid["sets"][:10]:
        assert all(v > 0 for v in s["goodput_rps"]["vllm-fcfs"]["per_seed"])
    # No vllm-best ran: only the targets against the baselines that did.
    assert {t["baseline"] for t in grid["targets"]} == {"vllm-fcfs", "pascal"}
    assert (tmp_path / "slo-grid.md").read_text().startswith("# SLO grid")
    if importlib.util.find_spec("matplotlib") is not None:
        plots = subprocess.run([sys.executable, str(REPO / "benchmarks" / "plot_replay.py"), str(tmp_path)],
                               capture_output=True, text=True, timeout=300)
        assert plots.returncode == 0, plots.stderr
        assert (tmp_path / "plots" / "slo_grid.png").stat().st_size > 0
    bad = replay(meridian_bin, tmp_path, "--slo-grid", "--goodput")
    assert bad.returncode == 2 and "--slo-grid runs the goodput search per SLO set" in bad.stderr


def test_meridian_follows_the_slo_it_is_judged_by(meridian_bin, tmp_path):
    """The replay gives Meridian's scheduler the [slo] answer and think TPOT as its budgets (as an
    operator configures [scheduler] to their SLO): a 15 ms answer SLO keeps every answer's mean
    gap within 15 ms, and no gap past 1.35 budgets (ADR-0029), where a 40 ms one lets them grow."""
    itl, tpot = {}, {}
    for answer in (15, 40):
        params = tmp_path / f"slo-{answer}.toml"
        params.write_text(f"[slo]\noutput_tpot_ms = {answer}\nthink_tpot_ms = 40\n")
        out = tmp_path / str(answer)
        cmd = [str(meridian_bin), "replay", "--params", str(params), "--workload", "mixed", "--duration-s", "120",
               "--arrival-rate", "3", "--policies", "meridian-no-forcing", "--seeds", "1", "--out-dir", str(out)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        run = json.loads((out / "ab-report.json").read_text())["runs"]["meridian-no-forcing"]
        itl[answer], tpot[answer] = run["output_itl_p99_ms"], run["output_tpot_p95_ms"]
    assert tpot[15] <= 15 < tpot[40], tpot
    assert itl[15] <= 1.35 * 15 and itl[15] < itl[40], itl


@pytest.mark.parametrize("study, report", [
    (("--slo-grid", "--policies", "vllm-fcfs,meridian", "--seeds", "1", "--duration-s", "20"), "slo-grid.json"),
    (("--load-sweep", "0.5,1.25", "--policies", "vllm-fcfs", "--duration-s", "20"), "load-sweep.json"),
])
def test_the_recorded_command_reproduces_the_study(meridian_bin, tmp_path, study, report):
    """A report's command line is the run: once, slo-grid.json recorded one without --slo-grid
    (issue 48). Run the recorded command again and get the same report."""
    first = tmp_path / "first"
    r = subprocess.run([str(meridian_bin), "replay", *study, "--out-dir", str(first), "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads((first / report).read_text())
    command = doc.get("command") or doc["context"]["command"]
    assert command.startswith("meridian replay ") and study[0] in command, command
    again = tmp_path / "again"
    r = subprocess.run([str(meridian_bin), *command.split()[1:], "--out-dir", str(again), "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("wall_s", "sim_wall_s", "sim_tokens_per_s")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    assert strip(json.loads((again / report).read_text())) == strip(doc)


@pytest.mark.parametrize("args, needle", [
    (("--policies", "meridian,"), "--policies: item 2 of 'meridian,' is empty (a stray comma?)"),
    (("--policies", ",meridian"), "--policies: item 1 of ',meridian' is empty"),
    (("--policies", "vllm-fcfs,,meridian"), "--policies: item 2 of 'vllm-fcfs,,meridian' is empty"),
    (("--load-sweep", "1,"), "--load-sweep: item 2 of '1,' is empty (a stray comma?)"),
    (("--load-sweep", ",1"), "--load-sweep: item 1 of ',1' is empty"),
    (("--load-sweep", "1,x"), "--load-sweep: item 2: must be a finite number"),
])
def test_a_stray_comma_is_refused_not_dropped(meridian_bin, tmp_path, args, needle):
    """Silent acceptance (issue 48): a trailing comma dropped an item without a word."""
    result = replay(meridian_bin, tmp_path / "out", *args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert not (tmp_path / "out").exists()
