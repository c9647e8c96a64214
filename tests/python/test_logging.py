"""[logging] in Python: meridian.configure_logging sets the ``meridian`` logger
(level, text/json format, one stderr handler) and the C++ core's logger, leaves
the root logger alone, and is idempotent. The C++ lines are checked on the
stderr of a subprocess, where the core writes them itself."""
from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import types

import pytest

import meridian
from meridian import logging_setup

TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def config(level: str = "info", fmt: str = "text") -> meridian.MeridianConfig:
    return meridian.parse_config(f'[logging]\nlevel = "{level}"\nformat = "{fmt}"\n')


@pytest.fixture(autouse=True)
def restore_logging():
    """Each test starts from and leaves the defaults: no meridian handler, level unset, C++ info/text."""
    logger = logging.getLogger("meridian")
    saved = (logger.level, list(logger.handlers))
    yield
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    for handler in saved[1]:
        logger.addHandler(handler)
    logger.setLevel(saved[0])
    meridian._meridian.configure_logging("info", "text")


def meridian_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger("meridian").handlers if isinstance(h, logging_setup._StderrHandler)]


def test_the_config_field_round_trips_and_bad_values_name_the_field():
    assert meridian.MeridianConfig.defaults().logging.format == "text"
    cfg = config("debug", "json")
    assert (cfg.logging.level, cfg.logging.format) == ("debug", "json")
    with pytest.raises(ValueError, match=r"logging\.format must be one of \"text\", \"json\"; got 'xml'"):
        meridian.parse_config('[logging]\nformat = "xml"\n')
    lc = meridian.LoggingConfig()
    lc.format = "json"
    assert lc.format == "json"


def test_idempotent_one_handler_and_the_root_logger_untouched():
    root = logging.getLogger()
    root_state = (root.level, list(root.handlers))
    for _ in range(3):
        meridian.configure_logging(config("debug", "text"))
    meridian.configure_logging(config("warn", "json"))
    assert len(meridian_handlers()) == 1
    assert isinstance(meridian_handlers()[0].formatter, logging_setup.JsonFormatter)
    assert logging.getLogger("meridian").level == logging.WARNING
    assert (root.level, list(root.handlers)) == root_state
    # The C++ logger follows the same section.
    assert (meridian._meridian.log_level(), meridian._meridian.log_format()) == ("warn", "json")


@pytest.mark.parametrize("level, python_level", [("trace", 5), ("debug", logging.DEBUG), ("info", logging.INFO),
                                                  ("warn", logging.WARNING), ("error", logging.ERROR)])
def test_levels_map_to_python_levels(level, python_level):
    meridian.configure_logging(config(level))
    assert logging.getLogger("meridian").getEffectiveLevel() == python_level
    assert logging.getLogger("meridian.vllm").getEffectiveLevel() == python_level
    assert meridian._meridian.log_level() == level


def test_text_lines_have_time_logger_level_and_message(capsys):
    meridian.configure_logging(config("info", "text"))
    logging.getLogger("meridian.vllm").warning("preset %s chosen", "qwen3")
    logging.getLogger("meridian").debug("not at info")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(rf"\[{TS}\] \[meridian\.vllm\] \[warn\] preset qwen3 chosen", err[0]), err[0]


def test_json_lines_parse_one_object_each(capsys):
    meridian.configure_logging(config("debug", "json"))
    log = logging.getLogger("meridian.vllm")
    log.debug("plain")
    log.error('quotes " and \\ and\na newline')
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    entries = [json.loads(line) for line in lines]
    for entry in entries:
        assert set(entry) >= {"ts", "level", "logger", "msg"}
        assert re.fullmatch(TS, entry["ts"])
        assert entry["logger"] == "meridian.vllm"
    assert [e["level"] for e in entries] == ["debug", "error", "error"]
    assert entries[1]["msg"] == 'quotes " and \\ and\na newline'
    assert "RuntimeError: boom" in entries[2]["exc"]


def test_off_silences_every_meridian_logger(capsys, caplog):
    meridian.configure_logging(config("off"))
    with caplog.at_level(logging.DEBUG):  # the root logger: still nothing from meridian
        logging.getLogger("meridian").error("no")
        logging.getLogger("meridian.vllm").critical("no")
    assert capsys.readouterr().err == ""
    assert [r for r in caplog.records if r.name.startswith("meridian")] == []
    assert meridian._meridian.log_level() == "off"


def test_records_still_reach_caplog(caplog):
    meridian.configure_logging(config("info"))
    with caplog.at_level(logging.INFO):
        logging.getLogger("meridian.vllm").info("seen by the root's handlers too")
    assert [r.getMessage() for r in caplog.records] == ["seen by the root's handlers too"]


def test_bad_values_raise_and_change_nothing():
    meridian.configure_logging(config("warn", "text"))
    lc = meridian.LoggingConfig()
    lc.level = "verbose"
    with pytest.raises(ValueError, match=r"logging\.level must be one of .*\"off\"; got 'verbose'"):
        meridian.configure_logging(lc)
    lc.level, lc.format = "debug", "yaml"
    with pytest.raises(ValueError, match=r"logging\.format must be one of \"text\", \"json\"; got 'yaml'"):
        meridian.configure_logging(lc)
    with pytest.raises(ValueError, match=r"logging\.format must be one of"):
        meridian._meridian.configure_logging("debug", "yaml")
    assert logging.getLogger("meridian").level == logging.WARNING
    assert meridian._meridian.log_level() == "warn"


