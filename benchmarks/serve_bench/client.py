"""The load generator: a workload's requests, sent concurrently and streamed.

Every request is a streamed ``/v1/chat/completions`` call sent at its arrival
time (``asyncio.sleep``, no busy waiting); follow-up turns are sent
``delay_s`` after the turn they follow finished, with that turn's visible
answer in the transcript (reasoning is not carried over, as in the replay).
Each streamed chunk is timed with ``time.perf_counter()`` relative to the
moment its request was sent. Tokens are split into reasoning and answer by
their ids (``return_token_ids``: ``</think>`` ends the reasoning) and checked
against the delta fields the reasoning parser fills (``reasoning`` in vLLM
0.32.0, ``reasoning_content`` before it).

Thread-safety: everything here runs on one asyncio event loop.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:  # the workload's requests (the replay's C++ RequestSpec); only annotations name it here
    from meridian._meridian.sim import RequestSpec

# Words that are one token each (with their leading space) in the Qwen2/Qwen3
# tokenizer; a prompt of N words is N tokens plus the chat template's own.
WORDS = (
    "the of and to in is that for it with as was on be at by this have from or one had not but what all were "
    "when we there can an your which their said if do will each about how up out them then she many some so "
    "these would other into has more her two like him see time could no make than first been its who now "
    "people my made over did down only way find use may water long little very after words called just where "
    "most know"
).split()


@dataclasses.dataclass
class Tokens:
    """What the bench learned from the server's tokenizer at start-up."""

    think_start: int | None
    think_end: int | None
    overhead_reasoning: int  # chat-template tokens around one user message (thinking on)
    overhead_chat: int  # the same with enable_thinking false
    think_tail: int  # prompt tokens after an opened <think> (0 if the template opens none)
    max_model_len: int


@dataclasses.dataclass
class Record:
    """One request's measurement; times are seconds since it was sent (perf_counter)."""

    id: int
    reasoning: bool
    conversation: int
    turn: int
    status: str = "never_arrived"  # sent, completed, aborted, unfinished
    scheduled_s: float = 0.0  # arrival, seconds since the run started
    sent_s: float = 0.0  # when it was actually sent, seconds since the run started
    prompt_tokens: int = 0  # measured (the server's prompt_token_ids)
    requested_think: int = 0  # the think length the workload asked for (exact lengths)
    first_token: float = -1.0
    think_end: float = -1.0
    first_visible: float = -1.0
    last_token: float = -1.0
    think_tokens: int = 0
    answer_tokens: int = 0
    think_gaps: list[float] = dataclasses.field(default_factory=list)
    answer_gaps: list[float] = dataclasses.field(default_factory=list)
    chunks: int = 0
    multi_token_chunks: int = 0
    split_mismatches: int = 0  # chunks whose delta fields disagree with the token-id split
    # The first few of them, to tell a parser that is not set from text the detokenizer held back:
    # {"chunk", "ids", "reasoning", "content"}.
    split_mismatch_chunks: list[dict] = dataclasses.field(default_factory=list)
    window_tokens: int = 0  # tokens that arrived while first-turn arrivals lasted
    finish_reason: str | None = None
    error: str | None = None
    answer_text: str = ""

    def as_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("answer_text")
        return d


@dataclasses.dataclass
class RunConfig:
    """How requests are built: lengths, model name, server-dependent token facts."""

    model: str
    exact_lengths: bool
    send_priority: bool
    seed: int
    tokens: Tokens
    request_timeout_s: float
    arrival_window_s: float
    max_tokens: int | None = None  # natural lengths: the cap (None: the server's limit)
    request_seeds: bool = False  # a fixed sampling seed per request (the same tokens in every arm)


def words_for(seed: int, request_id: int, n: int) -> str:
    rng = random.Random((seed << 32) ^ request_id)
    return "".join(" " + rng.choice(WORDS) for _ in range(max(1, n))).lstrip()


