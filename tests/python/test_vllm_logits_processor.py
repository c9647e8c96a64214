"""``meridian.vllm.ForceThinkEnd`` against the real vLLM 0.32 package.

Unit level: the processor is built from a real ``VllmConfig`` (the tiny
Qwen3 model directory in tests/data, real tokenizer ids) and driven the way
vLLM's runners drive it: V1 through real ``BatchUpdate`` objects and live
output lists, V2 through a real ``RequestState`` and ``LogitsContext``; both
on real torch logits of the real vocabulary size. End to end: ``LLM(...)``
generates on the CPU with random weights (which never produce ``</think>``
on their own, so every ``</think>`` in the output was forced).

Qwen3 ids (models/qwen3.toml): <think> 151667, </think> 151668,
<|im_end|> 151645, <tool_call> 151657, </tool_call> 151658.
"""
from __future__ import annotations

import gc
import logging
import pathlib

# The vLLM environment (offline, CPU, a private cache root) is set by conftest.py.

import numpy as np
import pytest
import torch
from vllm import SamplingParams
from vllm.config import ModelConfig, VllmConfig
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

import meridian
from meridian.vllm import ForceThinkEnd

# About 25 s on 2 cores: scheduled first (conftest.py), so parallel workers end together.
pytestmark = pytest.mark.slow(25)

TINY = pathlib.Path(__file__).resolve().parents[1] / "data" / "qwen3-tiny"
VOCAB = 151936
THINK, END_THINK, IM_END, TOOL_OPEN, TOOL_CLOSE = 151667, 151668, 151645, 151657, 151658
WORD = 785  # an ordinary token
PROMPT = [151644, 872, 198, WORD, 151645, 198, 151644, 77091, 198, THINK, 198]  # "...assistant\n<think>\n"
ANSWER_PROMPT = [151644, 872, 198, WORD, 151645, 198, 151644, 77091, 198]  # no open think block
SWAP, ONE_WAY = MoveDirectionality.SWAP, MoveDirectionality.UNIDIRECTIONAL


@pytest.fixture(scope="module")
def vllm_config() -> VllmConfig:
    model = ModelConfig(
        model=str(TINY), tokenizer=str(TINY), skip_tokenizer_init=True, dtype="float32", max_model_len=2048
    )
    return VllmConfig(model_config=model)


@pytest.fixture
def meridian_toml(tmp_path, monkeypatch):
    """Write a meridian.toml and point $MERIDIAN_CONFIG at it."""

    def write(text: str = "") -> None:
        path = tmp_path / "meridian.toml"
        path.write_text(text)
        monkeypatch.setenv("MERIDIAN_CONFIG", str(path))

    write()
    return write


CAP4 = "[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = 4\n"


def params(**meridian_args) -> SamplingParams:
    return SamplingParams(max_tokens=1000, extra_args={"meridian": meridian_args} if meridian_args else None)


def is_forced(row: torch.Tensor) -> bool:
    """Only </think> can be sampled from this row."""
    return bool(torch.isfinite(row[END_THINK])) and int(torch.isneginf(row).sum()) == VOCAB - 1


