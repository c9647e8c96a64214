"""What every part of Meridian inside vLLM needs at start-up: the
configuration, the model preset and its check against the served
tokenizer's ids, and per-request overrides.

Configuration comes from meridian's own discovery: ``$MERIDIAN_CONFIG``,
``./meridian.toml``, ``~/.config/meridian/meridian.toml``, else the defaults.
The model preset is ``$MERIDIAN_MODEL`` if set, else the one preset whose
``reasoning_parser`` is vLLM's ``--reasoning-parser`` and whose think ids match
the ids vLLM derived from the served tokenizer.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import meridian

logger = logging.getLogger("meridian.vllm")

MODEL_ENV = "MERIDIAN_MODEL"


class MeridianSetupError(ValueError):
    """Meridian cannot run with this configuration or this model; the message
    says what disagrees and how to fix it."""


@dataclass(frozen=True)
class Setup:
    config: Any  # meridian.MeridianConfig
    model_name: str
    model: Any  # meridian.ModelConfig
    config_source: str  # the file, or "defaults"


def load_meridian_config() -> tuple[Any, str]:
    found = meridian.find_default_config_file()
    if found is None:
        return meridian.MeridianConfig.defaults(), "defaults"
    try:
        return meridian.load_config(found), os.fspath(found)
    except ValueError as e:
        raise MeridianSetupError(f"meridian: invalid configuration in {os.fspath(found)}: {e}") from e


def _served_reasoning(vllm_config: Any) -> tuple[str, list[int] | None, list[int] | None]:
    """vLLM's reasoning parser name and the think start / natural end ids it
    derived from the served tokenizer (None where vLLM has none)."""
    parser = ""
    soc = getattr(vllm_config, "structured_outputs_config", None)
    if soc is not None:
        parser = getattr(soc, "reasoning_parser", "") or ""
    rc = getattr(vllm_config, "reasoning_config", None)
    start = end = None
    if rc is not None:
        parser = parser or getattr(rc, "reasoning_parser", "") or ""
        if getattr(rc, "enabled", False):
            start = list(rc.reasoning_start_token_ids or []) or None
            end = list(rc.natural_reasoning_end_token_ids or []) or None
    return parser, start, end


def _parser_name(model: Any) -> str:
    """The preset's reasoning parser as vLLM names it (qwen3, deepseek_r1, granite)."""
    value = model.reasoning_parser
    return str(getattr(value, "name", value)).lower()


def _mismatch(model: Any, start: list[int] | None, end: list[int] | None) -> str | None:
    want_start = list(model.think_start_token_ids)
    want_end = list(model.think_end_token_ids)
    problems = []
    if start is not None and want_start and start != want_start:
        problems.append(f"<think> is {want_start} in the preset but {start} in the served tokenizer")
    if end is not None and want_end and end != want_end:
        problems.append(f"</think> is {want_end} in the preset but {end} in the served tokenizer")
    return "; ".join(problems) or None