# A child process: the C++ scheduler rejects a NaN step time and warns on the
# process's stderr (fd 2, written by the C++ core), next to a Python record.
CHILD = textwrap.dedent("""
    import logging, sys
    import meridian
    cfg = meridian.parse_config('[logging]\\nlevel = "{level}"\\nformat = "{fmt}"\\n')
    meridian.configure_logging(cfg)
    logging.getLogger("meridian.vllm").warning("from python")
    sched = meridian.DualQueueScheduler(meridian.SchedulerOptions.from_config(cfg, 64),
                                        meridian.StepCostModel.from_config(cfg.scheduler))
    sched.add(1, prompt_tokens=8, phase=meridian.Phase.OUTPUT_DECODE)
    for i in range(3):
        sched.schedule(meridian.StepLimits(), i * 1_000_000)
        sched.complete_step(float("nan"), (i + 1) * 1_000_000)
    assert sched.counters.rejected_step_times == 3
    print("stdout stays clean")
""")


def run_child(level: str, fmt: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", CHILD.format(level=level, fmt=fmt)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "stdout stays clean\n"
    return result


def test_cpp_lines_on_stderr_in_json():
    lines = run_child("info", "json").stderr.splitlines()
    entries = [json.loads(line) for line in lines]  # every stderr line is a JSON object
    cpp = [e for e in entries if e["logger"] == "meridian"]
    assert len(cpp) == 1, lines  # three rejections, one line: rate-limited
    assert cpp[0]["level"] == "warn"
    assert cpp[0]["msg"] == "scheduler: step time nan ms rejected (must be finite and > 0)"
    assert re.fullmatch(TS, cpp[0]["ts"])
    assert [e["msg"] for e in entries if e["logger"] == "meridian.vllm"] == ["from python"]


def test_cpp_lines_on_stderr_in_text():
    lines = run_child("warn", "text").stderr.splitlines()
    assert len(lines) == 2, lines
    assert re.fullmatch(rf"\[{TS}\] \[meridian\.vllm\] \[warn\] from python", lines[0]), lines
    assert re.fullmatch(rf"\[{TS}\] \[meridian\] \[warn\] scheduler: step time nan ms rejected \(must be finite "
                        r"and > 0\)", lines[1]), lines


def test_cpp_and_python_silent_at_off_and_above_the_message_level():
    assert run_child("off", "json").stderr == ""
    assert run_child("error", "text").stderr == ""


# --- the CLI: [logging] from --config, --log-level over it, logs on stderr only ---

def replay(meridian_bin, tmp_path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(meridian_bin), "replay", "--policies", "meridian", "--seeds", "1", "--duration-s", "5",
                           "--no-progress", "--out-dir", str(tmp_path / "out"), *map(str, extra)],
                          capture_output=True, text=True, timeout=300)


def test_cli_replay_logs_json_on_stderr_and_keeps_stdout_for_the_report(meridian_bin, tmp_path):
    cfg = tmp_path / "meridian.toml"
    cfg.write_text('[logging]\nlevel = "debug"\nformat = "json"\n')
    result = replay(meridian_bin, tmp_path, "--config", cfg)
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stderr.splitlines()]  # every line one JSON object
    messages = [e["msg"] for e in entries]
    assert f"configuration loaded from {cfg}" in messages
    assert any(m.startswith("resolved configuration:\n[scheduler]") for m in messages)  # debug
    assert any(m.startswith("replay started: 1 policies x 1 seeds") for m in messages)
    assert any(m.startswith("replay finished in ") and "meridian" in m for m in messages)
    assert {e["logger"] for e in entries} == {"meridian"}
    assert "simulator (A/B runs)" in result.stdout
    assert '"level"' not in result.stdout  # no log line leaked onto stdout


def test_cli_log_level_overrides_the_config_before_or_after_the_subcommand(meridian_bin, tmp_path):
    cfg = tmp_path / "meridian.toml"
    cfg.write_text('[logging]\nlevel = "debug"\n')
    quiet = replay(meridian_bin, tmp_path, "--config", cfg, "--log-level", "off")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    before = subprocess.run([str(meridian_bin), "--log-level", "info", "replay", "--policies", "meridian", "--seeds",
                             "1", "--duration-s", "5", "--no-progress", "--out-dir", str(tmp_path / "o2"),
                             "--config", str(cfg)], capture_output=True, text=True, timeout=300)
    assert before.returncode == 0, before.stderr
    lines = before.stderr.splitlines()
    assert any(re.fullmatch(rf"\[{TS}\] \[meridian\] \[info\] replay started: .*", line) for line in lines), lines
    assert not any("[debug]" in line for line in lines)  # the config's debug was overridden


@pytest.mark.parametrize("value", ["verbose", "INFO", ""])
def test_cli_bad_log_level_is_a_usage_error(meridian_bin, tmp_path, value):
    result = replay(meridian_bin, tmp_path, "--log-level", value)
    assert result.returncode == 2, result.stderr
    assert ('--log-level: must be one of "trace", "debug", "info", "warn", "error", "off"; got '
            f"'{value}'") in result.stderr


# --- inside vLLM: the adapter's set-up applies [logging] (there is no vllm.general_plugins entry) ---

def test_vllm_start_up_applies_the_logging_section(monkeypatch, tmp_path):
    cfg = tmp_path / "meridian.toml"
    cfg.write_text('[logging]\nlevel = "debug"\nformat = "json"\n')
    monkeypatch.setenv("MERIDIAN_CONFIG", str(cfg))
    monkeypatch.setenv("MERIDIAN_MODEL", "qwen3")
    from meridian.vllm._setup import resolve_setup
    assert resolve_setup(types.SimpleNamespace()).model_name == "qwen3"
    assert logging.getLogger("meridian").level == logging.DEBUG
    assert isinstance(meridian_handlers()[0].formatter, logging_setup.JsonFormatter)
    assert (meridian._meridian.log_level(), meridian._meridian.log_format()) == ("debug", "json")
