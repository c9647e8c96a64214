"""Admission by pausing thinking (ADR-0027) in the real vLLM 0.32 scheduler,
stepped as vLLM steps it on a GPU: two steps in flight (async scheduling),
Meridian's default configuration (TTFT SLO 1 s). The planning clock is a
step clock (20 ms a step) so that half a second of waiting takes 25 steps,
not half a second of the test's time."""
from __future__ import annotations

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import (  # noqa: E402
    END_THINK, EOS, THINK, WORD, AsyncScheduler, TwoInFlight, build, prompt, request, write_config)

from meridian.vllm import Scheduler  # noqa: E402

STEP_NS = 20_000_000
THINKERS = 3
THINK_TOKENS = 500
LATE_AT_STEP = 400  # the thinkers hold ~78 of the 100 blocks by then


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)


def by_position(tokens: dict[str, list[int]]):
    """Each request's token at its output position: a token vLLM drops (a
    paused request's in-flight output) is chosen again, the same, when its
    position is resampled, so the delivered text must equal the script."""
    def choose(r) -> int:
        script = tokens.get(r.request_id, ())
        n = r.num_output_tokens
        return script[n] if n < len(script) else WORD
    return choose


def run_arrivals(cls, arrivals: list[tuple[int, str, int, bool]], thinker_prompt: int = 16, num_blocks: int = 100,
                 on_build=None, **build_args):
    """Three think requests (prompts of `thinker_prompt` tokens) fill most of
    a `num_blocks` pool; then each of `arrivals` (step, id, blocks,
    reasoning: its prompt opens a think block) arrives. Returns (the step vLLM
    admitted each arrival, the scheduler, the delivered tokens, the scripted
    tokens, (step, request id) of each preemption). `on_build(sched)` runs
    once the scheduler is built; `build_args` go to vllm_rig.build."""
    sched = build(cls, num_blocks=num_blocks, **build_args)
    if on_build is not None:
        on_build(sched)
    clock = [0]
    if cls is Scheduler:
        sched.meridian.clock_ns = lambda: clock[0]
    tokens = {}
    for i in range(THINKERS):
        sched.add_request(request(f"t{i}", prompt(thinker_prompt, i)))
        tokens[f"t{i}"] = [THINK] + [WORD + i] * (THINK_TOKENS + 10 * i) + [END_THINK, WORD, WORD, EOS]
    for _, rid, _, reasoning in arrivals:
        tokens[rid] = ([WORD + 8] * 3 + [END_THINK] if reasoning else []) + [WORD + 7] * 5 + [EOS]
    stepper = TwoInFlight(sched, by_position(tokens))
    delivered: dict[str, list[int]] = {}
    admitted_at: dict[str, int] = {}
    preemptions = []
    for n in range(1, 3000):
        if not sched.requests:
            break
        for at, rid, blocks, reasoning in arrivals:
            if n == at:
                body = prompt(blocks * 16 - 1, 99 + len(rid) + ord(rid[-1])) + [THINK] if reasoning \
                    else prompt(blocks * 16, 99 + ord(rid[-1]))
                sched.add_request(request(rid, body))
        out, outputs = stepper.step()
        clock[0] += STEP_NS
        preemptions.extend((n, rid) for rid in sorted(out.preempted_req_ids or ()))
        for r in out.scheduled_new_reqs:
            admitted_at.setdefault(r.req_id, n)
        for eco in (outputs or {}).values():
            for o in eco.outputs:
                delivered.setdefault(o.request_id, []).extend(o.new_token_ids)
    stepper.drain()
    assert not sched.requests, "every request finished"
    assert all(rid in admitted_at for _, rid, _, _ in arrivals)
    return admitted_at, sched, delivered, tokens, preemptions


def after_enter_core(record):
    """An on_build hook: calls record(adapter, mid, request) each time a
    request enters (or re-enters) the C++ core, after it did."""
    def hook(sched):
        adapter = sched.meridian
        enter = adapter._enter_core

        def entered(mid, r):
            enter(mid, r)
            record(adapter, mid, r)
        adapter._enter_core = entered
    return hook


def run(cls, late_blocks: int = 30, on_build=None):
    """A chat prompt of `late_blocks` blocks arrives at step 400, when it does
    not fit. Returns (steps until vLLM admitted it, then as run_arrivals)."""
    admitted_at, sched, delivered, tokens, preemptions = run_arrivals(
        cls, [(LATE_AT_STEP, "late", late_blocks, False)], on_build=on_build)
    return admitted_at["late"] - LATE_AT_STEP, sched, delivered, tokens, preemptions


