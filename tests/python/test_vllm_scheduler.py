"""meridian.vllm.Scheduler against the real vLLM scheduler (vllm_rig.py):
answers first, think-phase victims, phase tracking, reaping, throttling,
the token budget and the fail-safe."""
from __future__ import annotations

import logging

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import (  # noqa: E402
    END_THINK, EOS, THINK, WORD, RequestStatus, build, prompt, request, script, slow_model_config, step, write_config)

from meridian.vllm import Scheduler  # noqa: E402
from meridian.vllm._setup import MeridianSetupError  # noqa: E402

import meridian  # noqa: E402

OUTPUT = meridian.Phase.OUTPUT_DECODE
THINK_PHASE = meridian.Phase.THINK_DECODE


def phase_of(sched: Scheduler, rid: str):
    m = sched.meridian
    return m.phase.get(m.mid_of.get(rid))


def reasoning(n_think: int, n_answer: int = 4) -> list[int]:
    return [THINK] + [WORD] * n_think + [END_THINK] + [WORD] * n_answer + [EOS]


def chat(n: int) -> list[int]:
    return [WORD] * n + [EOS]


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    """No meridian.toml from the developer's machine leaks in."""
    vllm_rig.isolate_config(tmp_path, monkeypatch)


def meridian_records(caplog, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "meridian.vllm" and text in r.getMessage()]


def test_is_an_async_scheduler_built_the_engine_way():
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    sched = build(Scheduler)
    assert isinstance(sched, AsyncScheduler)
    assert sched.meridian_stats()["model_preset"] == "qwen3"


def test_resolves_through_vllms_scheduler_cls_lookup():
    config = vllm_rig.vllm_config()
    config.scheduler_config.scheduler_cls = "meridian.vllm.Scheduler"
    assert config.scheduler_config.get_scheduler_cls() is Scheduler


def test_phases_follow_think_tokens_and_answers_come_first():
    sched = build(Scheduler)
    for i in range(4):
        sched.add_request(request(f"think{i}", prompt(40, i)))
    sched.add_request(request("chat", prompt(40, 9)))
    choose = script({**{f"think{i}": reasoning(30) for i in range(4)}, "chat": chat(20)})
    step(sched, choose)  # prefill; first tokens
    step(sched, choose)
    assert phase_of(sched, "chat") == OUTPUT
    assert all(phase_of(sched, f"think{i}") == THINK_PHASE for i in range(4))
    # Answer-phase first in vLLM's running list, think after.
    assert sched.running[0].request_id == "chat"
    for _ in range(31):
        step(sched, choose)
    assert all(phase_of(sched, f"think{i}") == OUTPUT for i in range(4))
    assert sched.meridian_stats()["phase_exits"] == 4


def test_eos_finishes_and_reaps():
    sched = build(Scheduler)
    sched.add_request(request("a", prompt(20)))
    sched.add_request(request("b", prompt(20, 1)))
    choose = script({"a": reasoning(5, 2), "b": chat(3)})
    for _ in range(15):
        step(sched, choose)
    assert not sched.requests
    stats = sched.meridian_stats()
    assert stats["tracked_requests"] == 0
    assert len(sched.meridian.core) == 0
    assert sched.meridian.router.tracked == 0


def test_abort_reaps_running_and_waiting_requests():
    sched = build(Scheduler, max_num_seqs=2)
    for i in range(3):
        sched.add_request(request(f"r{i}", prompt(20, i)))
    choose = script({})
    step(sched, choose)
    step(sched, choose)
    assert len(sched.meridian.core) == 2  # r2 waits (max_num_seqs)
    sched.finish_requests(["r0", "r2"], RequestStatus.FINISHED_ABORTED)
    assert sched.meridian_stats()["tracked_requests"] == 1
    assert len(sched.meridian.core) == 1
    step(sched, choose)
    assert sched.meridian.mid_of.keys() == {"r1"}


def run_pressure(cls, steps: int = 4000, seed_requests: int = 12):
    """KV for ~2 long requests of 12: vLLM must preempt. Half the requests
    answer early; the rest think long."""
    sched = build(cls, num_blocks=48, max_num_seqs=16)
    victims: list[tuple[str, bool, bool]] = []  # (id, answer-phase victim, think running at that moment)
    orig = sched._preempt_request

    def answering(r) -> bool:
        return END_THINK in r.output_token_ids

    def thinking(r) -> bool:
        return THINK in r.output_token_ids and END_THINK not in r.output_token_ids

    def record(req, *a, **k):
        # Phases read from the tokens themselves, the same way for both classes.
        think_running = any(thinking(r) for r in sched.running if r is not req)
        victims.append((req.request_id, answering(req), think_running))
        return orig(req, *a, **k)

    sched._preempt_request = record
    tokens = {}
    for i in range(seed_requests):
        sched.add_request(request(f"r{i}", prompt(48, i), max_tokens=300))
        tokens[f"r{i}"] = [THINK] + [WORD] * (3 if i % 2 else 250) + [END_THINK] + [WORD] * 40 + [EOS]
    choose = script(tokens)
    for _ in range(steps):
        if not sched.requests:
            break
        step(sched, choose)
    return sched, victims


