"""Per-request settings of the forcing processor, read from
``SamplingParams.extra_args["meridian"]`` (or flat, ``extra_args["meridian_<key>"]``,
the form the OpenAI server's ``vllm_xargs`` can carry).

The keys are validated by ``_setup.validate_extra_args``, the one validator
that Meridian's scheduler uses too (a key valid for one part is never
rejected by the other). The processor reads:

``forcing``           bool, default true: false means the processor never
                      touches this request.
``max_think_tokens``  int >= 1: this request's hard cap (replaces
                      ``scheduler.max_think_tokens``).
``min_think_tokens``  int >= 0: no entropy-driven forcing before this many
                      think tokens (replaces ``scheduler.min_think_tokens``;
                      the hard cap still applies).

(``throttle`` belongs to the scheduler.) Anything else, or a bad value, is a
ValueError that names the key, e.g.
``extra_args.meridian.max_think_tokens must be an integer >= 1; got -3``.
Nothing here imports torch or vLLM: vLLM calls ``validate_params`` in the
API server process for every request.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._setup import validate_extra_args


@dataclass(frozen=True)
class RequestOverrides:
    """What one request asked for; ``None`` means "the config's value"."""

    forcing: bool = True
    max_think_tokens: int | None = None
    min_think_tokens: int | None = None

    def limits(self, default_min: int, default_max: int) -> tuple[int, int]:
        """(min_think_tokens, max_think_tokens) for this request."""
        lo = default_min if self.min_think_tokens is None else self.min_think_tokens
        hi = default_max if self.max_think_tokens is None else self.max_think_tokens
        return lo, hi


def parse_overrides(extra_args: Mapping[str, Any] | None) -> RequestOverrides:
    """The request's overrides; ValueError naming the key on bad input."""
    values = validate_extra_args(extra_args)
    if not values:
        return RequestOverrides()
    return RequestOverrides(
        forcing=values.get("forcing", True),
        max_think_tokens=values.get("max_think_tokens"),
        min_think_tokens=values.get("min_think_tokens"),
    )