class V1Runner:
    """Drives a V1 processor like vLLM's V1 model runner does."""

    def __init__(self, proc: ForceThinkEnd) -> None:
        self.proc = proc
        self.outputs: dict[int, list[int]] = {}
        self.gen = torch.Generator().manual_seed(7)

    def update(self, removed=(), added=(), moved=()) -> None:
        for index in removed:
            self.outputs.pop(index, None)
        batch = []
        for index, sp, prompt, output in added:
            self.outputs[index] = output
            batch.append((index, sp, prompt, output))
        for a, b, direction in moved:
            out_a, out_b = self.outputs.pop(a, None), self.outputs.pop(b, None)
            if out_a is not None:
                self.outputs[b] = out_a
            if direction == SWAP and out_b is not None:
                self.outputs[a] = out_b
        self.proc.update_state(BatchUpdate(len(self.outputs), list(removed), batch, list(moved)))

    def add(self, index: int, sp: SamplingParams, prompt=PROMPT, output=None) -> list[int]:
        output = [] if output is None else output
        self.update(added=[(index, sp, prompt, output)])
        return output

    def step(self, sample: int | dict[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: apply() on fresh random logits, then append to every
        row's output the forced token (if forced) or what was "sampled":
        ``sample`` (one id, or row -> id; default WORD).
        Returns (logits before, logits after)."""
        self.proc.update_state(None)
        size = max(self.outputs, default=-1) + 1
        logits = torch.randn(size, VOCAB, generator=self.gen)
        before = logits.clone()
        self.proc.apply(logits)
        for row, output in self.outputs.items():
            forced = is_forced(logits[row])
            drawn = sample.get(row, WORD) if isinstance(sample, dict) else (WORD if sample is None else sample)
            output.append(int(logits[row].argmax()) if forced else drawn)
        return before, logits


def v1(vllm_config) -> ForceThinkEnd:
    return ForceThinkEnd(vllm_config, torch.device("cpu"), False)


# -- loaders ------------------------------------------------------------------------


def test_v1_loader_builds_it_from_the_class_and_the_fqcn_only(vllm_config, meridian_toml):
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.sample.logits_processor import (
        _load_custom_logitsprocs,
        _load_logitsprocs_plugins,
        build_logitsprocs,
        validate_logits_processors_parameters,
    )

    assert ForceThinkEnd not in _load_logitsprocs_plugins()  # no entry point: opt-in only (issue #26)
    assert _load_custom_logitsprocs(("meridian.vllm:ForceThinkEnd",))[-1] is ForceThinkEnd
    procs = build_logitsprocs(vllm_config, torch.device("cpu"), False, False, [ForceThinkEnd])
    ours = [p for p in procs.non_argmax_invariant if isinstance(p, ForceThinkEnd)]
    assert len(ours) == 1 and ours[0].model == "qwen3" and ours[0].end_token_id == END_THINK
    assert not [p for p in procs.argmax_invariant if isinstance(p, ForceThinkEnd)]
    # Listed twice (for a new engine config): one instance works, the other stays idle.
    vllm_config = VllmConfig(model_config=vllm_config.model_config)
    procs = build_logitsprocs(vllm_config, torch.device("cpu"), False, False,
                              ["meridian.vllm:ForceThinkEnd", "meridian.vllm.logits_processor:ForceThinkEnd"])
    ours = [p for p in procs.non_argmax_invariant if isinstance(p, ForceThinkEnd)]
    assert len(ours) == 2 and sum("idle duplicate" not in repr(p) for p in ours) == 1
    bad = r"extra_args\.meridian\.max_think_tokens must be an integer >= 1; got -3"
    with pytest.raises(VLLMValidationError, match=bad):
        validate_logits_processors_parameters([ForceThinkEnd], params(max_think_tokens=-3))


def test_v2_loader_builds_it_and_validates_params(vllm_config, meridian_toml, v2_states):
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.worker.gpu.sample.logits_processor.loader import (
        _load_v2_logitsprocs_plugins,
        build_custom_logits_processors,
        build_custom_logits_processors_params_validator,
    )

    assert ForceThinkEnd not in _load_v2_logitsprocs_plugins()
    procs = build_custom_logits_processors(vllm_config, v2_states, False, ["meridian.vllm:ForceThinkEnd"])
    assert len(procs) == 1 and isinstance(procs[0], ForceThinkEnd) and "runner=v2" in repr(procs[0])
    assert procs[0].model == "qwen3"
    vllm_config = VllmConfig(model_config=vllm_config.model_config)  # a new engine: listed twice
    procs = build_custom_logits_processors(vllm_config, v2_states, False, ["meridian.vllm:ForceThinkEnd"] * 2)
    assert len(procs) == 2 and sum("idle duplicate" not in repr(p) for p in procs) == 1
    validate = build_custom_logits_processors_params_validator([ForceThinkEnd])
    validate(params(max_think_tokens=8))
    with pytest.raises(VLLMValidationError, match=r"extra_args\.meridian\.frocing is not a Meridian option"):
        validate(params(frocing=False))


def test_model_preset_follows_the_served_model(vllm_config, meridian_toml, monkeypatch, caplog):
    from vllm.config import StructuredOutputsConfig
    from vllm.config.reasoning import ReasoningConfig

    def served(parser: str) -> VllmConfig:  # the tokenizer is loaded: vLLM derives the think ids
        model = ModelConfig(model=str(TINY), tokenizer=str(TINY), dtype="float32", max_model_len=2048)
        return VllmConfig(
            model_config=model,
            structured_outputs_config=StructuredOutputsConfig(reasoning_parser=parser),
            reasoning_config=ReasoningConfig(reasoning_parser=parser),
        )

    qwen3 = served("qwen3")
    assert (v1(qwen3).model, v1(qwen3).end_token_id) == ("qwen3", END_THINK)
    assert (v1(vllm_config).model, v1(vllm_config).end_token_id) == ("qwen3", END_THINK)  # no parser
    # A parser whose presets do not match the served tokenizer: logged, inert.
    caplog.clear()
    inert = v1(served("deepseek_r1"))
    assert (inert.model, inert.end_token_id) == (None, None)
    assert any("no model preset for reasoning parser 'deepseek_r1'" in r.getMessage() for r in caplog.records)
    run = V1Runner(inert)
    run.add(0, params(max_think_tokens=1))
    for _ in range(3):
        before, after = run.step()
        assert torch.equal(before, after)
    assert inert.counters.requests_tracked == 0
    # $MERIDIAN_MODEL names the preset; it must exist and fit the served tokenizer: the ids
    # vLLM derived from it (--reasoning-parser), or else their decoding with it.
    monkeypatch.setenv("MERIDIAN_MODEL", "deepseek_r1")
    with pytest.raises(ValueError, match=r"</think> is \[128799\] in the preset but \[151668\]"):
        v1(qwen3)
    monkeypatch.setenv("MERIDIAN_MODEL", "deepseek_r1_distill_qwen")
    with pytest.raises(ValueError, match=r"\[151649\] is '<\|box_end\|>' in the served tokenizer, not '</think>'"):
        v1(vllm_config)
    monkeypatch.setenv("MERIDIAN_MODEL", "qwen4")
    with pytest.raises(ValueError, match="MERIDIAN_MODEL='qwen4' is not a model preset"):
        v1(vllm_config)
    monkeypatch.delenv("MERIDIAN_MODEL")
    meridian_toml("[scheduler]\nmax_think_tokens = 0.5\n")
    with pytest.raises(ValueError, match="scheduler.max_think_tokens"):
        v1(vllm_config)


# -- per-request parameters -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"max_think_tokens": -3}, "extra_args.meridian.max_think_tokens must be an integer >= 1; got -3"),
        ({"max_think_tokens": 0}, "extra_args.meridian.max_think_tokens must be an integer >= 1; got 0"),
        ({"max_think_tokens": 2.5}, "extra_args.meridian.max_think_tokens must be an integer >= 1; got 2.5"),
        ({"min_think_tokens": True}, "extra_args.meridian.min_think_tokens must be an integer >= 0; got True"),
        ({"forcing": "maybe"}, "extra_args.meridian.forcing must be true or false; got 'maybe'"),
        ({"budget": 3}, "extra_args.meridian.budget is not a Meridian option (known: forcing, max_think_tokens"),
        (
            {"min_think_tokens": 10, "max_think_tokens": 9},
            "extra_args.meridian.min_think_tokens must be <= max_think_tokens; got 10 > 9",
        ),
    ],
)
def test_validate_params_names_the_bad_key(args, message):
    with pytest.raises(ValueError) as err:
        ForceThinkEnd.validate_params(params(**args))
    assert message in str(err.value)


def test_validate_params_accepts_good_and_absent_args():
    ForceThinkEnd.validate_params(SamplingParams())
    ForceThinkEnd.validate_params(SamplingParams(extra_args={"other_plugin": 1}))
    ForceThinkEnd.validate_params(params(forcing=False, max_think_tokens=256, min_think_tokens=0))
    ForceThinkEnd.validate_params(params(throttle=False))  # the scheduler's key is valid here too
    with pytest.raises(ValueError, match=r"extra_args\.meridian must be a mapping"):
        ForceThinkEnd.validate_params(SamplingParams(extra_args={"meridian": [1]}))


# -- V1 interface -----------------------------------------------------------------------


def test_hard_cap_from_meridian_toml_forces_end_of_think_exactly_there(vllm_config, meridian_toml):
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    out = run.add(0, params())
    answer = run.add(1, SamplingParams(max_tokens=1000), prompt=ANSWER_PROMPT)
    for _ in range(4):
        before, after = run.step()
        assert torch.equal(before, after)  # nothing forced before the cap
    before, after = run.step()
    assert is_forced(after[0]) and after[0, END_THINK] == before[0, END_THINK]  # keeps its logit
    assert torch.equal(before[1], after[1])  # the answer-phase request is untouched
    assert out == [WORD] * 4 + [END_THINK] and answer == [WORD] * 5
    for _ in range(3):  # after </think> nothing more is done
        before, after = run.step()
        assert torch.equal(before, after)
    c = proc.counters
    assert c.forced == {"converged": 0, "overthinking": 0, "hard_cap": 1}
    assert (c.forced_rows, c.forced_landed, c.fallbacks) == (1, 1, 0)


def test_per_request_overrides(vllm_config, meridian_toml):
    meridian_toml(CAP4)
    run = V1Runner(v1(vllm_config))
    lower = run.add(0, params(max_think_tokens=2))
    higher = run.add(1, params(max_think_tokens=6))
    never = run.add(2, params(forcing=False))
    # The OpenAI server's vllm_xargs holds only flat values: "meridian_<key>" works too.
    flat = run.add(3, SamplingParams(max_tokens=1000, extra_args={"meridian_max_think_tokens": 1}))
    flat_off = run.add(4, SamplingParams(max_tokens=1000, extra_args={"meridian_forcing": "false"}))
    for _ in range(9):
        run.step()
    assert lower.index(END_THINK) == 2 and higher.index(END_THINK) == 6 and END_THINK not in never
    assert flat.index(END_THINK) == 1 and END_THINK not in flat_off
    assert run.proc.counters.forced["hard_cap"] == 3 and run.proc.counters.requests_tracked == 3


def test_forcing_keeps_going_until_end_of_think_lands(vllm_config, meridian_toml):
    """A later stage (another processor, a rejected draft) may replace the
    forced token: the row is forced again until </think> is in the output."""
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    out = run.add(0, params())
    for _ in range(4):
        run.step()
    _, after = run.step(sample=WORD)
    assert is_forced(after[0])
    out[-1] = WORD  # the engine sampled something else after all
    _, after = run.step()
    assert is_forced(after[0]) and out[-1] == END_THINK
    before, after = run.step()  # the router sees </think>: done
    assert torch.equal(before, after)
    c = proc.counters
    assert (c.forced["hard_cap"], c.forced_rows, c.forced_landed) == (1, 2, 1)


def test_never_forces_inside_a_tool_call(vllm_config, meridian_toml):
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    out = run.add(0, params())
    run.step(sample=WORD)
    run.step(sample=TOOL_OPEN)
    for _ in range(4):  # think tokens 3..6: past the cap, but the call is open
        before, after = run.step()
        assert torch.equal(before, after)
    assert proc.counters.held_by_tool_call >= 1
    run.step(sample=TOOL_CLOSE)
    _, after = run.step()
    assert is_forced(after[0])
    assert out == [WORD, TOOL_OPEN, WORD, WORD, WORD, WORD, TOOL_CLOSE, END_THINK]


def test_the_forced_row_follows_its_request_through_moves_and_removals(vllm_config, meridian_toml):
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    a = run.add(0, params(max_think_tokens=3))
    b = run.add(1, SamplingParams(max_tokens=1000), prompt=ANSWER_PROMPT)
    c = run.add(2, params(max_think_tokens=5))
    for _ in range(3):
        run.step()
    run.update(moved=[(0, 2, SWAP)])  # a -> row 2, c -> row 0
    _, after = run.step()
    assert is_forced(after[2]) and not is_forced(after[0]) and a == [WORD] * 3 + [END_THINK]
    # b leaves; the condensing one-way move takes c from row 0 to row 1; d joins at row 0.
    run.update(removed=[1])
    run.update(moved=[(0, 1, ONE_WAY)])
    d = run.add(0, params(max_think_tokens=1))
    _, after = run.step()
    assert not any(is_forced(after[row]) for row in range(3))
    _, after = run.step()
    assert is_forced(after[0]) and is_forced(after[1]) and not is_forced(after[2])
    assert c == [WORD] * 5 + [END_THINK] and d == [WORD, END_THINK] and END_THINK not in b


def test_an_unscheduled_request_resumes_where_it_was(vllm_config, meridian_toml):
    """vLLM drops a request from the batch when a step does not schedule it
    and adds it back (same SamplingParams, same output list) later."""
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    sp = params()
    out = run.add(0, sp)
    run.step()
    run.step()
    run.update(removed=[0])
    out.append(WORD)  # generated meanwhile (e.g. while preempted and recomputed)
    run.update(added=[(0, sp, PROMPT, out)])
    run.step()
    _, after = run.step()
    assert is_forced(after[0]) and out == [WORD] * 4 + [END_THINK]
    assert proc.counters.requests_tracked == 1 and proc.counters.resyncs == 0


def test_discarded_tokens_and_async_placeholders(vllm_config, meridian_toml):
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    out = run.add(0, params())
    for _ in range(3):
        run.step()
    del out[1:]  # the engine discarded two tokens (e.g. a KV-load failure)
    _, after = run.step()
    assert not is_forced(after[0]) and proc.counters.resyncs == 1
    out.append(-1)  # async scheduling: the sampled id is not known yet
    proc.update_state(None)
    logits = torch.zeros(1, VOCAB)
    proc.apply(logits)  # 2 think tokens known
    assert not is_forced(logits[0])
    out[-1] = WORD  # resolved before the next apply
    _, after = run.step()  # 3
    assert not is_forced(after[0])
    _, after = run.step()  # 4: the cap
    assert is_forced(after[0]) and out == [WORD] * 4 + [END_THINK]


def test_answers_and_completed_requests_are_never_touched(vllm_config, meridian_toml):
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    answer = run.add(0, params(), prompt=ANSWER_PROMPT)  # the first token decides: an answer
    ended = run.add(1, params(), prompt=ANSWER_PROMPT)  # ... or it opens a think block
    run.step(sample={0: WORD, 1: THINK})
    run.step()
    run.step(sample={1: IM_END})  # EOS completes it in any phase (ignore_eos keeps it going)
    for _ in range(5):  # 6 think-block tokens by now, past the cap: nothing is forced
        before, after = run.step()
        assert torch.equal(before, after)
    assert ended[:3] == [THINK, WORD, IM_END] and END_THINK not in answer + ended
    assert proc.counters.forced_rows == 0


def test_fail_safe_leaves_logits_untouched_counts_and_logs_once(vllm_config, meridian_toml, caplog):
    meridian_toml(CAP4)
    proc = v1(vllm_config)
    run = V1Runner(proc)
    run.add(0, params())
    router = proc._core.router

    class BrokenRouter:  # Meridian's code raises inside apply() (the probe has its own fallback)
        def on_tokens(self, *args, **kwargs):
            raise RuntimeError("router failed")

        def __getattr__(self, name):
            return getattr(router, name)

    proc._core.router = BrokenRouter()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="meridian.vllm"):
        for _ in range(6):  # past the cap of 4: the step is left to vLLM
            before, after = run.step()
            assert torch.equal(before, after)
    records = [r for r in caplog.records if r.name == "meridian.vllm"]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    assert "ForceThinkEnd.apply raised RuntimeError: router failed" in records[0].getMessage()
    c = proc.counters
    assert (c.probe_errors, c.fallbacks, c.forced_rows) == (0, 5, 0)  # the first step has no new token
    # A broken batch update is survived as well: the processor forgets the
    # batch (stock behaviour for those rows) and keeps serving new requests.
    proc._core.router = router
    proc.update_state(BatchUpdate(2, [], [(1, object(), PROMPT, [])], []))
    assert proc.counters.fallbacks == 6
    fresh = run.add(1, params(max_think_tokens=1))
    run.step()
    _, after = run.step()
    assert is_forced(after[1]) and fresh == [WORD, END_THINK]


entropy_probe = pytest.mark.skipif(
    not hasattr(meridian, "EntropyProbe"), reason="meridian.EntropyProbe is not in this build yet"
)


@entropy_probe
def test_converged_eat_forces_after_min_think_tokens(vllm_config, meridian_toml):
    """Identical rows give a constant EAT (in-step proxy): its EMA variance
    is 0 once eat_min_samples samples are in, so thinking has converged.
    EAT is sampled at think tokens 2 and 4 (the token being sampled counts),
    i.e. from the rows that follow 1 and 3 generated think tokens."""
    meridian_toml(
        "[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = 1000\n"
        "[entropy]\neat_probe_interval_tokens = 2\neat_min_samples = 2\n"
    )
    proc = v1(vllm_config)
    out = []
    late = []
    added = [(0, params(), PROMPT, out), (1, params(min_think_tokens=6), PROMPT, late)]
    proc.update_state(BatchUpdate(2, [], added, []))
    row = torch.linspace(-4.0, 4.0, VOCAB)
    for _ in range(8):
        logits = row.repeat(2, 1)
        proc.apply(logits)
        for i, o in ((0, out), (1, late)):
            o.append(END_THINK if is_forced(logits[i]) else WORD)
    assert out.index(END_THINK) == 3 and late.index(END_THINK) == 6
    assert proc.counters.forced == {"converged": 2, "overthinking": 0, "hard_cap": 0}


@entropy_probe
def test_rpdi_burst_forces_as_overthinking(vllm_config, meridian_toml):
    meridian_toml(
        "[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = 1000\n"
        "[entropy]\neat_probe_interval_tokens = 1000\nrpdi_window_tokens = 2\nrpdi_min_samples = 4\n"
        "rpdi_threshold = 1.5\ntransition_entropy_threshold = 2.5\n"
    )
    proc = v1(vllm_config)
    out = []
    proc.update_state(BatchUpdate(1, [], [(0, params(), PROMPT, out)], []))
    peaked = torch.full((1, VOCAB), -30.0)
    peaked[0, WORD] = 30.0  # entropy ~0: no transition
    flat = torch.zeros(1, VOCAB)  # entropy ln(VOCAB) ~ 11.9 nats: a transition
    for logits in [peaked.clone() for _ in range(6)] + [flat.clone() for _ in range(4)]:
        proc.apply(logits)
        out.append(END_THINK if is_forced(logits[0]) else WORD)
        if out[-1] == END_THINK:
            break
    assert out[-1] == END_THINK and proc.counters.forced["overthinking"] == 1


# -- Model Runner V2 interface --------------------------------------------------------------


@pytest.fixture
def v2_states(monkeypatch):
    """A real Model Runner V2 ``RequestState`` on the CPU.

    What is not real, and why: vLLM's CPU platform reports UVA as available,
    but pinned memory needs an NVIDIA driver with this CUDA build of torch,
    so ``UvaBuffer`` cannot be created here; ``is_uva_available`` is
    answered False, which selects vLLM's own ``NonUvaBuffer`` fallback (plain
    CPU tensors). Flushing staged writes (``apply_staged_writes``) and the
    runner's post-sample update are Triton kernels, and Triton is not
    installed here: ``flush`` and ``commit`` below perform the same writes
    with torch indexing. Everything the processor reads (``all_token_ids``,
    ``prompt_len``, ``LogitsContext``) is the real object.
    """
    from vllm.v1.worker.gpu import buffer_utils
    from vllm.v1.worker.gpu.states import RequestState

    monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)
    return RequestState(
        max_num_reqs=8,
        max_model_len=256,
        max_num_batched_tokens=256,
        num_speculative_steps=0,
        vocab_size=VOCAB,
        device=torch.device("cpu"),
    )


def flush(states) -> None:
    """RequestState.apply_staged_writes without Triton."""
    states.prompt_len.copy_to_uva()
    states.prefill_len.copy_to_uva()
    for tensor in (states.total_len, states.all_token_ids, states.num_computed_tokens):
        start = 0
        for index, offset, end in zip(
            tensor._staged_write_indices, tensor._staged_write_starts, tensor._staged_write_cu_lens
        ):
            values = torch.tensor(tensor._staged_write_contents[start:end], dtype=tensor.dtype)
            if tensor.gpu.dim() == 1:
                tensor.gpu[index] = values[0]
            else:
                tensor.gpu[index, offset : offset + len(values)] = values
            start = end
        tensor.clear_staged_writes()


def commit(states, slot: int, token: int) -> None:
    """The runner's post-sample update of all_token_ids / total_len."""
    total = int(states.total_len.gpu[slot])
    states.all_token_ids.gpu[slot, total] = token
    states.total_len.gpu[slot] = total + 1


def context(states, slots, local_pos=None, pos=None):
    """The step's LogitsContext as Model Runner V2 builds it: ``slots`` and
    ``local_pos`` per logits row (a request with drafts has several rows),
    ``idx_mapping`` and the host upper bound of the sequence lengths per
    request."""
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    slots_t = torch.tensor(slots, dtype=torch.int32)
    if pos is None:
        pos = [int(states.total_len.gpu[s]) - 1 for s in slots]
    pos_t = torch.tensor(pos, dtype=torch.int64)
    input_ids = torch.stack([states.all_token_ids.gpu[s, p] for s, p in zip(slots, pos)]).to(torch.int32)
    reqs = list(dict.fromkeys(slots))  # one entry per request, in batch order
    upper = [max(p for s, p in zip(slots, pos) if s == r) + 1 for r in reqs]
    reqs_t = torch.tensor(reqs, dtype=torch.int32)
    return LogitsContext(
        expanded_idx_mapping=slots_t,
        idx_mapping=reqs_t,
        idx_mapping_np=reqs_t.numpy(),
        expanded_local_pos=torch.tensor(local_pos or [0] * len(slots), dtype=torch.int32),
        input_ids=input_ids,
        pos=pos_t,
        seq_lens_upper_bound_np=np.array(upper, dtype=np.int32),
    )


def test_v2_hard_cap_partial_prefill_drafts_and_slot_reuse(vllm_config, meridian_toml, v2_states):
    """Model Runner V2 on a real RequestState and real LogitsContexts; see
    ``v2_states`` for the two pieces that cannot be real on this machine
    (pinned-memory buffers, Triton write kernels) and what replaces them."""
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcRequestState

    meridian_toml(CAP4)
    states = v2_states
    proc = ForceThinkEnd(vllm_config, LogitsProcRequestState.from_request_state(states))
    slot_of = {}
    for req_id, prompt, sp in (("a", PROMPT, params()), ("b", PROMPT, params(forcing=False))):
        states.add_request(req_id, len(prompt), prompt, 0, 100)
        slot_of[req_id] = states.req_id_to_index[req_id]
    a, b = slot_of["a"], slot_of["b"]
    assert proc.add_request(a, params()) is True
    assert proc.add_request(b, params(forcing=False)) is False
    proc.apply_staged_writes()
    flush(states)
    gen = torch.Generator().manual_seed(3)

    # A partial prefill chunk (pos + 1 < prompt_len) is skipped.
    logits = torch.randn(1, VOCAB, generator=gen)
    before = logits.clone()
    proc.apply(logits, context(states, [a], pos=[4]))
    assert torch.equal(before, logits)
    probe = proc._core.probe
    assert probe is None or len(probe) == 0  # not even probed
    for step in range(6):
        logits = torch.randn(2, VOCAB, generator=gen)
        before = logits.clone()
        proc.apply(logits, context(states, [a, b]))
        assert torch.equal(before[1], logits[1])
        forced = is_forced(logits[0])
        assert forced == (step == 4), step
        commit(states, a, END_THINK if forced else WORD)
        commit(states, b, WORD)
    out = states.all_token_ids.gpu[a, len(PROMPT) : int(states.total_len.gpu[a])].tolist()
    assert out == [WORD] * 4 + [END_THINK, WORD]
    # Two tokens committed in one step (accepted drafts) are read from
    # all_token_ids; a draft row (expanded_local_pos 1) is never forced.
    states.remove_request("a")
    states.add_request("c", len(PROMPT), PROMPT, 0, 100)
    c = states.req_id_to_index["c"]
    assert c == a and proc.add_request(c, params(max_think_tokens=3)) is True  # a's slot, reused
    flush(states)
    commit(states, c, WORD)
    commit(states, c, WORD)
    commit(states, c, WORD)
    last = int(states.total_len.gpu[c]) - 1
    logits = torch.randn(2, VOCAB, generator=gen)
    proc.apply(logits, context(states, [c, c], local_pos=[0, 1], pos=[last, last + 1]))
    assert is_forced(logits[0]) and not is_forced(logits[1])
    assert proc.counters.forced["hard_cap"] == 2


# -- end to end ---------------------------------------------------------------------------


def _generate(tmp_path):
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    (tmp_path / "meridian.toml").write_text("[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = 12\n")
    llm = LLM(
        model=str(TINY),
        load_format="dummy",
        enforce_eager=True,
        dtype="float32",
        max_model_len=256,
        max_num_seqs=8,
        reasoning_parser="qwen3",
        logits_processors=[ForceThinkEnd],
        scheduler_cls="meridian.vllm.Scheduler",  # both of Meridian's parts, as `vllm serve` runs them
        seed=0,
    )
    tokenizer = llm.get_tokenizer()
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}], tokenize=False, add_generation_prompt=True, enable_thinking=True
    )
    prompt = tokenizer.encode(chat, add_special_tokens=False) + tokenizer.encode("<think>\n", add_special_tokens=False)
    assert prompt[-2:] == [THINK, 198]

    def sp(**kw) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, **kw)

    cases = {
        "config_cap": sp(),
        "no_forcing": sp(extra_args={"meridian": {"forcing": False}}),
        "request_cap": SamplingParams(temperature=0.8, seed=1, max_tokens=24, ignore_eos=True,
                                      extra_args={"meridian": {"max_think_tokens": 7}}),
        "vllm_budget_first": sp(thinking_token_budget=5),
        "meridian_first": sp(thinking_token_budget=10, extra_args={"meridian": {"max_think_tokens": 3}}),
    }
    try:
        outputs = llm.generate([TokensPrompt(prompt_token_ids=prompt)] * len(cases), list(cases.values()))
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        assert type(scheduler).__module__ == "meridian.vllm.scheduler"
        stats = scheduler.meridian_stats()
    finally:  # leave the process clean for other engines in this session
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()
    return {name: list(out.outputs[0].token_ids) for name, out in zip(cases, outputs)}, stats


@pytest.mark.e2e
def test_end_to_end_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    monkeypatch.setenv("MERIDIAN_CONFIG", str(tmp_path / "meridian.toml"))
    got, stats = _generate(tmp_path)
    # Meridian's scheduler ran the engine: every step, each request's phases seen
    # (the four forced requests left the think phase), no fallback.
    assert stats["steps"] >= 24 and stats["fallbacks"] == 0
    assert stats["phase_exits"] == 4 and stats["tracked_requests"] == 0
    # The premise: random weights do not end thinking (or the request) by themselves.
    assert not {END_THINK, IM_END, TOOL_OPEN} & set(got["no_forcing"])
    # Meridian counts think tokens from the first generated one: </think> at index = cap.
    assert got["config_cap"].index(END_THINK) == 12
    assert got["request_cap"].index(END_THINK) == 7
    assert got["meridian_first"].index(END_THINK) == 3
    # vLLM's budget counts the "\n" after <think> in the prompt as well: 5 - 1.
    assert got["vllm_budget_first"].index(END_THINK) == 4
    for name in ("config_cap", "request_cap", "meridian_first", "vllm_budget_first"):
        assert got[name].count(END_THINK) == 1, name  # nothing is forced after </think>