def resolve_setup(vllm_config: Any) -> Setup:
    """The configuration and the checked model preset for this engine.
    Raises MeridianSetupError with a clear message when they disagree."""
    config, source = load_meridian_config()
    meridian.configure_logging(config)  # idempotent; only engines that enable a part get here
    parser, start, end = _served_reasoning(vllm_config)
    names = list(config.model_names)
    chosen = os.environ.get(MODEL_ENV, "").strip()
    if chosen:
        if chosen not in names:
            raise MeridianSetupError(
                f"meridian: ${MODEL_ENV}={chosen!r} is not a model preset; known: {', '.join(sorted(names))}"
            )
        model = config.model(chosen)
        problem = _mismatch(model, start, end)
        if problem:
            raise MeridianSetupError(
                f"meridian: model preset {chosen!r} does not match the served model: {problem}. "
                f"Set ${MODEL_ENV} to the right preset or correct [model.{chosen}] in {source}."
            )
        return Setup(config, chosen, model, source)
    if not parser:
        raise MeridianSetupError(
            "meridian: cannot tell which reasoning model is served: start vLLM with --reasoning-parser "
            f"(e.g. qwen3, deepseek_r1) or set ${MODEL_ENV} to one of: {', '.join(sorted(names))}"
        )
    candidates = [n for n in names if _parser_name(config.model(n)) == parser]
    if not candidates:
        raise MeridianSetupError(
            f"meridian: no model preset uses reasoning parser {parser!r}; add a [model.<name>] section "
            f"to {source if source != 'defaults' else 'meridian.toml'} or set ${MODEL_ENV}"
        )
    matching = [n for n in candidates if _mismatch(config.model(n), start, end) is None]
    if not matching:
        detail = "; ".join(f"{n}: {_mismatch(config.model(n), start, end)}" for n in candidates)
        raise MeridianSetupError(
            f"meridian: no model preset for reasoning parser {parser!r} matches the served tokenizer ({detail}). "
            f"Correct the preset in {source} or set ${MODEL_ENV}."
        )
    if len(matching) > 1 and start is None and end is None:
        logger.warning(
            "meridian: presets %s all use reasoning parser %r and vLLM derived no think ids to tell them "
            "apart; using %r (set $%s to choose)", matching, parser, matching[0], MODEL_ENV)
    return Setup(config, matching[0], config.model(matching[0]), source)


# --- per-request overrides ---------------------------------------------------

#: Python API: SamplingParams(extra_args={"meridian": {"forcing": False}}).
#: OpenAI API: "vllm_xargs": {"meridian_forcing": "false"} (vLLM's vllm_xargs
#: holds only flat string / number values, so each key is also accepted flat,
#: prefixed "meridian_", with booleans as true/false, 1/0 or "true"/"false").
EXTRA_ARGS_KEY = "meridian"
FLAT_PREFIX = "meridian_"
_BOOL_KEYS = {"forcing", "throttle"}
_INT_KEYS = {"max_think_tokens": 1, "min_think_tokens": 0}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"extra_args.meridian.{key} must be true or false; got {value!r}")


def _as_int(key: str, value: Any, low: int) -> int:
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    if number is None or number < low:
        raise ValueError(f"extra_args.meridian.{key} must be an integer >= {low}; got {value!r}")
    return number


def validate_extra_args(extra_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request's Meridian overrides, validated and normalised.

    ``forcing`` (bool): False never forces the end of thinking for this
    request. ``throttle`` (bool): False never holds this request's think
    decode back. ``max_think_tokens`` (int >= 1) and ``min_think_tokens``
    (int >= 0) replace the configured values. Given as
    ``extra_args["meridian"][key]`` or ``extra_args["meridian_" + key]``.
    Raises ValueError naming the key on anything else.
    """
    if not extra_args:
        return {}
    raw: dict[str, Any] = {}
    nested = extra_args.get(EXTRA_ARGS_KEY)
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise ValueError(f"extra_args.meridian must be a mapping; got {type(nested).__name__}")
        raw.update(nested)
    for key, value in extra_args.items():
        if isinstance(key, str) and key.startswith(FLAT_PREFIX):
            raw[key[len(FLAT_PREFIX):]] = value
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _BOOL_KEYS:
            out[key] = _as_bool(key, value)
        elif key in _INT_KEYS:
            out[key] = _as_int(key, value, _INT_KEYS[key])
        else:
            known = ", ".join(sorted(_BOOL_KEYS | set(_INT_KEYS)))
            raise ValueError(f"extra_args.meridian.{key} is not a Meridian option (known: {known})")
    if "min_think_tokens" in out and "max_think_tokens" in out and out["min_think_tokens"] > out["max_think_tokens"]:
        raise ValueError(
            "extra_args.meridian.min_think_tokens must be <= max_think_tokens; got "
            f"{out['min_think_tokens']} > {out['max_think_tokens']}"
        )
    return out
