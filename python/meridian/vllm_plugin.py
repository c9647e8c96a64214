"""The seeds' ``meridian.vllm_plugin.MeridianSchedulerPlugin``, kept only to
say where it went.

The seeds wrapped vLLM's V0 scheduler at run time
(``MeridianSchedulerPlugin.attach(engine, cfg, model_key=...)`` replaced
``engine.scheduler[0]``). vLLM V1 has no such slot: Meridian is chosen with
engine flags instead, so constructing the plugin or calling ``attach``
raises :class:`SchedulerPluginRemovedError` (a ``NotImplementedError``, hence
a ``RuntimeError``) naming them. docs/deployment.md has the V1 integration.

Importing this module imports nothing beyond the ``meridian`` package (never
vLLM), so it works without vLLM installed. Thread-safety: nothing here has state; any thread may use it.
"""
from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["V1_FLAGS", "MeridianSchedulerPlugin", "SchedulerPluginRemovedError"]

#: The vLLM V1 flags that replace ``MeridianSchedulerPlugin.attach`` (the
#: reasoning parser is the served model's: ``qwen3``, ``deepseek_r1``, ...).
V1_FLAGS = ("--reasoning-parser qwen3 --scheduler-cls meridian.vllm.Scheduler "
            "--logits-processors meridian.vllm:ForceThinkEnd")


class SchedulerPluginRemovedError(NotImplementedError):
    """The seeds' V0 scheduler plugin is gone; the message names the V1 flags."""


def _removed(what: str) -> NoReturn:
    raise SchedulerPluginRemovedError(
        f"{what}: the V0 attach API (a wrapper installed as engine.scheduler[0]) is gone; vLLM V1 has no "
        f"such slot. Start vLLM with Meridian's V1 classes instead, e.g. `vllm serve Qwen/Qwen3-8B "
        f"{V1_FLAGS}` (use the served model's --reasoning-parser; either of the other two flags works "
        f"alone). docs/deployment.md describes them."
    )


class MeridianSchedulerPlugin:
    """Placeholder for the seeds' vLLM V0 scheduler wrapper: constructing it
    or calling :meth:`attach` raises :class:`SchedulerPluginRemovedError`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _removed("MeridianSchedulerPlugin(...)")

    @classmethod
    def attach(cls, *args: Any, **kwargs: Any) -> MeridianSchedulerPlugin:
        """The seeds' ``attach(engine, cfg, model_key=...)``; always raises."""
        _removed("MeridianSchedulerPlugin.attach(...)")
