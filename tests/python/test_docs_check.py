"""scripts/docs_check.py (make docs-check): how it reads Markdown, reports a failing command, and
compares the configuration reference with the schema. The full check over the real docs is
`make docs-check`; these tests use small documents of their own."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("docs_check", REPO / "scripts" / "docs_check.py")
docs_check = importlib.util.module_from_spec(_SPEC)
sys.modules["docs_check"] = docs_check
_SPEC.loader.exec_module(docs_check)


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "doc.md"
    path.write_text(text)
    return path


def test_failing_command_is_reported_with_file_line_and_output(tmp_path, capsys):
    doc = write(tmp_path, "# Title\n\n```sh\ntrue\necho before\nls does-not-exist-here   # fails\necho never\n```\n")
    failures = docs_check.check_commands([doc], tmp_path, tmp_path, timeout_s=30, dry_run=False)
    assert len(failures) == 1
    text = str(failures[0])
    assert text.startswith("doc.md:6: command failed (exit status 2)")
    assert "ls does-not-exist-here" in text and "No such file or directory" in text
    assert "before" not in text.split("--- output ---")[1]  # only the failing command's output
    assert "FAIL" in capsys.readouterr().out


def test_commands_run_in_a_scratch_copy_that_keeps_state_within_a_block(tmp_path):
    (tmp_path / "data.txt").write_text("x\n")
    doc = write(tmp_path, "```bash\nexport GREETING=hi\ncat data.txt > copy.txt\ntest \"$GREETING\" = hi\n```\n")
    assert docs_check.check_commands([doc], tmp_path, tmp_path, timeout_s=30, dry_run=False) == []
    assert not (tmp_path / "copy.txt").exists()  # written in the scratch root, not the repository


def test_multi_line_commands_and_console_prompts():
    text = ("```sh\n# a comment\nfor n in 1 2; do\n  echo $n\ndone\nmeridian replay \\\n  --seeds 2\n```\n"
            "```console\n$ echo one \\\n> two\none two\n$ echo three\nthree\n```\n")
    blocks = docs_check.extract_blocks(pathlib.Path("x.md"), text)
    assert [[(c.line, c.text) for c in b.commands] for b in blocks] == [
        [(3, "for n in 1 2; do\n  echo $n\ndone"), (6, "meridian replay \\\n  --seeds 2")],
        [(10, "echo one \\\ntwo"), (13, "echo three")],
    ]


def test_content_blocks_are_not_commands():
    text = "```toml\n[scheduler]\n```\n```python\nimport meridian\n```\n```\nls\n```\n"
    assert docs_check.extract_blocks(pathlib.Path("x.md"), text) == []


def test_skip_needs_a_reason():
    good = "<!-- docs-check: skip (needs a GPU) -->\n```sh\nnvidia-smi\n```\n"
    [block] = docs_check.extract_blocks(pathlib.Path("x.md"), good)
    assert block.skip_reason == "needs a GPU"
    for directive in ("<!-- docs-check: skip -->", "<!-- docs-check: skip () -->"):
        with pytest.raises(docs_check.DocsCheckError, match=r"x.md:1: a docs-check skip needs a reason"):
            docs_check.extract_blocks(pathlib.Path("x.md"), f"{directive}\n```sh\nnvidia-smi\n```\n")


def test_misplaced_or_unknown_directives_are_errors():
    with pytest.raises(docs_check.DocsCheckError, match="x.md:1: docs-check directive not followed"):
        docs_check.extract_blocks(pathlib.Path("x.md"), "<!-- docs-check: skip (why) -->\ntext\n```sh\nls\n```\n")
    with pytest.raises(docs_check.DocsCheckError, match="unknown docs-check directive"):
        docs_check.extract_blocks(pathlib.Path("x.md"), "<!-- docs-check: run-twice -->\n```sh\nls\n```\n")
    with pytest.raises(docs_check.DocsCheckError, match="not valid shell"):
        docs_check.extract_blocks(pathlib.Path("x.md"), "```sh\necho )\n```\n")


def test_skipped_block_is_not_run(tmp_path, capsys):
    doc = write(tmp_path, "<!-- docs-check: skip (needs a network) -->\n```sh\nfalse\n```\n")
    assert docs_check.check_commands([doc], tmp_path, tmp_path, timeout_s=30, dry_run=False) == []
    out = capsys.readouterr().out
    assert "skip doc.md:2 (needs a network)" in out


REFERENCE = """# Configuration

