"""deploy/: the alert rules (and their promtool unit tests), the example Prometheus configuration
and the Grafana dashboard. Checked with promtool, and against a real Prometheus (Debian
`prometheus`) that scrapes a live `meridian replay --metrics-port`: every panel expression and
every alert's signal must return series through Prometheus's HTTP API.

promtool and prometheus come from scripts/apt-packages.txt (`make setup`); a missing one is a
failure, not a skip."""
from __future__ import annotations

import json
import math
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml
from promtool_lint import lint_problems

import meridian

# About 30 s on 2 cores: scheduled first (conftest.py), so parallel workers end together.
pytestmark = pytest.mark.slow(30)

REPO = pathlib.Path(__file__).resolve().parents[2]
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = REPO / "deploy" / "prometheus" / "alerts.test.yml"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "meridian.json"
OPERATIONS = REPO / "docs" / "operations.md"

# `<signal> <comparison> <threshold>`: the comparison is the expression's last operator.
ALERT_EXPR = re.compile(r"^(?P<signal>.*\S)\s*(?P<cmp>==|!=|>=|<=|>|<)\s*(?P<threshold>-?[0-9.]+(?:e-?[0-9]+)?)\s*$",
                        re.DOTALL)
METRIC_NAME = re.compile(r"\bmeridian_[a-z0-9_]+")
SEVERITIES = {"high", "medium", "low"}
# What the test puts for Grafana's variables: the rate window (two 1 s scrapes fit many times)
# and the dashboard's instance selector (all targets).
GRAFANA_VARIABLES = {"$__rate_interval": "30s", "$instance": ".+"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found on PATH: run `make setup` (scripts/apt-packages.txt installs the Debian "
                    "prometheus package, which has prometheus and promtool)")
    return path


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def split_alert(expr: str) -> tuple[str, str, str]:
    match = ALERT_EXPR.match(" ".join(expr.split()))
    assert match, f"not written `<signal> <comparison> <threshold>`: {expr}"
    return match["signal"], match["cmp"], match["threshold"]


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target.get("expr", "")) for panel in dashboard["panels"] for target in panel["targets"]]


