"""The phase router through Python, with the real Qwen3 token ids."""
import threading

import pytest

import meridian
from meridian import ForceReason, ForceResult, Phase, PhaseEventKind

THINK, END_THINK, IM_END, TOOL, END_TOOL = 151667, 151668, 151645, 151657, 151658
WORD = 785  # an ordinary token id


@pytest.fixture
def router():
    cfg = meridian.parse_config("[scheduler]\nmin_think_tokens = 2\nmax_think_tokens = 4\n")
    return meridian.PhaseRouter(cfg, "qwen3")


def test_think_then_answer_then_eos(router):
    assert router.begin(1) == Phase.PREFILL
    assert router.on_token(1, THINK).kind == PhaseEventKind.ENTER_THINK
    assert router.on_token(1, WORD) is None
    ev = router.on_token(1, END_THINK)
    assert ev.kind == PhaseEventKind.EXIT_THINK and ev.think_tokens == 1
    assert router.snapshot(1).phase == Phase.OUTPUT_DECODE
    assert router.on_token(1, IM_END).kind == PhaseEventKind.COMPLETE
    assert router.tracked == 0


def test_prompt_opened_think_and_no_think(router):
    assert router.begin(1, prompt_token_ids=[WORD, THINK, WORD]) == Phase.THINK_DECODE
    # enable_thinking=False: the template closes an empty block in the prompt.
    assert router.begin(2, prompt_token_ids=[THINK, END_THINK, WORD]) == Phase.PREFILL
    assert router.begin(3, thinking_disabled=True) == Phase.OUTPUT_DECODE


def test_hard_cap_is_reissued_until_end_of_thinking(router):
    router.begin(1)
    router.on_token(1, THINK)
    events = [router.on_token(1, WORD) for _ in range(6)]
    forces = [e for e in events if e is not None]
    assert [e.reissue for e in forces] == [False, True, True]
    assert all(e.reason == ForceReason.HARD_CAP for e in forces)
    assert router.end_think_pending(1)
    ev = router.on_token(1, END_THINK)
    assert ev.forced and ev.think_tokens == 6


def test_force_request_is_deferred_inside_a_tool_call(router):
    router.begin(1)
    for token in (THINK, WORD, WORD, TOOL):
        router.on_token(1, token)
    assert router.request_force(1, ForceReason.CONVERGED) == ForceResult.DEFERRED_TOOL_CALL
    assert not router.end_think_pending(1)
    ev = router.on_token(1, END_TOOL)
    assert ev.kind == PhaseEventKind.FORCE_BUDGET and ev.reason == ForceReason.CONVERGED


def test_batch_step(router):
    ids = list(range(1, 101))
    for i in ids:
        router.begin(i)
    events = router.on_tokens(ids, [THINK] * 100)
    assert sorted(e.request_id for e in events) == ids
    events = router.on_tokens(ids, [IM_END] * 100)
    assert all(e.kind == PhaseEventKind.COMPLETE for e in events)
    assert router.tracked == 0
    # An argument error: ValueError (was RuntimeError before issue 15).
    with pytest.raises(ValueError, match="tokens .* must match ids"):
        router.on_tokens([1, 2], [WORD])


def test_reaping_by_idle_time(router):
    router.begin(1)
    router.advance_clock(router.now_ns + 120 * 10**9)
    assert router.reap_idle() == 1
    assert router.tracked == 0
    assert router.counters().reaped == 1


def test_threads_share_one_router(router):
    def worker(base):
        for r in range(base, base + 200):
            router.begin(r)
            router.on_tokens([r, r, r], [THINK, WORD, END_THINK])
            router.on_token(r, IM_END)

    threads = [threading.Thread(target=worker, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert router.tracked == 0
    assert router.counters().completed == 800


def test_request_id_map_never_collides():
    ids = meridian.RequestIdMap()
    a = ids.intern("chatcmpl-1")
    assert ids.intern("chatcmpl-1") == a
    assert ids.release("chatcmpl-1") == a
    assert ids.intern("chatcmpl-1") != a
    assert len({ids.intern(f"r{i}") for i in range(1000)}) == 1000


def test_unknown_model_is_a_value_error():
    with pytest.raises(ValueError, match="model.llama is not defined"):
        meridian.PhaseRouter(meridian.MeridianConfig.defaults(), "llama")
