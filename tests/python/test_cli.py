"""`meridian check-config` as an operator runs it: exit codes and messages."""
import json
import resource
import subprocess

import pytest


def run(meridian_bin, *args):
    return subprocess.run([str(meridian_bin), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_valid_file_prints_the_resolved_config(meridian_bin, tmp_path):
    cfg = tmp_path / "meridian.toml"
    cfg.write_text("[scheduler]\nmax_think_tokens = 4096\n")
    result = run(meridian_bin, "check-config", cfg)
    assert result.returncode == 0, result.stderr
    assert "max_think_tokens = 4096" in result.stdout
    assert "min_think_tokens = 512" in result.stdout  # defaults are printed too
    assert "[model.qwen3]" in result.stdout


def test_bad_file_exits_1_with_dotted_path_and_location(meridian_bin, tmp_path):
    cfg = tmp_path / "meridian.toml"
    cfg.write_text("[scheduler]\nthink_tpot_budget_ms = 0\n[entropy]\nema_alpha = 1.5\n")
    result = run(meridian_bin, "check-config", cfg)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: scheduler.think_tpot_budget_ms must be in (0, 60000]; got 0.0 (at {cfg}:2:24)"
    assert lines[1] == f"error: entropy.ema_alpha must be in (0, 1]; got 1.5 (at {cfg}:4:13)"
    assert lines[2] == "2 problems found"


def test_check_config_fails_the_addresses_start_up_would_refuse(meridian_bin, tmp_path):
    """Issue 27: check-config passed an OTLP endpoint of "http://" (the engine then refused it)
    and a metrics host civetweb would have bound as another address."""
    cfg = tmp_path / "meridian.toml"
    cfg.write_text('[telemetry]\nprometheus_host = "999.1.1.1"\notlp_endpoint = "http://"\n')
    result = run(meridian_bin, "check-config", cfg)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == ("error: telemetry.prometheus_host must be an IPv4 address (four parts, each 0-255), an IPv6 "
                        f'address or localhost; got "999.1.1.1" (at {cfg}:2:19)')
    assert lines[1] == f'error: telemetry.otlp_endpoint has no host; got "http://" (at {cfg}:3:17)'


def test_syntax_error_and_missing_file(meridian_bin, tmp_path):
    cfg = tmp_path / "broken.toml"
    cfg.write_text("[scheduler\n")
    result = run(meridian_bin, "check-config", cfg)
    assert result.returncode == 1
    assert "TOML syntax error" in result.stderr
    result = run(meridian_bin, "check-config", tmp_path / "absent.toml")
    assert result.returncode == 1
    assert "cannot read config file" in result.stderr


def test_unreadable_input_is_an_error_not_the_defaults(meridian_bin, tmp_path):
    # A directory, or a file whose read fails, used to print the defaults with exit 0.
    result = run(meridian_bin, "check-config", tmp_path)
    assert result.returncode == 1
    assert f"cannot read config file '{tmp_path}': it is a directory" in result.stderr
    result = run(meridian_bin, "check-config", "/proc/self/mem")
    assert result.returncode == 1
    assert "cannot read config file '/proc/self/mem': " in result.stderr


def test_non_finite_floats_are_rejected_and_json_never_holds_null(meridian_bin, tmp_path):
    cfg = tmp_path / "inf.toml"
    cfg.write_text("[scheduler]\nthink_batch_multiplier = inf\n")
    result = run(meridian_bin, "check-config", cfg, "--format", "json")
    assert result.returncode == 1
    assert result.stdout == ""
    assert ("error: scheduler.think_batch_multiplier must be a finite number in [1, 100]; got inf "
            f"(at {cfg}:2:26)") in result.stderr


def test_a_flood_of_problems_is_cut_short(meridian_bin, tmp_path):
    cfg = tmp_path / "flood.toml"
    cfg.write_text("[scheduler]\n" + "".join(f"k{i} = 1\n" for i in range(100_000))
                   + "k" * 1_000_000 + " = 1\n")
    result = run(meridian_bin, "check-config", cfg)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 52  # 50 problems, "… and N more", the count
    assert lines[-2] == "error: … and 99951 more problems"
    assert lines[-1] == "100001 problems found"
    assert len(result.stderr) < 50_000  # the 1 MB key is not echoed


def test_model_selection_and_json(meridian_bin, repo):
    result = run(meridian_bin, "check-config", repo / "meridian.toml.example", "--model", "deepseek_r1",
                 "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert list(doc["model"]) == ["deepseek_r1"]
    assert doc["model"]["deepseek_r1"]["think_start_token_ids"] == [128798]
    result = run(meridian_bin, "check-config", repo / "meridian.toml.example", "--model", "llama")
    assert result.returncode == 1
    assert "error: model.llama is not defined; known models:" in result.stderr


def test_tokenizer_check_uses_the_real_qwen3_tokenizer(meridian_bin, repo, tmp_path, qwen3_tokenizer):
    ok = run(meridian_bin, "check-config", repo / "meridian.toml.example", "--model", "qwen3",
             "--tokenizer", qwen3_tokenizer)
    assert ok.returncode == 0, ok.stderr
    # The original system's Qwen3 ids are caught against the same tokenizer.
    cfg = tmp_path / "wrong.toml"
    cfg.write_text("[model.qwen3]\nthink_start_token_ids = [151648]\nthink_end_token_ids = [151649]\n")
    bad = run(meridian_bin, "check-config", cfg, "--model", "qwen3", "--tokenizer", qwen3_tokenizer)
    assert bad.returncode == 1
    assert ('model.qwen3.think_start_token_ids[0] = 151648 is "<|box_start|>" in the tokenizer; '
            'expected "<think>"') in bad.stderr


@pytest.mark.parametrize("args, message", [
    # Issue 15: rows x vocab x 4 overflowed to 0 and the kernel wrote past the buffer (SIGSEGV).
    (["--rows", "1", "--vocab", "4611686018427387904"], "--vocab: must be an integer in [1, 4294967296]"),
    (["--rows", "-1"], "--rows: must be an integer in [1, 65536]; got '-1'"),  # wrapped to 2^64 - 1
    (["--rows", "100000"], "--rows: must be an integer in [1, 65536]; got '100000'"),  # bare std::bad_alloc
    (["--rows", "8192", "--vocab", "151936"],
     "--rows 8192 x --vocab 151936 x 4 bytes (fp32) is 4978638848 bytes of logits; bench-probe allocates at "
     "most 4294967296 bytes (4 GiB)"),
    (["--min-time", "inf"], "--min-time: must be a finite number in [0, 3600]; got 'inf'"),
    (["--threads", "-1"], "--threads: must be an integer in [0, 1024]; got '-1'"),
    (["--seed", "-1"], "--seed: must be an integer in [0, 18446744073709551615]; got '-1'"),
    (["--dtype", "fp8"], "--dtype: fp8 not in {fp32,bf16,fp16}"),
])
def test_bench_probe_rejects_sizes_it_cannot_hold(meridian_bin, args, message):
    result = run(meridian_bin, "bench-probe", *args, "--min-time", "0")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stdout == ""


def test_bench_probe_reports_an_allocation_failure_and_runs_small_batches(meridian_bin):
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    # 4 GiB of fp32 logits: within the bound, but not within this process's 1 GiB.
    result = subprocess.run([str(meridian_bin), "bench-probe", "--rows", "1024", "--vocab", "1048576",
                             "--min-time", "0"], capture_output=True, text=True, timeout=60,
                            preexec_fn=limit_memory)
    assert result.returncode == 1, result.stderr
    assert ("cannot allocate 4294967296 bytes of logits for --rows 1024 x --vocab 1048576 (fp32): out of memory"
            in result.stderr)
    result = run(meridian_bin, "bench-probe", "--rows", "010", "--vocab", "64", "--min-time", "0",
                 "--skip-reference")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == 10  # decimal, not CLI11's octal


def test_usage_errors_exit_2(meridian_bin):
    for args in (["check-config"], ["no-such-command"], ["replay", "--seeds", "abc"]):
        result = run(meridian_bin, *args)
        assert result.returncode == 2, args
        assert result.stderr.startswith("meridian: error: "), result.stderr
    assert run(meridian_bin, "replay", "--help").returncode == 0
    assert run(meridian_bin, "--version").stdout.strip() == "meridian 0.1.0"
