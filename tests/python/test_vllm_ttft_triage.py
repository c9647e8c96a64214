"""TTFT triage (ADR-0028) in the real vLLM 0.32 scheduler, stepped as vLLM
steps it on a GPU: two steps in flight (async scheduling). A long prompt that
cannot meet the TTFT SLO even alone arrives just ahead of four short ones
that can. vLLM serves its FCFS queue in order; Meridian moves the long prompt
behind the short ones, so they get their first token steps sooner, and the
long one still completes."""
from __future__ import annotations

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import EOS, WORD, AsyncScheduler, TwoInFlight, build, prompt, request, script, write_config  # noqa: E402

from meridian.vllm import Scheduler  # noqa: E402

STEP_NS = 20_000_000
# 0.2 ms a prompt token: the 2,048-token prompt needs 410 ms of prefill, past
# a 300 ms TTFT even alone; a 256-token prompt needs 51 ms.
CONFIG = ("[scheduler]\nstep_cost_online = false\nstep_cost_base_ms = 2.0\nstep_cost_per_token_ms = 0.2\n"
          "step_cost_per_kv_token_us = 0.0\nttft_slo_ms = 300.0\n")
SHORT = [f"s{i}" for i in range(4)]


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)
    write_config(tmp_path, monkeypatch, CONFIG)


def run(cls, short_at_step: int = 1, long_tokens: int = 2048):
    """The long prompt arrives before step 1, the short ones before step
    `short_at_step`. Returns (the step at which each request was first
    scheduled, the scheduler, the delivered tokens, the scripted tokens)."""
    sched = build(cls, max_num_batched_tokens=512, num_blocks=1000)
    clock = [0]
    if cls is Scheduler:
        sched.meridian.clock_ns = lambda: clock[0]
    tokens = {"long": [WORD] * 3 + [EOS]}
    sched.add_request(request("long", prompt(long_tokens, 1)))
    for i, rid in enumerate(SHORT):
        tokens[rid] = [WORD + i] * 3 + [EOS]
    stepper = TwoInFlight(sched, script(tokens))
    first: dict[str, int] = {}
    delivered: dict[str, list[int]] = {}
    for n in range(1, 200):
        if n == short_at_step:
            for i, rid in enumerate(SHORT):
                sched.add_request(request(rid, prompt(256, 10 + i)))
        if not sched.requests:
            break
        out, outputs = stepper.step()
        clock[0] += STEP_NS
        for rid in out.num_scheduled_tokens:
            first.setdefault(rid, n)
        for eco in (outputs or {}).values():
            for o in eco.outputs:
                delivered.setdefault(o.request_id, []).extend(o.new_token_ids)
    stepper.drain()
    assert not sched.requests, "every request finished"
    return first, sched, delivered, tokens


def test_a_prompt_that_cannot_meet_its_ttft_goes_behind_those_that_can():
    stock_first, _, stock_delivered, tokens = run(AsyncScheduler)
    first, sched, delivered, _ = run(Scheduler)
    # vLLM: the long prompt's four 512-token chunks come first; the short
    # prompts start from step 5 on.
    assert stock_first["long"] == 1
    assert min(stock_first[r] for r in SHORT) >= 5
    # Meridian: two short prompts fill each of the first two steps; the long
    # one starts after them and still finishes.
    assert sorted(first[r] for r in SHORT) == [1, 1, 2, 2], first
    assert first["long"] == 3, first
    assert sched.meridian.core.counters.ttft_deferred == 1
    assert sched.meridian_stats()["ttft_deferred_steps"] >= 2
    reg = sched.meridian.telemetry.registry
    assert reg.value("meridian_scheduler_ttft_deferred_total") == 1
    assert sched.meridian_stats()["fallbacks"] == 0
    assert delivered == tokens
    assert stock_delivered == tokens


def test_off_keeps_vllms_order(tmp_path, monkeypatch):
    write_config(tmp_path, monkeypatch, CONFIG + "ttft_triage = false\n")
    first, sched, delivered, tokens = run(Scheduler)
    assert first["long"] == 1 and min(first[r] for r in SHORT) >= 5
    assert sched.meridian.core.counters.ttft_deferred == 0
    assert delivered == tokens


def test_a_lost_prompt_vllm_is_already_prefilling_sits_out_while_prompts_that_can_make_it_wait():
    # A 4,096-token prompt (819 ms of prefill against 300 ms) is alone, so
    # vLLM starts it; the short prompts arrive at step 3. vLLM gives a running
    # prefill the budget before any waiting prompt: stock vLLM finishes the
    # long one first (8 chunks of 512), Meridian holds it while they wait.
    stock_first, _, stock_delivered, tokens = run(AsyncScheduler, short_at_step=3, long_tokens=4096)
    first, sched, delivered, _ = run(Scheduler, short_at_step=3, long_tokens=4096)
    assert stock_first["long"] == first["long"] == 1
    assert min(stock_first[r] for r in SHORT) >= 9, stock_first
    assert sorted(first[r] for r in SHORT) == [3, 3, 4, 4], first
    stats = sched.meridian_stats()
    assert stats["ttft_deferred_held"] >= 2 and stats["fallbacks"] == 0
    assert sched.meridian.core.counters.ttft_deferred == 1
    assert delivered == tokens
    assert stock_delivered == tokens