def test_a_prompt_near_its_ttft_pauses_thinking_and_outputs_stay_exact():
    stock_wait, _, stock_delivered, tokens, _ = run(AsyncScheduler)
    wait, sched, delivered, _, _ = run(Scheduler)
    stats = sched.meridian_stats()
    # Stock vLLM: the prompt waits for a think request to finish (100+ steps).
    assert stock_wait > 100
    # Meridian: it waits half its TTFT SLO (25 steps of 20 ms), then one think
    # request (the most slack, ADR-0036) is paused and vLLM admits the prompt; the
    # first step after the pause or the next (vLLM's own watermark).
    assert 25 <= wait <= 28, wait
    assert stats["paused_for_admission"] == 1
    assert sched.meridian.core.counters.admission_preemptions == 1
    reg = sched.meridian.telemetry.registry
    assert reg.value("meridian_scheduler_admission_preemptions_total") == 1
    assert reg.value("meridian_preemptions_total", ("think", "recompute")) == stats["preempted_think"] >= 1
    assert stats["preempted_answer"] == 0 and stats["fallbacks"] == 0
    # The paused request resumed and every request got exactly its script,
    # with two steps in flight and its in-flight token dropped.
    assert delivered == tokens
    assert stock_delivered == tokens
    assert sched.requests == {}


def test_a_resumed_victim_tells_the_core_how_long_it_waited():
    # The core reports the wait victims see (a gauge; ADR-0035); in vLLM it
    # learns that wait from the adapter, which passes each victim's wait (from
    # vLLM's preemption to its first token after) when the victim re-enters
    # the core.
    entered = []
    spy = after_enter_core(lambda adapter, mid, r: entered.append(
        (r.request_id, r.num_preemptions, adapter.clock_ns())))
    _, sched, delivered, tokens, preemptions = run(Scheduler, on_build=spy)
    (step, victim), = preemptions
    back = [t for rid, n, t in entered if rid == victim and n == 1]
    assert len(back) == 1
    # Preempted while step `step` was scheduled, when the step clock read (step - 1) steps.
    waited_ns = back[0] - (step - 1) * STEP_NS
    assert waited_ns >= STEP_NS
    assert sched.meridian.core.victim_wait_ms == pytest.approx(waited_ns / 1e6)
    reg = sched.meridian.telemetry.registry
    assert reg.value("meridian_scheduler_victim_wait_seconds") == pytest.approx(waited_ns / 1e9)
    assert not sched.meridian.preempted_ns  # nothing left behind
    assert delivered == tokens


def test_without_preemption_or_when_the_prompt_fits_nothing_is_paused(tmp_path, monkeypatch):
    # A prompt that fits is admitted at once: nothing to pause.
    wait, sched, delivered, tokens, preemptions = run(Scheduler, late_blocks=10)
    assert wait <= 2 and sched.meridian_stats()["paused_for_admission"] == 0 and not preemptions
    assert delivered == tokens
    # [scheduler] preemption_enabled = false: the prompt waits as in stock vLLM.
    write_config(tmp_path, monkeypatch, "[scheduler]\npreemption_enabled = false\n")
    wait, sched, delivered, tokens, _ = run(Scheduler)
    assert wait > 100 and sched.meridian_stats()["paused_for_admission"] == 0
    assert delivered == tokens


def test_every_prompt_near_its_ttft_pauses_in_the_same_step(tmp_path, monkeypatch):
    # Two chat prompts of 22 blocks arrive together when 21 are free: neither
    # fits. At half their TTFT both pause thinking in the same step (one think
    # request each), as the core's lanes take every at-risk prompt within the
    # step's prefill budget; one a step would leave the second a step behind,
    # and under load a queue of them past their TTFT. The victim share is
    # raised so that three running requests may give two victims in a step.
    write_config(tmp_path, monkeypatch, "[scheduler]\npreempt_max_fraction = 1.0\n")
    admitted, sched, delivered, tokens, preemptions = run_arrivals(
        Scheduler, [(LATE_AT_STEP, "a", 22, False), (LATE_AT_STEP, "b", 22, False)])
    assert 25 <= admitted["a"] - LATE_AT_STEP <= 28, admitted
    assert admitted["b"] == admitted["a"], admitted
    stats = sched.meridian_stats()
    assert stats["paused_for_admission"] == 2 and stats["preempted_answer"] == 0 and stats["fallbacks"] == 0
    assert sched.meridian.core.counters.admission_preemptions == 2
    assert delivered == tokens


