"""`meridian check-config` as an operator runs it: exit codes and messages."""
import json
import subprocess


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
    assert lines[0] == f"error: scheduler.think_tpot_budget_ms must be > 0; got 0.0 (at {cfg}:2:24)"
    assert lines[1] == f"error: entropy.ema_alpha must be in (0, 1]; got 1.5 (at {cfg}:4:13)"
    assert lines[2] == "2 problems found"


def test_syntax_error_and_missing_file(meridian_bin, tmp_path):
    cfg = tmp_path / "broken.toml"
    cfg.write_text("[scheduler\n")
    result = run(meridian_bin, "check-config", cfg)
    assert result.returncode == 1
    assert "TOML syntax error" in result.stderr
    result = run(meridian_bin, "check-config", tmp_path / "absent.toml")
    assert result.returncode == 1
    assert "cannot read config file" in result.stderr


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


def test_usage_errors_are_nonzero(meridian_bin):
    assert run(meridian_bin, "check-config").returncode != 0
    assert run(meridian_bin, "no-such-command").returncode != 0
    assert run(meridian_bin, "--version").stdout.strip() == "meridian 0.1.0"