def build_body(spec: RequestSpec, messages: list[dict], cfg: RunConfig) -> dict:
    """The chat-completion request of one workload request."""
    body: dict[str, Any] = {
        "model": cfg.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "temperature": 1.0,
    }
    if cfg.request_seeds:
        body["seed"] = (cfg.seed * 1_000_003 + spec.id) & 0x7FFFFFFF
    if not spec.reasoning:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    if cfg.exact_lengths:
        if spec.reasoning:
            # The request's think length, enforced by vLLM's own budget (which
            # counts the template's tokens after an opened <think> too); the
            # client stops reading once the answer has its length.
            body["thinking_token_budget"] = spec.think_tokens + cfg.tokens.think_tail
            body["max_tokens"] = spec.think_tokens + 1 + spec.answer_tokens
        else:
            body["max_tokens"] = spec.answer_tokens
        body["ignore_eos"] = True
    elif cfg.max_tokens is not None:
        body["max_tokens"] = cfg.max_tokens
    if cfg.send_priority:
        body["priority"] = spec.priority
    return body


def _only_flushed_bytes(text: str) -> bool:
    """Whether ``text`` is nothing but replacement characters (undecodable bytes flushed)."""
    return bool(text) and not text.strip("\ufffd")


class _Split:
    """The reasoning/answer state machine of one streamed request."""

    def __init__(self, rec: Record, tokens: Tokens, answer_target: int | None):
        self.rec = rec
        self.tokens = tokens
        self.thinking = rec.reasoning
        self.answer_target = answer_target
        self.last_think = -1.0
        self.last_answer = -1.0

    def done(self) -> bool:
        return self.answer_target is not None and self.rec.answer_tokens >= self.answer_target

    def on_chunk(self, t: float, ids: list[int] | None, delta: dict, in_window: bool) -> None:
        rec = self.rec
        reasoning_text = delta.get("reasoning") or delta.get("reasoning_content") or ""
        content = delta.get("content") or ""
        if ids is None:  # a server without return_token_ids: one token per chunk, split by the delta
            if not reasoning_text and not content:
                if self.thinking and rec.first_token >= 0:
                    ids = [self.tokens.think_end if self.tokens.think_end is not None else -1]
                else:
                    return
            else:
                ids = [0]
        if not ids:
            return
        rec.chunks += 1
        if len(ids) > 1:
            rec.multi_token_chunks += 1
        if in_window:
            rec.window_tokens += len(ids)
        if rec.first_token < 0:
            rec.first_token = t
        think_in_chunk = answer_in_chunk = 0
        for tid in ids:
            if self.thinking:
                if tid == self.tokens.think_end:
                    self.thinking = False
                    rec.think_end = t
                elif tid == self.tokens.think_start and rec.think_tokens == 0:
                    pass  # the model opened <think> itself: a marker, not a think token
                else:
                    rec.think_tokens += 1
                    think_in_chunk += 1
            else:
                rec.answer_tokens += 1
                answer_in_chunk += 1
                if self.done():
                    break
        if think_in_chunk:
            if self.last_think >= 0:
                rec.think_gaps.append(t - self.last_think)
            self.last_think = t
        if answer_in_chunk:
            if rec.first_visible < 0:
                rec.first_visible = t
            else:
                rec.answer_gaps.append(t - self.last_answer)
            self.last_answer = t
            rec.answer_text += content
        rec.last_token = t
        # vLLM's incremental detokenizer holds the bytes of an unfinished UTF-8 character and
        # flushes them as U+FFFD when the reasoning ends: text of a think token already
        # counted, in the chunk that carries </think>.
        if _only_flushed_bytes(reasoning_text) and rec.think_tokens > 0:
            reasoning_text = ""
        if (content and not answer_in_chunk) or (reasoning_text and not think_in_chunk):
            rec.split_mismatches += 1
            if len(rec.split_mismatch_chunks) < 4:
                rec.split_mismatch_chunks.append({"chunk": rec.chunks, "ids": list(ids)[:8],
                                                  "reasoning": reasoning_text[:64], "content": content[:64]})


