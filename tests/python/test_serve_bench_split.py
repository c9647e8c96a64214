"""The serve bench's reasoning/answer split of streamed chunks (benchmarks/serve_bench/client.py)."""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

from serve_bench.client import Record, Tokens, _Split  # noqa: E402

THINK_START, THINK_END = 151667, 151668  # Qwen3's <think>, </think>


def _split() -> tuple[_Split, Record]:
    rec = Record(id=1, reasoning=True, conversation=0, turn=0)
    tokens = Tokens(think_start=THINK_START, think_end=THINK_END, overhead_reasoning=0, overhead_chat=0,
                    think_tail=0, max_model_len=4096)
    return _Split(rec, tokens, None), rec


def test_a_flushed_partial_character_at_the_boundary_is_not_a_mismatch():
    """vLLM flushes an unfinished UTF-8 character as U+FFFD in the chunk that carries </think>
    (seen in the stock arm of test_vllm_serve_bench under load)."""
    split, rec = _split()
    split.on_chunk(0.01, [100, 101], {"reasoning": "ab"}, True)
    split.on_chunk(0.02, [102], {"reasoning": ""}, True)  # a byte token: its text held back
    split.on_chunk(0.03, [THINK_END], {"reasoning": "\ufffd"}, True)
    split.on_chunk(0.04, [200], {"content": "x"}, True)
    assert (rec.think_tokens, rec.answer_tokens) == (3, 1)
    assert rec.split_mismatches == 0


def test_text_in_the_wrong_section_is_still_a_mismatch():
    split, rec = _split()
    split.on_chunk(0.01, [100], {"reasoning": "a"}, True)
    split.on_chunk(0.02, [THINK_END], {"reasoning": "leaked"}, True)  # real text with no think token
    split.on_chunk(0.03, [200], {"reasoning": "b"}, True)  # an answer token reported as reasoning
    assert rec.split_mismatches == 2
    # Replacement characters before any token of that section are not flushed bytes either.
    split2, rec2 = _split()
    split2.on_chunk(0.01, [THINK_END], {"reasoning": "\ufffd"}, True)
    assert rec2.split_mismatches == 1
