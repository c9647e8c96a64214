"""The benchmark drivers' report logic, on synthetic Google Benchmark output
(the benchmarks themselves run in `make bench`)."""
import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def load_run_microbench():
    spec = importlib.util.spec_from_file_location("run_microbench", REPO / "benchmarks" / "run_microbench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median(name, **fields):
    return {"run_name": name, "aggregate_name": "median", "real_time": 1000.0, "time_unit": "ns", **fields}


def benchmark_output(mb, without_items=()):
    names = {n for _, num, den, _ in mb.RATIOS for n in (num, den)}
    benchmarks = [median(n) if n in without_items else median(n, items_per_second=1e6) for n in sorted(names)]
    for _, name, counter, _ in mb.PERCENTILES:
        entry = next(b for b in benchmarks if b["run_name"] == name)
        entry[counter] = 5.0
    return {"context": {"host_name": "test"}, "benchmarks": benchmarks}


def test_benchmarks_without_items_are_listed_by_time_not_a_key_error():
    # Issue 15: `make bench` failed with KeyError: 'items_per_second' on a benchmark that counts no items.
    mb = load_run_microbench()
    data = benchmark_output(mb)
    data["benchmarks"].append(median("BM_SomethingWithoutItems"))
    report = mb.summarize(data)
    assert len(report["ratios"]) == len(mb.RATIOS)
    assert "BM_SomethingWithoutItems" not in report["ns_per_item"]
    assert report["real_time"]["BM_SomethingWithoutItems"] == {"value": 1000.0, "unit": "ns"}


def test_a_ratio_whose_benchmark_counts_no_items_is_named():
    mb = load_run_microbench()
    with pytest.raises(ValueError, match=r"BM_ProbeStreamRead/16 reports no items_per_second"):
        mb.summarize(benchmark_output(mb, without_items={"BM_ProbeStreamRead/16"}))
