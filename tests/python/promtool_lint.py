"""`promtool check metrics` on an exposition, less the one lint problem Meridian keeps on purpose.

The original project's catalog names a histogram `meridian.schedule_batch.duration_ns`; its naming
rule gives `meridian_schedule_batch_duration_ns`, which promtool's linter flags ("metric names should
not contain abbreviated units"). Meridian exports it beside the base-unit
`meridian_schedule_batch_duration_seconds` (same observations) so that dashboards written for the
original keep working (issue 27; tests/python/test_seed_metric_names.py). Every other lint problem,
and any parse error, is still reported."""
from __future__ import annotations

import subprocess

# (metric name, promtool's lint message) pairs that are expected.
EXPECTED_LINT = {
    ("meridian_schedule_batch_duration_ns", "metric names should not contain abbreviated units"),
}
LINT_PROBLEMS_EXIT = 3  # promtool: the text parsed, and the linter found problems


def lint_problems(promtool: str, exposition: str) -> list[str]:
    """The problems `promtool check metrics` reports for `exposition` that are not EXPECTED_LINT
    (an empty list: clean)."""
    result = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True,
                            timeout=60)
    if result.returncode == 0:
        return []
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    if result.returncode != LINT_PROBLEMS_EXIT:
        return lines or [f"promtool exited with {result.returncode}"]
    return [line for line in lines if tuple(line.split(" ", 1)) not in EXPECTED_LINT]
