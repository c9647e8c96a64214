"""The original catalog's metric names (issue 27): every metric of the seed's "Metric catalog"
(tests/data/seed_metric_catalog.txt), named by the seed's rule (`meridian.x.y` -> `meridian_x_y`,
counters `_total`), is exported with the seed's type, labels and label values, so dashboards and
alerts written for the original keep working. Checked against the C++ catalog
(meridian.metric_catalog()), the Python Prometheus exporter's exposition and the C++ exporter
served by `meridian replay --metrics-port`."""
from __future__ import annotations

import itertools
import pathlib
import re

import pytest

import meridian

SEED_CATALOG = pathlib.Path(__file__).resolve().parents[1] / "data" / "seed_metric_catalog.txt"
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? \S+")
LABEL = re.compile(r'(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def seed_metrics() -> list[tuple[str, str, dict[str, list[str]]]]:
    """(seed name, type, {label: values}) of each line of the seed catalog file."""
    out = []
    for line in SEED_CATALOG.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, kind, labels = line.split()
        spec: dict[str, list[str]] = {}
        if labels != "-":
            for part in labels.split(";"):
                label, _, values = part.partition("=")
                spec[label] = values.split(",")
        out.append((name, kind, spec))
    return out


def prometheus_name(seed_name: str, kind: str) -> str:
    """The seed's naming rule: `meridian.x.y` -> `meridian_x_y`, counters end in `_total`;
    names the seed already writes in Prometheus form stay as they are."""
    name = seed_name.replace(".", "_")
    if kind == "counter" and not name.endswith("_total"):
        name += "_total"
    return name


def seed_series() -> list[tuple[str, str, dict[str, list[str]]]]:
    """(exported name, type, labels) for every seed metric."""
    return [(prometheus_name(name, kind), kind, labels) for name, kind, labels in seed_metrics()]


def combinations(labels: dict[str, list[str]]) -> list[dict[str, str]]:
    names = sorted(labels)
    return [dict(zip(names, values)) for values in itertools.product(*(labels[n] for n in names))]


def exposition_samples(text: str) -> set[tuple[str, frozenset]]:
    """(sample name, labels without `le`) of every sample line of a Prometheus text exposition."""
    out = set()
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        labels = {m["name"]: m["value"] for m in LABEL.finditer(match["labels"] or "")}
        labels.pop("le", None)
        out.add((match["name"], frozenset(labels.items())))
    return out


def missing_series(text: str) -> list[str]:
    """The seed series (name and every combination of the seed's label values) absent from an
    exposition; a series must carry exactly the seed's label names."""
    samples = exposition_samples(text)
    missing = []
    for name, kind, labels in seed_series():
        sample = name + "_count" if kind == "histogram" else name
        for combo in combinations(labels):
            if (sample, frozenset(combo.items())) not in samples:
                missing.append(f"{sample}{combo or ''}")
    return missing


def test_the_seed_file_holds_the_seed_catalog():
    names = [name for name, _, _ in seed_metrics()]
    assert len(names) == len(set(names)) == 12
    assert ("meridian.output_critical_eviction", "counter", {}) in seed_metrics()
    assert ("meridian.budget_force_reason", "counter",
            {"reason": ["converged", "overthinking", "hard_cap"]}) in seed_metrics()


def test_the_naming_rule_reproduces_the_seeds_own_prometheus_names():
    # The two names the seed writes in Prometheus form are what the rule makes of their dotted form.
    assert prometheus_name("meridian.disagg.blocks_offloaded", "counter") == "meridian_disagg_blocks_offloaded_total"
    assert prometheus_name("meridian.vocab_fallback", "counter") == "meridian_vocab_fallback_total"
    assert prometheus_name("meridian.output_critical_eviction", "counter") == "meridian_output_critical_eviction_total"
    assert prometheus_name("meridian.schedule_batch.duration_ns", "histogram") == "meridian_schedule_batch_duration_ns"
    assert prometheus_name("meridian.queue_depth", "gauge") == "meridian_queue_depth"


def test_every_seed_metric_is_in_the_catalog_with_its_type_and_labels():
    catalog = {spec["name"]: spec for spec in meridian.metric_catalog()}
    problems = []
    for name, kind, labels in seed_series():
        spec = catalog.get(name)
        if spec is None:
            problems.append(f"{name}: not in meridian.metric_catalog()")
            continue
        if spec["type"] != kind:
            problems.append(f"{name}: {spec['type']} in the catalog, {kind} in the seed")
        ours = {label: list(values) for label, values in spec["labels"]}
        if set(ours) != set(labels):  # an extra label would split the seed's series
            problems.append(f"{name}: labels {sorted(ours)} in the catalog, {sorted(labels)} in the seed")
            continue
        for label, values in labels.items():
            absent = [v for v in values if v not in ours[label]]
            if absent:  # ours may add values (queue_depth's waiting/swapped), never drop one
                problems.append(f"{name}: {label} lacks the seed's values {absent}")
    assert not problems, "\n".join(problems)


def test_duration_ns_is_in_nanoseconds_beside_the_base_unit_histogram():
    catalog = {spec["name"]: spec for spec in meridian.metric_catalog()}
    ns, seconds = catalog["meridian_schedule_batch_duration_ns"], catalog["meridian_schedule_batch_duration_seconds"]
    assert ns["unit"] == "nanoseconds" and seconds["unit"] == "seconds"
    # Buckets for the seed's range: microseconds on the hot path, milliseconds under contention.
    assert ns["buckets"][0] <= 1e3 and ns["buckets"][-1] >= 1e7
    assert any(b == 1e6 for b in ns["buckets"])  # the seed's operator threshold: P99 above 1 ms
    assert list(ns["buckets"]) == sorted(ns["buckets"])
    # Fed from the same observations.
    cfg = meridian.parse_config("")
    num_blocks = 64
    kv = meridian.KvBlockManager(
        meridian.KvBlockManagerOptions.from_config(cfg, num_blocks * cfg.kv_memory.block_size_bytes))
    sched = meridian.DualQueueScheduler(
        meridian.SchedulerOptions.from_config(cfg, num_blocks), meridian.StepCostModel.from_config(cfg.scheduler))
    sched.add(7, 32)
    plan = meridian.StepDriver(sched, kv).plan(meridian.StepLimits(), 0)
    registry = meridian.MetricRegistry()
    meridian.EngineMetrics(registry).record_step(plan.stats, 4e-5)  # 40 us
    assert registry.value("meridian_schedule_batch_duration_ns") == 1
    assert registry.value("meridian_schedule_batch_duration_seconds") == 1
    family = {f["name"]: f for f in registry.snapshot()}
    assert family["meridian_schedule_batch_duration_ns"]["series"][0]["sum"] == pytest.approx(4e4)
    assert family["meridian_schedule_batch_duration_seconds"]["series"][0]["sum"] == pytest.approx(4e-5)


def test_budget_force_triggered_is_the_sum_over_budget_force_reason():
    # Two think blocks run into the hard cap of 4 (qwen3 token ids, as in test_telemetry_bindings.py).
    think, end_think, im_end, word = 151667, 151668, 151645, 785
    cfg = meridian.parse_config("[scheduler]\nmin_think_tokens = 1\nmax_think_tokens = 4\n")
    router = meridian.PhaseRouter(cfg, "qwen3")
    registry = meridian.MetricRegistry()
    metrics = meridian.EngineMetrics(registry)
    for request in (1, 2):
        router.begin(request)
        for token in (think, word, word, word, word, word, end_think, word, im_end):
            router.on_token(request, token)
    metrics.sync_router(router)
    by_reason = {r: registry.value("meridian_budget_force_reason_total", (r,))
                 for r in ("converged", "overthinking", "hard_cap")}
    assert by_reason["hard_cap"] == 2
    assert registry.value("meridian_budget_force_triggered_total") == sum(by_reason.values()) == 2
    assert registry.misuse_count() == 0


def test_the_python_exporter_exposes_every_seed_series():
    pytest.importorskip("prometheus_client", reason="installed with vLLM (make setup)")
    from meridian.telemetry.prometheus import PrometheusExporter

    exporter = PrometheusExporter(meridian.MetricRegistry())
    exporter.sync()
    assert missing_series(exporter.exposition().decode()) == []


def test_the_cpp_exporter_serves_every_seed_series(meridian_bin, tmp_path):
    from test_replay_metrics import scrape, start_replay

    proc, url = start_replay(meridian_bin, tmp_path, "--linger-s", 30)
    try:
        text = scrape(url)  # every series exists from the start (zeros until the run moves them)
    finally:
        proc.kill()
        proc.wait()
    assert missing_series(text) == []
