"""Per-request overrides: SamplingParams.extra_args["meridian"] (Python API)
and flat "meridian_<key>" entries (the OpenAI API's vllm_xargs)."""
from __future__ import annotations

import pytest

from meridian.vllm._setup import validate_extra_args


def test_absent_or_empty():
    assert validate_extra_args(None) == {}
    assert validate_extra_args({}) == {}
    assert validate_extra_args({"kv_transfer_params": {}}) == {}


def test_nested_form():
    got = validate_extra_args({"meridian": {"forcing": False, "max_think_tokens": 256, "min_think_tokens": 0}})
    assert got == {"forcing": False, "max_think_tokens": 256, "min_think_tokens": 0}


def test_flat_form_from_vllm_xargs():
    got = validate_extra_args({"meridian_forcing": "false", "meridian_throttle": 1, "meridian_max_think_tokens": "64"})
    assert got == {"forcing": False, "throttle": True, "max_think_tokens": 64}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"meridian": {"max_think_tokens": -3}}, r"extra_args.meridian.max_think_tokens must be an integer >= 1; got -3"),
        ({"meridian": {"max_think_tokens": 2.5}}, r"max_think_tokens must be an integer >= 1; got 2.5"),
        ({"meridian": {"forcing": "maybe"}}, r"extra_args.meridian.forcing must be true or false; got 'maybe'"),
        ({"meridian": {"throttle": 2}}, r"throttle must be true or false; got 2"),
        ({"meridian": {"budget": 5}}, r"extra_args.meridian.budget is not a Meridian option \(known: forcing"),
        ({"meridian_budget": 5}, r"extra_args.meridian.budget is not a Meridian option"),
        ({"meridian": [1, 2]}, r"extra_args.meridian must be a mapping; got list"),
        ({"meridian": {"min_think_tokens": 10, "max_think_tokens": 5}}, r"min_think_tokens must be <= max_think_tokens"),
        ({"meridian": {"max_think_tokens": True}}, r"max_think_tokens must be an integer >= 1; got True"),
    ],
)
def test_bad_values_name_the_key(args, message):
    with pytest.raises(ValueError, match=message):
        validate_extra_args(args)
