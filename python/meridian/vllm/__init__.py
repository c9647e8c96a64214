"""Meridian inside vLLM (v1 engine, 0.32.x).

    vllm serve Qwen/Qwen3-8B --reasoning-parser qwen3 \\
      --scheduler-cls meridian.vllm.Scheduler \\
      --logits-processors meridian.vllm:ForceThinkEnd

``Scheduler`` is a subclass of vLLM's ``AsyncScheduler`` driven by Meridian's
C++ phase router and dual-queue scheduler; ``ForceThinkEnd`` is the
budget-forcing logits processor (both of vLLM's logits-processor
interfaces). docs/deployment.md has what each does and does not control.

Attributes load on first use, so importing one part does not import the
other (``import meridian`` itself never imports this package).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Scheduler": ".scheduler",
    "ForceThinkEnd": ".logits_processor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'meridian.vllm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
