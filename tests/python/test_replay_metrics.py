"""`meridian replay --metrics-port`: live Prometheus metrics of the meridian
run, scraped over HTTP while it runs and after it (--linger-s), checked by the
real `promtool check metrics`, and bad options refused with clear errors."""
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from promtool_lint import lint_problems

# About 30 s on 2 cores: scheduled first (conftest.py), so parallel workers end together.
pytestmark = pytest.mark.slow(30)

URL_LINE = re.compile(r"serving metrics on (http://\S+/metrics)")


def sample(text, name, labels=""):
    """The value of sample `name{labels}` in an exposition, or None."""
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} " if labels else f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def start_replay(meridian_bin, tmp_path, *extra):
    cmd = [
        str(meridian_bin), "replay", "--policies", "meridian", "--seeds", "1", "--duration-s", "20",
        "--no-progress", "--out-dir", str(tmp_path / "out"), "--metrics-port", "0", *map(str, extra),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = URL_LINE.search(line)
        if match:
            return proc, match.group(1)
    proc.kill()
    pytest.fail(f"no 'serving metrics on' line; stderr: {proc.stderr.read()}")


def test_metrics_move_during_the_run_and_are_served_while_lingering(meridian_bin, tmp_path):
    proc, url = start_replay(meridian_bin, tmp_path, "--realtime-factor", 10, "--linger-s", 30)
    try:
        assert re.match(r"http://127\.0\.0\.1:[1-9][0-9]*/metrics", url)
        first = scrape(url)
        steps_first = sample(first, "meridian_scheduler_steps_total")
        assert steps_first is not None
        # Paced at 10x, the run takes seconds: scrape until the counters have moved.
        deadline = time.monotonic() + 60
        while True:
            text = scrape(url)
            if sample(text, "meridian_scheduler_steps_total") > steps_first:
                break
            assert time.monotonic() < deadline, "meridian_scheduler_steps_total never moved"
            time.sleep(0.2)
        # The run ends (the report is written) while the server lingers.
        deadline = time.monotonic() + 120
        while not (tmp_path / "out" / "ab-report.json").exists():
            assert time.monotonic() < deadline, "the replay did not finish"
            time.sleep(0.2)
        time.sleep(0.5)  # the report is written after the run's last step
        final = scrape(url)
        assert proc.poll() is None, "exited before --linger-s was over"
    finally:
        proc.kill()
        proc.wait()

    def value(name, labels=""):
        v = sample(final, name, labels)
        assert v is not None, f"{name}{{{labels}}} missing"
        return v

    assert value("meridian_scheduler_steps_total") > steps_first
    assert value("meridian_scheduler_scheduled_tokens_total") > 0
    assert value("meridian_phase_transitions_total", 'kind="enter_think"') > 0
    assert value("meridian_phase_transitions_total", 'kind="exit_think"') > 0
    assert value("meridian_requests_completed_total", 'how="eos"') > 0
    assert value("meridian_think_tokens_per_request_count") > 0
    assert value("meridian_request_ttft_seconds_count") > 0
    assert value("meridian_request_ttfv_seconds_count") > 0
    assert value("meridian_output_itl_seconds_count") > 0
    assert value("meridian_slo_requests_total", 'outcome="met"') + value(
        "meridian_slo_requests_total", 'outcome="missed"'
    ) == value("meridian_request_ttft_seconds_count")
    assert value("meridian_block_manager_capacity_bytes") > 0
    assert value("meridian_scheduler_batch_size_count", 'phase="think"') > 0
    assert value("meridian_schedule_batch_duration_seconds_count") > 0
    assert value("meridian_schedule_batch_duration_ns_count") == value("meridian_schedule_batch_duration_seconds_count")
    assert value("meridian_scheduler_predicted_step_seconds_count") > 0
    # Cumulative buckets end in +Inf == count.
    assert value("meridian_output_itl_seconds_bucket", 'le="+Inf"') == value("meridian_output_itl_seconds_count")

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found (Debian package prometheus; scripts/apt-packages.txt)")
    # Clean but for the original catalog's duration_ns name (promtool_lint.py).
    assert lint_problems(promtool, final) == []


def test_linger_ends_with_exit_0(meridian_bin, tmp_path):
    proc, url = start_replay(meridian_bin, tmp_path, "--linger-s", 1)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    with pytest.raises(OSError):
        scrape(url)  # the server is gone with the process


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--metrics-port", "70000"], "--metrics-port"),
        (["--metrics-port", "0", "--realtime-factor", "0"], "--realtime-factor"),
        (["--metrics-port", "0", "--realtime-factor", "inf"], "--realtime-factor"),
        (["--metrics-port", "0", "--linger-s", "-1"], "--linger-s"),
        (["--metrics-port", "0", "--linger-s", "nan"], "--linger-s"),
        (["--linger-s", "1"], "--metrics-port"),
        (["--metrics-host", "127.0.0.1"], "--metrics-port"),
        (["--metrics-port", "0", "--policies", "vllm-fcfs"], "meridian"),
        (["--metrics-port", "0", "--metrics-host", "203.0.113.7"], "203.0.113.7"),
        # Issue 27: civetweb bound 256.0.0.0 as 0.0.0.0 (every interface) and 999.1.1.1 as 231.1.1.1.
        (["--metrics-port", "0", "--metrics-host", "256.0.0.0"], 'got "256.0.0.0"'),
        (["--metrics-port", "0", "--metrics-host", "999.1.1.1"], 'got "999.1.1.1"'),
        (["--metrics-port", "0", "--metrics-host", "127.1"], 'got "127.1"'),
    ],
)
def test_bad_metrics_options_are_refused(meridian_bin, tmp_path, args, needle):
    cmd = [str(meridian_bin), "replay", "--seeds", "1", "--duration-s", "5", "--out-dir", str(tmp_path), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert needle in result.stderr, result.stderr


def test_a_port_in_use_is_a_clear_error(meridian_bin, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [
            str(meridian_bin), "replay", "--seeds", "1", "--duration-s", "5", "--out-dir", str(tmp_path),
            "--metrics-port", str(port),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert f"127.0.0.1:{port}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr
