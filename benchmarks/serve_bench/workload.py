"""The benchmark's workload: the replay's request specs, generated or read from a trace.

The generator is a line-for-line port of ``src/sim/workload.cpp`` (same
counter-based random numbers, same lognormal draws, same rounding), so for
the same parameters and seed it produces exactly the workload that
``meridian replay`` writes as ``workload.jsonl``; ``tests/python/
test_vllm_serve_bench.py`` checks that. Traces use the replay's JSONL format
(docs/replay.md, "Trace format").
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Iterable

MASK64 = (1 << 64) - 1

# Random streams of src/sim/workload.cpp.
_ARRIVAL, _KIND, _TURNS, _PROMPT, _THINK, _ANSWER, _DELAY = 1, 2, 3, 4, 5, 6, 7

TRACE_FIELDS = (
    "arrival_s", "prompt_tokens", "think_tokens", "answer_tokens", "answer_at",
    "priority", "conversation", "turn", "after", "delay_s",
)


class WorkloadError(ValueError):
    """A bad workload parameter or trace line; the message names it."""


@dataclasses.dataclass(frozen=True)
class LengthDist:
    """Lognormal(median, sigma) token lengths, rounded and clamped to [min, max]."""

    median: float
    sigma: float
    min: int
    max: int

    @staticmethod
    def parse(text: str, name: str, default: LengthDist) -> LengthDist:
        """Reads ``MEDIAN[,SIGMA[,MIN[,MAX]]]``; omitted fields keep ``default``'s."""
        parts = [p.strip() for p in text.split(",")]
        if not 1 <= len(parts) <= 4 or any(not p for p in parts):
            raise WorkloadError(f"--{name}: expected MEDIAN[,SIGMA[,MIN[,MAX]]]; got {text!r}")
        try:
            median = float(parts[0])
            sigma = float(parts[1]) if len(parts) > 1 else default.sigma
            lo = int(parts[2]) if len(parts) > 2 else min(default.min, max(1, int(median)))
            hi = int(parts[3]) if len(parts) > 3 else max(default.max, int(median))
        except ValueError as e:
            raise WorkloadError(f"--{name}: {e}; got {text!r}") from None
        dist = LengthDist(median, sigma, lo, hi)
        dist.validate(name)
        return dist

    def validate(self, name: str) -> None:
        if not (math.isfinite(self.median) and self.median >= 1):
            raise WorkloadError(f"--{name}: median must be >= 1; got {self.median}")
        if not 0 <= self.sigma <= 4:
            raise WorkloadError(f"--{name}: sigma must be in [0, 4]; got {self.sigma}")
        if self.min < 1:
            raise WorkloadError(f"--{name}: min must be >= 1; got {self.min}")
        if self.max < self.min:
            raise WorkloadError(f"--{name}: max must be >= min ({self.min}); got {self.max}")


@dataclasses.dataclass
class WorkloadParams:
    """The replay's ``[workload]`` section (include/meridian/sim_workload.h)."""

    kind: str = "mixed"
    arrival_process: str = "poisson"
    arrival_rate: float = 1.6
    duration_s: float = 600
    reasoning_ratio: float = 0.4
    mean_turns: float = 2.0
    turn_delay_mean_s: float = 20
    chat_prompt: LengthDist = LengthDist(160, 1.0, 8, 4096)
    chat_output: LengthDist = LengthDist(98, 0.545, 8, 2048)
    reasoning_prompt: LengthDist = LengthDist(120, 0.6, 16, 4096)
    think: LengthDist = LengthDist(1897, 0.70, 128, 16384)
    answer: LengthDist = LengthDist(300, 0.5, 16, 2048)
    follow_up_prompt: LengthDist = LengthDist(60, 0.8, 4, 2048)

    def validate(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise WorkloadError(f"--workload must be one of {', '.join(WORKLOAD_KINDS)}; got {self.kind!r}")
        if self.arrival_process not in ("poisson", "uniform"):
            raise WorkloadError(f"--arrival-process must be poisson or uniform; got {self.arrival_process!r}")
        if not (math.isfinite(self.arrival_rate) and self.arrival_rate > 0):
            raise WorkloadError(f"--rate must be > 0; got {self.arrival_rate}")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise WorkloadError(f"--duration-s must be > 0; got {self.duration_s}")
        if not 0 <= self.reasoning_ratio <= 1:
            raise WorkloadError(f"--reasoning-ratio must be in [0, 1]; got {self.reasoning_ratio}")
        if not 1 <= self.mean_turns <= 100:
            raise WorkloadError(f"--mean-turns must be in [1, 100]; got {self.mean_turns}")
        if not (math.isfinite(self.turn_delay_mean_s) and self.turn_delay_mean_s >= 0):
            raise WorkloadError(f"--turn-delay-s must be >= 0; got {self.turn_delay_mean_s}")
        for name in ("chat_prompt", "chat_output", "reasoning_prompt", "think", "answer", "follow_up_prompt"):
            getattr(self, name).validate(name.replace("_", "-"))


WORKLOAD_KINDS = ("mixed", "seeds-mix", "long-think", "long-prompt")


def preset(kind: str) -> WorkloadParams:
    """A workload kind's defaults, as ``workload_preset`` in src/sim/workload.cpp."""
    p = WorkloadParams(kind=kind)
    if kind in ("mixed", "seeds-mix"):
        return p
    if kind == "long-think":
        return dataclasses.replace(
            p, arrival_rate=0.11, duration_s=1800, reasoning_ratio=0.8, mean_turns=1.5,
            think=LengthDist(8000, 0.45, 512, 32768), answer=LengthDist(400, 0.5, 16, 4096),
            reasoning_prompt=LengthDist(150, 0.6, 16, 4096))
    if kind == "long-prompt":
        return dataclasses.replace(
            p, arrival_rate=0.22, duration_s=1200, chat_prompt=LengthDist(8000, 0.42, 1024, 32768),
            reasoning_prompt=LengthDist(8000, 0.42, 1024, 32768), chat_output=LengthDist(180, 0.6, 8, 2048),
            follow_up_prompt=LengthDist(200, 0.8, 4, 4096))
    raise WorkloadError(f"--workload must be one of {', '.join(WORKLOAD_KINDS)}; got {kind!r}")


@dataclasses.dataclass
class RequestSpec:
    """One request of the workload (a line of a trace); ``id`` is its 1-based line order."""

    id: int
    prompt_tokens: int
    answer_tokens: int
    think_tokens: int = 0
    arrival_s: float = 0.0
    answer_at: int = 0
    priority: int = 0
    conversation: int = 0
    turn: int = 0
    after: int = 0
    delay_s: float = 0.0

    @property
    def reasoning(self) -> bool:
        return self.think_tokens > 0

    def to_trace(self) -> dict:
        """The trace line, with the fields ``write_trace`` in src/sim/trace_io.cpp writes."""
        obj: dict = {}
        if self.after == 0:
            obj["arrival_s"] = self.arrival_s
        else:
            obj["after"] = self.after
            obj["delay_s"] = self.delay_s
        obj["prompt_tokens"] = self.prompt_tokens
        if self.think_tokens > 0:
            obj["think_tokens"] = self.think_tokens
        obj["answer_tokens"] = self.answer_tokens
        if self.answer_at > 0:
            obj["answer_at"] = self.answer_at
        if self.priority != 0:
            obj["priority"] = self.priority
        if self.conversation > 0:
            obj["conversation"] = self.conversation
            obj["turn"] = self.turn
        return obj


# ---- the replay's random numbers (src/sim/workload.cpp) ------------------------


def mix64(x: int) -> int:
    """SplitMix64's finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform01(seed: int, stream: int, index: int) -> float:
    """A uniform number in [0, 1): a pure function of (seed, stream, index)."""
    h = mix64(mix64((seed ^ ((stream * 0xD1B54A32D192ED03) & MASK64)) & MASK64) ^ (index & MASK64))
    return (h >> 11) * 2.0**-53


def _normal(seed: int, stream: int, index: int) -> float:
    u1 = max(uniform01(seed, stream, 2 * index), 1e-300)
    u2 = uniform01(seed, stream, 2 * index + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _round_half_away(x: float) -> float:
    """std::round: halves away from zero (Python's round() rounds them to even)."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


def _draw(d: LengthDist, seed: int, stream: int, index: int) -> int:
    x = d.median * math.exp(d.sigma * _normal(seed, stream, index))
    return int(min(max(_round_half_away(x), float(d.min)), float(d.max)))


def _uniform_int(lo: int, hi: int, u: float) -> int:
    return lo + int(math.floor(u * (hi - lo + 1)))


def generate(p: WorkloadParams, seed: int, max_requests: int | None = None) -> list[RequestSpec]:
    """The replay's ``generate_workload``; stops early once ``max_requests`` requests exist."""
    p.validate()
    seeds_mix = p.kind == "seeds-mix"
    out: list[RequestSpec] = []
    t = 0.0
    conversation = 0
    draw_index = 0
    while max_requests is None or len(out) < max_requests:
        u = uniform01(seed, _ARRIVAL, conversation)
        gap = 1.0 if p.arrival_process == "uniform" else -math.log(1.0 - u)
        t += gap / p.arrival_rate
        if t >= p.duration_s:
            break
        conversation += 1
        reasoning = uniform01(seed, _KIND, conversation) < p.reasoning_ratio
        turns = 1
        if not seeds_mix and p.mean_turns > 1:
            more = 1.0 - 1.0 / p.mean_turns
            u = uniform01(seed, _TURNS, conversation)
            turns = min(turns + int(math.floor(math.log(1.0 - u) / math.log(more))), 32)
        transcript = 0
        previous = 0
        for turn in range(turns):
            draw_index += 1
            i = draw_index
            r = RequestSpec(id=len(out) + 1, prompt_tokens=0, answer_tokens=0, priority=1 if reasoning else 0)
            if seeds_mix:
                r.prompt_tokens = _draw(p.reasoning_prompt if reasoning else p.chat_prompt, seed, _PROMPT, i)
                if reasoning:
                    r.think_tokens = _uniform_int(600, 6000, uniform01(seed, _THINK, i))
                    r.answer_tokens = _draw(p.answer, seed, _ANSWER, i)
                else:
                    r.answer_tokens = _uniform_int(40, 240, uniform01(seed, _ANSWER, i))
            else:
                first = p.reasoning_prompt if reasoning else p.chat_prompt
                user = _draw(first if turn == 0 else p.follow_up_prompt, seed, _PROMPT, i)
                r.prompt_tokens = transcript + user
                if reasoning:
                    r.think_tokens = _draw(p.think, seed, _THINK, i)
                    r.answer_tokens = _draw(p.answer, seed, _ANSWER, i)
                else:
                    r.answer_tokens = _draw(p.chat_output, seed, _ANSWER, i)
            if turns > 1:
                r.conversation = conversation
                r.turn = turn
            if turn == 0:
                r.arrival_s = t
            else:
                r.after = previous
                r.delay_s = -math.log(1.0 - uniform01(seed, _DELAY, i)) * p.turn_delay_mean_s
            transcript = r.prompt_tokens + r.answer_tokens
            previous = r.id
            out.append(r)
    return truncate(out, max_requests)


def truncate(requests: list[RequestSpec], max_requests: int | None) -> list[RequestSpec]:
    """The first ``max_requests`` lines (a follow-up always comes after the turn it follows)."""
    return requests if max_requests is None else requests[:max_requests]


# ---- traces -------------------------------------------------------------------


def _field_int(obj: dict, field: str, where: str, required: bool, minimum: int = 0) -> int:
    if field not in obj:
        if required:
            raise WorkloadError(f"{where}: {field}: is required")
        return 0
    v = obj[field]
    if isinstance(v, bool) or not isinstance(v, int):
        raise WorkloadError(f"{where}: {field}: must be an integer; got {json.dumps(v)}")
    if v < minimum:
        raise WorkloadError(f"{where}: {field}: must be >= {minimum}; got {v}")
    return v


def _field_num(obj: dict, field: str, where: str, required: bool) -> float:
    if field not in obj:
        if required:
            raise WorkloadError(f"{where}: {field}: is required")
        return 0.0
    v = obj[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise WorkloadError(f"{where}: {field}: must be a finite number >= 0; got {json.dumps(v)}")
    return float(v)


def parse_trace(lines: Iterable[str], source: str) -> list[RequestSpec]:
    """Reads a replay trace; a bad line raises WorkloadError naming file, line and field."""
    out: list[RequestSpec] = []
    for number, text in enumerate(lines, start=1):
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{where}: not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{where}: must be a JSON object; got {type(obj).__name__}")
        for key in obj:
            if key not in TRACE_FIELDS:
                raise WorkloadError(f"{where}: {key}: is not a trace field (known: {', '.join(TRACE_FIELDS)})")
        r = RequestSpec(
            id=len(out) + 1,
            prompt_tokens=_field_int(obj, "prompt_tokens", where, True, 1),
            answer_tokens=_field_int(obj, "answer_tokens", where, True, 1),
            think_tokens=_field_int(obj, "think_tokens", where, False),
            answer_at=_field_int(obj, "answer_at", where, False),
            priority=_field_int(obj, "priority", where, False, -(2**31)),
            conversation=_field_int(obj, "conversation", where, False),
            turn=_field_int(obj, "turn", where, False),
            after=_field_int(obj, "after", where, False),
            delay_s=_field_num(obj, "delay_s", where, False),
        )
        if r.after == 0:
            r.arrival_s = _field_num(obj, "arrival_s", where, True)
        elif r.after >= r.id:
            raise WorkloadError(f"{where}: after: must name an earlier line's request (1..{r.id - 1}); got {r.after}")
        if r.answer_at > r.think_tokens:
            raise WorkloadError(f"{where}: answer_at: must be <= think_tokens ({r.think_tokens}); got {r.answer_at}")
        if r.after > 0 and r.conversation == 0:
            raise WorkloadError(f"{where}: conversation: is required (> 0) for a follow-up turn")
        out.append(r)
    if not out:
        raise WorkloadError(f"{source}: the trace holds no requests")
    return out


def load_trace(path: pathlib.Path) -> list[RequestSpec]:
    try:
        text = path.read_text()
    except OSError as e:
        raise WorkloadError(f"{path}: cannot open the trace file: {e.strerror}") from None
    return parse_trace(text.splitlines(), str(path))


def write_trace(requests: list[RequestSpec], path: pathlib.Path) -> None:
    """Writes ``requests`` in the replay's trace format (``meridian replay --trace`` reads it)."""
    with path.open("w") as f:
        for r in requests:
            f.write(json.dumps(r.to_trace(), sort_keys=True, separators=(",", ":")) + "\n")