def with_variables(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def catalog() -> dict[str, dict]:
    return {metric["name"]: metric for metric in meridian.metric_catalog()}


def catalog_family(name: str, metrics: dict[str, dict]) -> dict | None:
    """The catalog metric a PromQL series name belongs to (histograms: _bucket, _sum, _count)."""
    if name in metrics:
        return metrics[name]
    base, _, suffix = name.rpartition("_")
    metric = metrics.get(base)
    return metric if metric and metric["type"] == "histogram" and suffix in {"bucket", "sum", "count"} else None


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


# ---- promtool -------------------------------------------------------------------------------


def test_promtool_checks_the_rules_and_the_config():
    promtool = tool("promtool")
    rules = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in rules.stdout
    # rule_files is relative to the configuration: promtool resolves it next to prometheus.yml.
    config = subprocess.run([promtool, "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True,
                            timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS: 1 rule files found" in config.stdout


def test_promtool_unit_tests_pass_and_cover_every_alert_firing_and_silent():
    promtool = tool("promtool")
    result = subprocess.run([promtool, "test", "rules", str(ALERT_TESTS)], capture_output=True, text=True,
                            timeout=120, cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    fires: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
            for alert in check["exp_alerts"]:  # a firing case checks the labels the alert carries
                assert alert["exp_labels"]["severity"] in SEVERITIES
    names = {rule["alert"] for rule in alert_rules()}
    assert names - fires == set(), "alerts without a case where they fire"
    assert names - silent == set(), "alerts without a case where they stay silent"


@pytest.mark.parametrize("threshold", ["never", "always"])
def test_promtool_unit_tests_fail_when_a_threshold_is_wrong(tmp_path, threshold):
    """The unit tests can fail: with every threshold out of reach the firing cases fail, and with
    every threshold always met (any value of the signal) the silent cases fail."""
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            signal, cmp, _ = split_alert(rule["expr"])
            if threshold == "never":
                rule["expr"] = f"({signal}) {cmp} {'-1e300' if cmp in {'<', '<='} else '1e300'}"
            else:
                rule["expr"] = f"({signal}) >= -1e300"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts.test.yml")
    result = subprocess.run([tool("promtool"), "test", "rules", "alerts.test.yml"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    failed = set(re.findall(r"alertname: (\w+), time:", result.stdout + result.stderr))
    assert failed == {rule["alert"] for rule in alert_rules()}


# ---- The files themselves -------------------------------------------------------------------


def test_alert_rules_use_catalog_names_labels_annotations_and_runbook_anchors():
    metrics = catalog()
    anchors = {github_anchor(line.lstrip("#")) for line in OPERATIONS.read_text().splitlines()
               if line.startswith("#")}
    rules = alert_rules()
    assert len({rule["alert"] for rule in rules}) == len(rules), "alert names must be unique"
    for rule in rules:
        name = rule["alert"]
        split_alert(rule["expr"])
        for metric in METRIC_NAME.findall(rule["expr"]):
            assert catalog_family(metric, metrics), f"{name}: {metric} is not in meridian.metric_catalog()"
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert path == "docs/operations.md" and anchor in anchors, f"{name}: no heading for {annotations['runbook_url']}"


def test_alerts_implement_the_seeds_alerting_table():
    exprs = {rule["alert"]: (" ".join(rule["expr"].split()), rule.get("for"), rule["labels"]["severity"])
             for rule in alert_rules()}
    seeds = [  # (metric in the expression, window, for, severity) of each row of the seeds' table
        ("rate(meridian_output_critical_eviction_total[5m]) > 0", "5m", "high"),
        ('rate(meridian_block_manager_evictions_total{tier="output_critical"}[1m]) > 0', "1m", "high"),
        ("meridian_block_manager_used_bytes / (meridian_block_manager_capacity_bytes > 0)", "10m", "medium"),
        ('quantile_over_time(0.95, meridian_queue_depth{queue="think"}[5m])', "5m", "medium"),
        ('increase(meridian_budget_force_reason_total{reason="hard_cap"}[1h])', "15m", "low"),
        ("deriv(meridian_phase_router_tracked_requests[15m]) > 0", "15m", "low"),
    ]
    for fragment, for_, severity in seeds:
        matching = [name for name, (expr, f, s) in exprs.items() if fragment in expr and f == for_ and s == severity]
        assert matching, f"no {severity} alert with for {for_} on {fragment}"


def test_dashboard_is_importable_and_covers_the_issue_panels():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    metrics = catalog()
    used: set[str] = set()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target.get("expr", "")
            assert expr.strip(), f"{panel['title']}: a target without expr"
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
            for name in METRIC_NAME.findall(expr):
                metric = catalog_family(name, metrics)
                assert metric, f"{panel['title']}: {name} is not in meridian.metric_catalog()"
                if metric["type"] == "histogram":
                    assert name.endswith("_bucket") and "histogram_quantile(" in expr, (panel["title"], name)
                used.add(metric["name"])
    wanted = {  # the issue's panels: queues, batches, TTOT/TTFV, ITL, SLO, forcing, KV, evictions, preemptions
        "meridian_queue_depth", "meridian_scheduler_batch_size", "meridian_request_ttot_seconds",
        "meridian_request_ttfv_seconds", "meridian_output_itl_seconds", "meridian_slo_requests_total",
        "meridian_budget_force_reason_total", "meridian_block_manager_used_bytes",
        "meridian_block_manager_capacity_bytes", "meridian_block_manager_evictions_total",
        "meridian_preemptions_total", "meridian_schedule_batch_duration_seconds", "meridian_failsafe_fallbacks_total",
    }
    assert wanted - used == set()


def test_operations_doc_lists_every_panel_query_and_alert():
    text = OPERATIONS.read_text()
    promql = text.split("<!-- dashboard-promql:begin -->")[1].split("<!-- dashboard-promql:end -->")[0]
    for title, expr in dashboard_targets():
        assert expr in promql, f"docs/operations.md does not show the PromQL of {title!r}: {expr}"
    alerts = text.split("## Alerts")[1].split("\n## ")[0]
    # A `|` inside a table cell is written `\|` (GitHub tables); the row compares unescaped.
    rows = {row.split("|")[1].strip().strip("`"): row.replace("\\|", "|")
            for row in alerts.splitlines() if row.startswith("| `Meridian")}
    for rule in alert_rules():
        row = rows.get(rule["alert"])
        assert row, f"docs/operations.md#alerts has no row for {rule['alert']}"
        assert f"`{' '.join(rule['expr'].split())}`".replace("( ", "(").replace(" )", ")") in row, rule["alert"]
        assert f"| {rule['labels']['severity']} |" in row, rule["alert"]
    assert "no Prometheus/OpenTelemetry exporter" not in text


# ---- A real Prometheus scraping a live replay ---------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback only)
        return response.read().decode()


def wait_for(what: str, check, timeout_s: float, procs: list[subprocess.Popen], logs: list[pathlib.Path]):
    """Polls check() until it returns a truthy value; fails naming `what` (with the logs) when a
    process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except (urllib.error.URLError, ConnectionError, OSError):
            value = None
        if value:
            return value
        exited = [p for p in procs if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            tails = "\n".join(f"--- {log.name} ---\n{log.read_text()[-3000:]}" for log in logs if log.exists())
            reason = f"{exited[0].args[0]} exited with {exited[0].returncode}" if exited else f"{timeout_s} s passed"
            pytest.fail(f"waiting for {what}: {reason}\n{tails}")
        time.sleep(0.5)


class PrometheusApi:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> dict:
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            return json.loads(http_get(url))
        except urllib.error.HTTPError as error:  # 400 / 422: the body names the problem
            return json.loads(error.read().decode())

    def value(self, expr: str) -> float | None:
        body = self.query(expr)
        result = body.get("data", {}).get("result", [])
        return float(result[0]["value"][1]) if body.get("status") == "success" and result else None


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory):
    """meridian replay serving /metrics, and a Prometheus scraping it every second with the
    alert rules loaded (one pair for the module's tests). Yields (PrometheusApi, metrics URL)."""
    meridian_bin = pathlib.Path(os.environ.get("MERIDIAN_BIN", REPO / "build" / "bin" / "meridian"))
    if not meridian_bin.exists():
        pytest.fail(f"meridian CLI not found at {meridian_bin}: run `make build` (or set MERIDIAN_BIN)")
    prometheus = tool("prometheus")
    tmp_path = tmp_path_factory.mktemp("live")
    metrics_port, prometheus_port = free_port(), free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": "meridian", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    logs = [tmp_path / "replay.log", tmp_path / "prometheus.log"]
    # 240 simulated seconds of arrivals (about 490 s until the last request ends) at 10 simulated
    # seconds per wall second: the run is still moving when the queries run, ~25 s in, and the
    # first requests (reasoning ones take ~16 s to their answer) have finished. Stopped after.
    replay_cmd = [str(meridian_bin), "replay", "--policies", "meridian", "--seeds", "1", "--duration-s", "240",
                  "--out-dir", str(tmp_path / "replay"), "--metrics-port", str(metrics_port),
                  "--realtime-factor", "10", "--linger-s", "120", "--no-progress"]
    prometheus_cmd = [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                      f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prometheus_port}",
                      "--log.level=warn"]
    procs: list[subprocess.Popen] = []
    with open(logs[0], "w") as replay_log, open(logs[1], "w") as prometheus_log:
        try:
            procs.append(subprocess.Popen(replay_cmd, stdout=replay_log, stderr=subprocess.STDOUT))
            procs.append(subprocess.Popen(prometheus_cmd, stdout=prometheus_log, stderr=subprocess.STDOUT))
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            wait_for("meridian replay's /metrics", lambda: "meridian_" in http_get(metrics_url), 30, procs, logs)
            api = PrometheusApi(prometheus_port)
            wait_for("Prometheus to be ready", lambda: http_get(f"{api.base}/-/ready"), 30, procs, logs)
            # Enough 1 s samples for every window: 20 s of scrapes of a run that is moving.
            wait_for("20 s of scrapes", lambda: (api.value("count_over_time(meridian_scheduler_steps_total[1m])")
                                                 or 0) >= 20, 60, procs, logs)
            yield api, metrics_url
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_real_prometheus_evaluates_every_panel_and_alert_on_a_live_replay(live_stack):
    api, metrics_url = live_stack
    problems: list[str] = []
    # Every panel target returns series.
    for title, expr in dashboard_targets():
        body = api.query(with_variables(expr))
        if body.get("status") != "success":
            problems.append(f"panel {title!r}: {expr}: {body.get('error')}")
        elif not body["data"]["result"]:
            problems.append(f"panel {title!r}: no series for {with_variables(expr)}")
    # Every alert: the signal returns series, the whole rule evaluates.
    for rule in alert_rules():
        signal, _, _ = split_alert(rule["expr"])
        body = api.query(signal)
        if body.get("status") != "success" or not body["data"]["result"]:
            problems.append(f"alert {rule['alert']}: no series for its signal {signal} ({body.get('error', '')})")
        full = api.query(rule["expr"])
        if full.get("status") != "success":
            problems.append(f"alert {rule['alert']}: {full.get('error')}")
    # Prometheus itself evaluated each rule every second without an error.
    loaded = json.loads(http_get(f"{api.base}/api/v1/rules?type=alert"))["data"]["groups"]
    health = {rule["name"]: (rule["health"], rule.get("lastError", "")) for g in loaded for rule in g["rules"]}
    assert set(health) == {rule["alert"] for rule in alert_rules()}
    problems += [f"rule {name}: health {h} {error}" for name, (h, error) in health.items() if h != "ok"]
    assert not problems, "\n".join(problems)
    # The numbers are a live run's, not a page of zeros.
    moving = {
        "steps per second": "sum(rate(meridian_scheduler_steps_total[30s]))",
        "tokens per second": "sum(rate(meridian_scheduler_scheduled_tokens_total[30s]))",
        "KV capacity": "sum(meridian_block_manager_capacity_bytes)",
        "batch size observations": "sum(meridian_scheduler_batch_size_count)",
        "think blocks opened": 'sum(meridian_phase_transitions_total{kind="enter_think"})',
        "finished requests": "sum(meridian_slo_requests_total)",
    }
    for what, expr in moving.items():
        value = api.value(expr)
        assert value is not None and math.isfinite(value) and value > 0, f"{what}: {expr} = {value}"
    cpu_p50 = api.value("histogram_quantile(0.5, sum by (le) (rate(meridian_schedule_batch_duration_seconds_bucket"
                        "[30s])))")
    assert cpu_p50 is not None and 0 < cpu_p50 < 0.1, cpu_p50


def test_live_scrape_passes_promtool_and_matches_the_catalog(live_stack):
    api, metrics_url = live_stack
    scrape = http_get(metrics_url)
    # Clean but for the original catalog's duration_ns name (promtool_lint.py).
    assert lint_problems(tool("promtool"), scrape) == []
    # Every catalog metric reached Prometheus with its type and every value of its labels.
    metadata = json.loads(http_get(f"{api.base}/api/v1/metadata"))["data"]
    problems = []
    for name, metric in catalog().items():
        types = {entry["type"] for entry in metadata.get(name, [])}
        if types != {metric["type"]}:
            problems.append(f"{name}: type {types or 'missing'} in Prometheus, {metric['type']} in the catalog")
            continue
        series = name + ("_count" if metric["type"] == "histogram" else "")
        labels = [label for label, _ in metric["labels"]]
        if not labels:
            continue
        body = api.query(f"group by ({', '.join(labels)}) ({series})")
        seen = {tuple(s["metric"].get(label, "") for label in labels) for s in body["data"]["result"]}
        wanted = {()}
        for _, values in metric["labels"]:
            wanted = {combo + (value,) for combo in wanted for value in values}
        if seen != wanted:
            problems.append(f"{name}: label values {sorted(seen)} in Prometheus, {sorted(wanted)} in the catalog")
    assert not problems, "\n".join(problems)