def test_preemption_takes_think_victims_never_an_answer_while_think_runs():
    sched, victims = run_pressure(Scheduler)
    assert victims, "the scenario must exhaust KV"
    bad = [v for v in victims if v[1] and v[2]]
    assert not bad, f"answer-phase victims while think-phase requests ran: {bad}"
    stats = sched.meridian_stats()
    assert stats["preempted_think"] >= 1
    assert stats["fallbacks"] == 0
    assert not sched.requests  # everything finished: no livelock, nothing lost


def test_stock_vllm_does_preempt_answers_in_the_same_scenario():
    """The baseline the previous test improves on (so that test can fail)."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    sched, victims = run_pressure(AsyncScheduler)
    bad = [v for v in victims if v[1] and v[2]]
    assert bad, "stock vLLM takes running[-1], answer-phase or not"


def test_victims_are_ordered_most_slack_last():
    """ADR-0036: vLLM preempts running[-1] first, and the adapter puts there the
    think request with the most slack. "early" starts thinking six steps before
    "late": it has banked more slack against its mean think TPOT, so it is the
    first victim although it holds the longer context (least progress first put
    "late" there)."""
    sched = build(Scheduler)
    choose = script({rid: [THINK] + [WORD] * 100 for rid in ("early", "late")} | {"answer": chat(50)})
    sched.add_request(request("early", prompt(200, 0)))
    for _ in range(6):
        step(sched, choose)
    sched.add_request(request("late", prompt(20, 1)))
    sched.add_request(request("answer", prompt(30, 7)))
    for _ in range(4):
        step(sched, choose)
    assert [r.request_id for r in sched.running] == ["answer", "late", "early"]


def test_victims_of_equal_slack_are_ordered_least_progress_last():
    sched = build(Scheduler)
    lengths = {"long": 200, "mid": 100, "short": 20}
    for i, (rid, n) in enumerate(lengths.items()):
        sched.add_request(request(rid, prompt(n, i)))
    sched.add_request(request("answer", prompt(30, 7)))
    choose = script({"answer": chat(50)}, default=WORD)
    choose_think = script({rid: [THINK] + [WORD] * 100 for rid in lengths} | {"answer": chat(50)})
    del choose
    for _ in range(4):
        step(sched, choose_think)
    order = [r.request_id for r in sched.running]
    assert order == ["answer", "long", "mid", "short"]


def test_think_decode_is_throttled_while_answers_stream_and_still_progresses(tmp_path, monkeypatch):
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    for i in range(24):
        sched.add_request(request(f"t{i}", prompt(16, i)))
    for i in range(4):
        sched.add_request(request(f"a{i}", prompt(16, 100 + i)))
    choose = script({**{f"t{i}": [THINK] + [WORD] * 500 for i in range(24)},
                     **{f"a{i}": [WORD] * 500 for i in range(4)}})
    for _ in range(3):
        step(sched, choose)
    held_steps = 0
    think_tokens_before = {f"t{i}": sched.requests[f"t{i}"].num_output_tokens for i in range(24)}
    for _ in range(40):
        out, _ = step(sched, choose)
        scheduled = set(out.num_scheduled_tokens)
        assert all(f"a{i}" in scheduled for i in range(4)), "every answer decodes every step"
        if len([r for r in scheduled if r.startswith("t")]) < 24:
            held_steps += 1
        # Held requests stay RUNNING with their KV.
        assert all(sched.requests[f"t{i}"].status == RequestStatus.RUNNING for i in range(24))
    assert held_steps > 0
    assert sched.meridian_stats()["throttled_decodes"] > 0
    # The think guarantee: every think request progressed meanwhile.
    assert all(sched.requests[r].num_output_tokens > n for r, n in think_tokens_before.items())
    assert len(sched.running) == 28


def test_throttle_false_override_is_never_held(tmp_path, monkeypatch):
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    for i in range(24):
        args = {"meridian": {"throttle": False}} if i == 0 else None
        sched.add_request(request(f"t{i}", prompt(16, i), extra_args=args))
    sched.add_request(request("a", prompt(16, 99)))
    choose = script({**{f"t{i}": [THINK] + [WORD] * 500 for i in range(24)}, "a": [WORD] * 500})
    for _ in range(3):
        step(sched, choose)
    for _ in range(30):
        out, _ = step(sched, choose)
        assert "t0" in out.num_scheduled_tokens
    assert sched.meridian_stats()["throttled_decodes"] > 0


def test_invalid_override_is_counted_and_ignored(caplog):
    sched = build(Scheduler)
    with caplog.at_level(logging.WARNING, logger="meridian.vllm"):
        sched.add_request(request("x", prompt(8), extra_args={"meridian": {"throttle": "maybe"}}))
    assert sched.meridian_stats()["invalid_extra_args"] == 1
    assert "extra_args.meridian.throttle must be true or false" in caplog.text


def test_prefill_budget_is_capped_while_answers_stream(tmp_path, monkeypatch):
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    sched.add_request(request("a", prompt(16)))
    choose = script({"a": [WORD] * 500})
    step(sched, choose)
    step(sched, choose)
    sched.add_request(request("long", prompt(3000, 5)))
    out, _ = step(sched, choose)
    # vLLM alone would prefill the whole 3,000-token prompt in this step.
    assert 0 < out.num_scheduled_tokens["long"] < 3000
    assert sched.meridian_stats()["budget_capped_steps"] >= 1

    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    stock = build(AsyncScheduler)
    stock.add_request(request("a", prompt(16)))
    step(stock, choose)
    step(stock, choose)
    stock.add_request(request("long", prompt(3000, 5)))
    out, _ = step(stock, choose)
    assert out.num_scheduled_tokens["long"] == 3000


def test_fail_safe_falls_back_to_stock_scheduling_and_logs_once(caplog, monkeypatch):
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    sched = build(Scheduler)
    stock = build(AsyncScheduler)
    for s in (sched, stock):
        for i in range(5):
            s.add_request(request(f"r{i}", prompt(30, i)))
    choose = script({f"r{i}": reasoning(20) for i in range(5)})
    choose_stock = script({f"r{i}": reasoning(20) for i in range(5)})

    def boom(*_a, **_k):
        raise RuntimeError("injected")

    monkeypatch.setattr(type(sched.meridian), "before_schedule", boom)
    with caplog.at_level(logging.ERROR, logger="meridian.vllm"):
        for _ in range(6):
            out, _ = step(sched, choose)
            ref, _ = step(stock, choose_stock)
            assert dict(out.num_scheduled_tokens) == dict(ref.num_scheduled_tokens)
    assert sched.meridian_stats()["fallbacks"] == 6
    assert len(meridian_records(caplog, "injected")) == 1  # logged once
    assert len(sched.running) == 5


def test_fail_safe_in_bookkeeping_keeps_the_engine_going(caplog, monkeypatch):
    sched = build(Scheduler)
    for i in range(3):
        sched.add_request(request(f"r{i}", prompt(30, i)))
    choose = script({f"r{i}": reasoning(10) for i in range(3)})

    def boom(*_a, **_k):
        raise ValueError("bookkeeping broke")

    monkeypatch.setattr(type(sched.meridian), "after_update", boom)
    with caplog.at_level(logging.ERROR, logger="meridian.vllm"):
        for _ in range(25):
            step(sched, choose)
    assert not sched.requests  # all finished
    assert sched.meridian_stats()["fallbacks"] >= 1
    assert len(meridian_records(caplog, "bookkeeping broke")) == 1


def test_model_preset_must_match_the_served_tokenizer(monkeypatch):
    monkeypatch.setenv("MERIDIAN_MODEL", "deepseek_r1_distill_qwen")
    with pytest.raises(MeridianSetupError, match=r"does not match the served model: <think> is \[151648\]"):
        build(Scheduler)


def test_unknown_model_preset_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("MERIDIAN_MODEL", "llama")
    with pytest.raises(MeridianSetupError, match="is not a model preset; known: deepseek_r1"):
        build(Scheduler)


def test_without_reasoning_parser_asks_for_one():
    with pytest.raises(MeridianSetupError, match="--reasoning-parser"):
        build(Scheduler, reasoning_parser=None)


def test_explicit_preset_without_reasoning_parser(monkeypatch):
    monkeypatch.setenv("MERIDIAN_MODEL", "qwen3")
    sched = build(Scheduler, reasoning_parser=None)
    assert sched.meridian_stats()["model_preset"] == "qwen3"


def test_invalid_config_file_names_the_field(tmp_path, monkeypatch):
    write_config(tmp_path, monkeypatch, "[scheduler]\noutput_tpot_budget_ms = -1\n")
    with pytest.raises(MeridianSetupError, match="scheduler.output_tpot_budget_ms"):
        build(Scheduler)


def test_kv_tiers_mirror_the_running_requests():
    sched = build(Scheduler)
    sched.add_request(request("t", prompt(32, 1)))
    sched.add_request(request("a", prompt(32, 2)))
    choose = script({"t": [THINK] + [WORD] * 100, "a": [THINK] + [WORD] * 15 + [END_THINK] + [WORD] * 100})
    for _ in range(40):
        step(sched, choose)
    tiers = sched.meridian_stats()["kv_blocks"]
    # t: 32 prompt + 40 generated, all thinking; a: 16 think tokens, then answering.
    assert tiers["think_active"] == 3  # ceil(39 think tokens / 16)
    assert tiers["think_complete"] == 1
    total = sum(-(-r.num_computed_tokens // 16) for r in sched.running)
    assert sum(tiers.values()) == total