async def stream_request(session: aiohttp.ClientSession, url: str, body: dict, rec: Record, cfg: RunConfig,
                         run_start: float, answer_target: int | None) -> None:
    """Sends one request and records its stream; never raises for a failed request."""
    split = _Split(rec, cfg.tokens, answer_target)
    sent = time.perf_counter()
    rec.sent_s = sent - run_start
    rec.status = "sent"
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                rec.status = "aborted"
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return
            async for raw in resp.content:
                t = time.perf_counter() - sent
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    rec.status = "aborted"
                    rec.error = json.dumps(chunk["error"])[:300]
                    return
                if chunk.get("prompt_token_ids") is not None:
                    rec.prompt_tokens = len(chunk["prompt_token_ids"])
                for choice in chunk.get("choices") or []:
                    ids = choice.get("token_ids")
                    in_window = rec.sent_s + t <= cfg.arrival_window_s
                    split.on_chunk(t, list(ids) if ids is not None else None, choice.get("delta") or {}, in_window)
                    if choice.get("finish_reason"):
                        rec.finish_reason = choice["finish_reason"]
                usage = chunk.get("usage")
                if usage and not rec.prompt_tokens:
                    rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                if split.done():
                    # Exact lengths: the answer is complete (the think phase ended early);
                    # closing the stream aborts the rest on the server.
                    rec.finish_reason = rec.finish_reason or "answer_complete"
                    resp.close()
                    break
        rec.status = "completed" if rec.finish_reason else "aborted"
        if rec.finish_reason is None:
            rec.error = "the stream ended without a finish_reason"
    except asyncio.CancelledError:
        rec.status = "unfinished"
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError, ValueError) as e:
        rec.status = "aborted"
        rec.error = f"{type(e).__name__}: {e}"[:300]


async def run_workload(url: str, requests: list[RequestSpec], cfg: RunConfig, max_run_s: float) -> tuple[
        list[Record], float]:
    """Runs the workload open-loop (first turns) and closed-loop (follow-ups); returns records and makespan."""
    records = {r.id: Record(id=r.id, reasoning=r.reasoning, conversation=r.conversation, turn=r.turn)
               for r in requests}
    specs = {r.id: r for r in requests}
    children: dict[int, list[int]] = {}
    for r in requests:
        if r.after:
            children.setdefault(r.after, []).append(r.id)
    messages: dict[int, list[dict]] = {}
    tasks: set[asyncio.Task] = set()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=cfg.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    run_start = time.perf_counter()
    last_finish = [run_start]

    async def one(spec: RequestSpec, at_s: float) -> None:
        rec = records[spec.id]
        rec.scheduled_s = at_s
        delay = run_start + at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        parent = specs.get(spec.after)
        if parent is not None:
            new_user = spec.prompt_tokens - parent.prompt_tokens - parent.answer_tokens
            history = messages[parent.id] + [{"role": "assistant", "content": records[parent.id].answer_text}]
        else:
            overhead = cfg.tokens.overhead_reasoning if spec.reasoning else cfg.tokens.overhead_chat
            new_user = spec.prompt_tokens - overhead
            history = []
        msgs = history + [{"role": "user", "content": words_for(cfg.seed, spec.id, new_user)}]
        messages[spec.id] = msgs
        rec.requested_think = spec.think_tokens
        body = build_body(spec, msgs, cfg)
        target = spec.answer_tokens if cfg.exact_lengths else None
        await stream_request(session, url, body, rec, cfg, run_start, target)
        last_finish[0] = max(last_finish[0], time.perf_counter())
        if rec.status == "completed":
            now_s = time.perf_counter() - run_start
            for child in children.get(spec.id, []):
                launch(specs[child], now_s + specs[child].delay_s)

    def launch(spec: RequestSpec, at_s: float) -> None:
        task = asyncio.create_task(one(spec, at_s))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for spec in requests:
            if spec.after == 0:
                launch(spec, spec.arrival_s)
        deadline = run_start + max_run_s
        while tasks:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                for task in list(tasks):
                    task.cancel()
                await asyncio.gather(*list(tasks), return_exceptions=True)
                break
            await asyncio.wait(list(tasks), timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
    for rec in records.values():
        if rec.status == "sent":
            rec.status = "unfinished"
    return [records[r.id] for r in requests], last_finish[0] - run_start