## [scheduler]

### `max_think_tokens`

| Type | Default | Unit | Valid range |
|---|---|---|---|
| integer | `32768` | tokens | 1 to 100000 |

### `reap_idle_after_s`

| Type | Default | Unit | Valid range |
|---|---|---|---|
| float | `60.0` | seconds | > 0 |

## [model.<name>]

### `reasoning_parser`

| Type | Default | Valid range |
|---|---|---|
| string | preset's value | `"qwen3"` |
"""
SCHEMA = ["scheduler.max_think_tokens", "scheduler.reap_idle_after_s", "model.<name>.reasoning_parser"]
DEFAULTS = {"scheduler.max_think_tokens": 32768, "scheduler.reap_idle_after_s": 60.0}


def fake_probe(bounds: dict[str, tuple[float, float, bool]]):
    """check-config as a function: a value outside [lo, hi] (lo exclusive when flagged) is an error."""

    def probe(path: str, literal: str) -> list[str]:
        lo, hi, lo_exclusive = bounds[path]
        value = float(literal.strip('"')) if literal[0] != '"' else None
        bad = value is None or value != value or value < lo or value > hi or (lo_exclusive and value == lo)
        return [path] if bad else []

    return probe


def test_reference_matching_the_schema_passes():
    probe = fake_probe({"scheduler.max_think_tokens": (1, 100000, False),
                        "scheduler.reap_idle_after_s": (0, 1e308, True)})
    assert docs_check.check_config_reference(REFERENCE, "c.md", SCHEMA, DEFAULTS, probe) == []


def test_missing_config_field_is_reported():
    failures = docs_check.check_config_reference(REFERENCE, "c.md", SCHEMA + ["scheduler.new_knob"],
                                                 {**DEFAULTS, "scheduler.new_knob": 1}, None)
    assert [str(f) for f in failures] == [
        "c.md: scheduler.new_knob is in the schema but not documented: add ### `new_knob` with its "
        "| Type | Default | Valid range | table under ## [scheduler]"]


def test_field_the_schema_lacks_and_wrong_default_are_reported():
    failures = docs_check.check_config_reference(REFERENCE, "c.md", SCHEMA[1:],
                                                 {"scheduler.reap_idle_after_s": 30.0}, None)
    assert [str(f) for f in failures] == [
        "c.md:5: scheduler.max_think_tokens is documented but the schema has no such field",
        "c.md:15: scheduler.reap_idle_after_s default is 60.0 in the reference but 30.0 in the schema"]


def test_range_the_parser_does_not_enforce_is_reported():
    probe = fake_probe({"scheduler.max_think_tokens": (1, 50000, False),  # stricter than documented
                        "scheduler.reap_idle_after_s": (0, float("inf"), False)})  # takes 0 and inf
    failures = [str(f) for f in docs_check.check_config_reference(REFERENCE, "c.md", SCHEMA, DEFAULTS, probe)]
    assert failures == [
        "c.md:9: scheduler.max_think_tokens = 100000 is rejected by check-config, but the reference's range "
        "'1 to 100000' says it is valid",
        "c.md:15: scheduler.reap_idle_after_s = 0.0 is accepted by check-config, but the reference's range "
        "'> 0' says it is not valid",
        "c.md:15: scheduler.reap_idle_after_s = inf is accepted by check-config; a float field takes finite "
        "values only"]


@pytest.mark.parametrize("cell, integer, probes", [
    ("> 0", False, [("0.0", False), ("1e-06", True)]),
    ("(0, 1]", False, [("0.0", False), ("1e-06", True), ("1.000001", False), ("1.0", True)]),
    ("1 to 65535", True, [("0", False), ("1", True), ("65536", False), ("65535", True)]),
    ("> `min_think_tokens`", True, []),
    ("> 0, and <= `capacity_bytes`", True, [("0", False)]),  # the relative part is not probed
    ('`"info"`, `"off"`', False, [('"info"', True), ('"off"', True), ('"docs-check-not-a-value"', False)]),
])
def test_range_probes(cell, integer, probes):
    assert docs_check.range_probes(cell, integer) == probes


# ---- The metric catalog table (docs/operations.md against meridian.metric_catalog()) ----------

SMALL_CATALOG = [
    {"name": "meridian_queue_depth", "type": "gauge", "unit": "requests",
     "labels": [("queue", ["output", "think"])], "buckets": [], "help": "Requests in each queue.",
     "source": "StepPlan::stats", "action": "think | output: compare."},
    {"name": "meridian_budget_forced_exits_total", "type": "counter", "unit": "events", "labels": [],
     "buckets": [], "help": "Closed while a forced </think> was pending.", "source": "PhaseRouter",
     "action": "Informational."},
]


def catalog_doc(table: str) -> str:
    return f"# Operations\n\nIntro.\n\n{docs_check.CATALOG_BEGIN}\n{table}\n{docs_check.CATALOG_END}\n\n## Alerts\n"


def test_metric_catalog_table_is_rendered_from_the_catalog():
    table = docs_check.render_metric_catalog(SMALL_CATALOG).splitlines()
    assert table[0] == "| Metric | Type | Labels | Unit | Meaning | Operator action |"
    assert table[2] == ("| `meridian_queue_depth` | gauge | `queue`: `output`, `think` | requests | "
                        "Requests in each queue. | think \\| output: compare. |")
    assert table[3] == ("| `meridian_budget_forced_exits_total` | counter | — | events | "
                        "Closed while a forced &lt;/think&gt; was pending. | Informational. |")


def test_metric_catalog_table_matching_the_catalog_passes():
    doc = catalog_doc(docs_check.render_metric_catalog(SMALL_CATALOG))
    assert docs_check.check_metric_catalog(doc, "ops.md", SMALL_CATALOG) == []


def test_metric_catalog_drift_is_reported_with_the_line_and_the_fix():
    doc = catalog_doc(docs_check.render_metric_catalog(SMALL_CATALOG).replace("| gauge |", "| counter |"))
    [failure] = docs_check.check_metric_catalog(doc, "ops.md", SMALL_CATALOG)
    assert failure.where == "ops.md:8"  # the row of meridian_queue_depth
    assert "| counter |" in failure.message and "| gauge |" in failure.message
    assert "--write-metric-catalog" in failure.message
    # A metric the docs lack (the catalog grew) is reported too.
    grown = SMALL_CATALOG + [dict(SMALL_CATALOG[1], name="meridian_new_total")]
    [failure] = docs_check.check_metric_catalog(doc.replace("| counter |", "| gauge |", 1), "ops.md", grown)
    assert "has 4 lines but the catalog gives 5" in failure.message


def test_metric_catalog_markers_are_required_and_write_regenerates_the_table():
    [failure] = docs_check.check_metric_catalog("# Operations\n| table |\n", "ops.md", SMALL_CATALOG)
    assert "metric-catalog:begin" in failure.message
    with pytest.raises(docs_check.DocsCheckError):
        docs_check.write_metric_catalog("no markers", SMALL_CATALOG)
    stale = catalog_doc("| old | table |")
    fresh = docs_check.write_metric_catalog(stale, SMALL_CATALOG)
    assert fresh.startswith("# Operations\n\nIntro.\n\n") and fresh.endswith("\n\n## Alerts\n")
    assert docs_check.check_metric_catalog(fresh, "ops.md", SMALL_CATALOG) == []
    assert docs_check.write_metric_catalog(fresh, SMALL_CATALOG) == fresh  # idempotent


def test_operations_doc_matches_the_installed_catalog():
    """What `make docs-check` checks, on the real docs and the real binding."""
    import meridian

    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    assert docs_check.check_metric_catalog(text, "docs/operations.md", meridian.metric_catalog()) == []
