"""The trace in the model's place: every token id a pure function of (request,
output index), and prompts whose block hashes hit vLLM's prefix cache exactly
where the simulator's prefix cache hits (src/sim/engine.cpp, block_hash()).

A conversation's transcript (each turn's prompt, then its visible answer) is
one sequence of ids per conversation, so turn k+1's prompt repeats turn k's
prompt and answer token for token; a reasoning turn's KV holds its think
tokens after the prompt, so only its prompt blocks can hit, as in the
simulator. A reasoning prompt ends with ``<think>`` (the chat template's open
think block); its outputs are think tokens, ``</think>``, the answer, EOS.
A chat request's outputs are the answer, EOS. Ids are Qwen3's.
"""
from __future__ import annotations

from typing import Any

THINK = 151667  # <think>
END_THINK = 151668  # </think>
EOS = 151645  # <|im_end|>
_ORDINARY = 140000  # ids 1000 .. 140999: ordinary tokens, below every special id (151643+)


def ordinary(stream: int, key: int, index: int) -> int:
    """An ordinary token id, a pure function of (stream, key, index).

    CPython's hash of a tuple of ints: deterministic (PYTHONHASHSEED randomises only str and
    bytes), well spread, and one C call per token, so the driver stays cheap beside vLLM."""
    return 1000 + hash((stream, key, index)) % _ORDINARY


_TRANSCRIPT, _PRIVATE, _THINKING = 1, 2, 3


class TokenPlan:
    """One request's prompt ids and output ids. ``parent`` is the previous
    turn's transcript (its prompt and visible answer), or None for a first turn."""

    eos = EOS

    def __init__(self, spec: Any, parent: list[int] | None) -> None:
        self.spec = spec
        self.reasoning = bool(spec.reasoning)
        if spec.conversation:
            self.stream, self.key = _TRANSCRIPT, int(spec.conversation)
        else:
            self.stream, self.key = _PRIVATE, int(spec.id)
        base = list(parent or [])
        n = int(spec.prompt_tokens)
        if len(base) >= n:  # a trace whose follow-up is not longer than its transcript
            base = base[: n - 1]
        prompt = base + [ordinary(self.stream, self.key, p) for p in range(len(base), n)]
        if self.reasoning:
            prompt[-1] = THINK
        self.prompt = prompt
        self.think = int(spec.think_tokens)
        self.answer = int(spec.answer_tokens)
        self.max_tokens = self.think + 1 + self.answer if self.reasoning else self.answer

    def _answer(self, j: int) -> int:
        if j >= self.answer - 1:
            return EOS
        return ordinary(self.stream, self.key, len(self.prompt) + j)

    def token(self, index: int) -> int:
        """The model's output token at output index ``index`` (0-based)."""
        if not self.reasoning:
            return self._answer(index)
        if index < self.think:
            return ordinary(_THINKING, int(self.spec.id), index)
        if index == self.think:
            return END_THINK
        return self._answer(index - self.think - 1)

    def transcript(self) -> list[int]:
        """This turn's prompt and visible answer: the next turn's prompt starts with it."""
        return self.prompt + [self._answer(j) for j in range(self.answer)]