def test_the_victim_share_bounds_the_pauses_of_a_step():
    # The default share (1/8 of three running: one victim a step): the second
    # prompt pauses its own think request a step later.
    admitted, sched, delivered, tokens, _ = run_arrivals(
        Scheduler, [(LATE_AT_STEP, "a", 22, False), (LATE_AT_STEP, "b", 22, False)])
    assert 25 <= admitted["a"] - LATE_AT_STEP <= 28, admitted
    assert admitted["b"] > admitted["a"], admitted
    assert sched.meridian_stats()["paused_for_admission"] == 2
    assert delivered == tokens


def test_a_younger_chat_prompt_ahead_does_not_hold_back_an_older_one():
    # A reasoning prompt arrives at step 400 and a chat prompt at 415, 22
    # blocks each: neither fits. The adapter puts chat prompts ahead of
    # reasoning ones in vLLM's queue, so the young chat prompt is the head;
    # the reasoning prompt still pauses thinking once it has waited half its
    # TTFT (it waited 15 steps longer), and the chat prompt once it has.
    admitted, sched, delivered, tokens, _ = run_arrivals(
        Scheduler, [(LATE_AT_STEP, "r", 22, True), (LATE_AT_STEP + 15, "c", 22, False)])
    assert 25 <= admitted["r"] - LATE_AT_STEP <= 28, admitted
    assert 25 <= admitted["c"] - (LATE_AT_STEP + 15) <= 28, admitted
    assert sched.meridian_stats()["paused_for_admission"] == 2
    assert delivered == tokens


def test_a_think_request_with_a_long_prompt_frees_all_of_it():
    # Thinkers with 40-block prompts hold ~47 blocks each at step 100, when a
    # 70-block prompt arrives and 59 are free. One victim covers it (the
    # default share: one a step): the core counts the victim's whole context
    # as freed, as vLLM frees it, not only the tokens it generated (the
    # adapter hands the core the prompt as computed, not as a cached prefix).
    admitted, sched, delivered, tokens, _ = run_arrivals(
        Scheduler, [(100, "late", 70, False)], thinker_prompt=40 * 16, num_blocks=200)
    assert 25 <= admitted["late"] - 100 <= 28, admitted
    assert sched.meridian_stats()["paused_for_admission"] == 1
    assert delivered == tokens


def test_a_paused_request_resumes_with_its_think_history():
    # The paused think request re-enters the core with the tokens it generated
    # and its first token's time, as a victim the core preempted itself keeps
    # them: its think deadlines count the time it spent paused.
    seen = []

    def record(adapter, mid, r):
        if r.num_preemptions:
            seen.append((r.num_output_tokens, adapter.core.view(mid).generated_tokens))

    _, _, delivered, tokens, _ = run(Scheduler, on_build=after_enter_core(record))
    assert delivered == tokens
    assert seen, "the paused request resumed"
    for output_tokens, generated in seen:
        assert output_tokens > 1 and generated == output_tokens - 1


def test_a_chat_prompt_vllm_is_prefilling_is_not_its_victim_while_thinking_runs():
    # A 21-block chat prompt arrives at step 400 when 21 blocks are free. vLLM admits it and, at
    # 64 tokens a step, prefills it over six steps. Then the think requests need blocks, and
    # vLLM preempts from the tail of its running list. Until the core plans a prompt, the
    # adapter places it by its phase: a prompt that opened no think block sits with the chat
    # prompts, ahead of the think requests. (Only a think-phase prompt is a reasoning prefill.
    # Testing for the answer phase put a prompt before its first token among the reasoning
    # prefills, at the tail, and vLLM preempted it right after its first token.)
    arrivals = [(LATE_AT_STEP, "c", 21, False)]
    admitted, sched, delivered, tokens, preemptions = run_arrivals(Scheduler, arrivals, max_num_batched_tokens=64)
    assert admitted["c"] == LATE_AT_STEP
    assert preemptions and "c" not in {rid for _, rid in preemptions}, preemptions
    assert sched.meridian_stats()["preempted_answer"] == 0
    assert delivered == tokens
    # Stock vLLM takes the newest request, the chat prompt.
    _, _, stock_delivered, _, stock_preemptions = run_arrivals(AsyncScheduler, arrivals, max_num_batched_tokens=64)
    assert "c" in {rid for _, rid in stock_preemptions}, stock_preemptions
    assert stock_delivered == tokens
