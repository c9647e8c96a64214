"""Finished reasoning is the first cached KV vLLM evicts (ADR-0031), in the
real vLLM 0.32 scheduler stepped with two steps in flight (async
scheduling, vLLM's default on a GPU)."""
from __future__ import annotations

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import (  # noqa: E402
    BLOCK, END_THINK, EOS, THINK, WORD, AsyncScheduler, TwoInFlight, build, prompt, request)

from meridian.vllm import Scheduler  # noqa: E402
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id  # noqa: E402

NUM_BLOCKS = 40  # one is vLLM's null block
CHAT_PROMPT_BLOCKS = 8
THINK_BLOCKS = 10  # full blocks of think tokens


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)


class Script:
    """Each request's outputs, by output position."""

    def __init__(self) -> None:
        self.tokens: dict[str, list[int]] = {}

    def __call__(self, r) -> int:
        script = self.tokens.get(r.request_id, ())
        n = r.num_output_tokens
        return script[n] if n < len(script) else EOS


def run_until_done(sched, stepper, rids: set[str]) -> list:
    """Steps until every request of `rids` has finished; returns the outputs scheduled."""
    outs = []
    for _ in range(500):
        if not rids & set(sched.requests):
            break
        out, _ = stepper.step()
        outs.append(out)
    stepper.drain()
    assert not rids & set(sched.requests), "finished"
    return outs


def next_turn_hit(cls) -> tuple[int, object]:
    """A conversation's first turn (a chat prompt of 8 blocks), then a
    reasoning request (2 prompt blocks, 10 blocks of think tokens, an answer)
    finish; then a prompt that needs every block holding nothing cached plus
    10 cached ones runs; then the conversation's next turn (its first turn's
    prompt and answer, then more) arrives. Returns the prompt tokens vLLM
    found in its prefix cache for that turn, and the scheduler."""
    sched = build(cls, num_blocks=NUM_BLOCKS)
    script = Script()
    stepper = TwoInFlight(sched, script)
    first = prompt(CHAT_PROMPT_BLOCKS * BLOCK, 1)
    script.tokens["c1"] = [WORD, WORD + 1, EOS]
    sched.add_request(request("c1", first))
    run_until_done(sched, stepper, {"c1"})
    # The prompt ends in <think> (the chat template opened the block): 2 full blocks.
    script.tokens["r1"] = [WORD + 2] * (THINK_BLOCKS * BLOCK) + [END_THINK, WORD, WORD, EOS]
    sched.add_request(request("r1", prompt(2 * BLOCK - 1, 2) + [THINK]))
    run_until_done(sched, stepper, {"r1"})
    pool = sched.kv_cache_manager.block_pool
    uncached = sum(1 for b in pool.free_block_queue.get_all_free_blocks() if b.block_hash is None)
    # A prompt whose blocks take every block holding nothing cached and 10 cached ones; its
    # first token is EOS, so it holds them only while it prefills.
    filler = (uncached + THINK_BLOCKS) * BLOCK - 1
    sched.add_request(request("f", prompt(filler, 3)))
    run_until_done(sched, stepper, {"f"})
    sched.add_request(request("c2", first + [WORD, WORD + 1] + prompt(20, 4)))
    outs = run_until_done(sched, stepper, {"c2"})
    hits = [new.num_computed_tokens for out in outs for new in out.scheduled_new_reqs if new.req_id == "c2"]
    assert len(hits) == 1
    return hits[0], sched


def test_a_finished_requests_think_blocks_go_before_a_conversations_prompt():
    hit, sched = next_turn_hit(Scheduler)
    # Every block of the first turn's prompt survived the filler: the think blocks went instead.
    assert hit == CHAT_PROMPT_BLOCKS * BLOCK
    assert sched.meridian_stats()["think_blocks_evicted_first"] == THINK_BLOCKS
    # The filler reused them: none is left cached.
    assert sched.meridian.think_eviction.cached_blocks() == 0
    assert sched.meridian_stats()["fallbacks"] == 0


def test_stock_vllm_evicts_the_older_prompt_first():
    # The same run under vLLM's own scheduler: LRU takes the first turn's
    # (older) prompt blocks before the reasoning's, and the next turn misses.
    hit, _ = next_turn_hit(AsyncScheduler)
    assert hit < CHAT_PROMPT_BLOCKS * BLOCK


def after_reasoning(sched) -> tuple[list, list, object]:
    """Runs c1 (a chat prompt), then r1 (a reasoning request), then a short
    request x, stepped two in flight. Returns the block hashes of vLLM's free
    queue, front first (None: a block holding nothing cached), r1's think
    block hashes, tail first, and a request that repeats r1's prompt and
    reasoning."""
    script = Script()
    stepper = TwoInFlight(sched, script)
    sched.add_request(request("c1", prompt(CHAT_PROMPT_BLOCKS * BLOCK, 1)))
    script.tokens["c1"] = [WORD, EOS]
    run_until_done(sched, stepper, {"c1"})
    body = prompt(2 * BLOCK - 1, 2) + [THINK]
    script.tokens["r1"] = [WORD + 2] * (THINK_BLOCKS * BLOCK) + [END_THINK, WORD, EOS]
    sched.add_request(request("r1", body))
    run_until_done(sched, stepper, {"r1"})
    sched.add_request(request("x", prompt(BLOCK // 2, 5)))
    script.tokens["x"] = [WORD, WORD, EOS]
    run_until_done(sched, stepper, {"x"})
    queue = sched.kv_cache_manager.block_pool.free_block_queue.get_all_free_blocks()
    repeat = request("probe", body + script.tokens["r1"][:THINK_BLOCKS * BLOCK] + [WORD])
    think = [make_block_hash_with_group_id(h, 0) for h in repeat.block_hashes[2:2 + THINK_BLOCKS]]
    return [b.block_hash for b in queue], think[::-1], repeat


def test_the_moved_blocks_stay_cached_behind_the_blocks_holding_nothing():
    """Once the reasoning request has finished, its think blocks are first
    among vLLM's cached free blocks, behind every block that holds nothing
    cached, and still in its prefix cache: a prompt that repeats them hits."""
    sched = build(Scheduler, num_blocks=NUM_BLOCKS)
    hashes, think, repeat = after_reasoning(sched)
    first = next(i for i, h in enumerate(hashes) if h is not None)
    assert None not in hashes[first:], "the blocks holding nothing cached stay ahead"
    assert hashes[first:first + THINK_BLOCKS] == think
    assert sched.kv_cache_manager.get_computed_blocks(repeat)[1] == (2 + THINK_BLOCKS) * BLOCK
    # The metric: they are the cached think_complete blocks until vLLM reuses them.
    sched.meridian.sync_metrics(sched)
    reg = sched.meridian.telemetry.registry
    assert reg.value("meridian_block_manager_cached_blocks", ("think_complete",)) == THINK_BLOCKS


def test_blocks_vllm_frees_a_step_late_move_once_freed(tmp_path):
    """With a KV connector that loads KV and two steps in flight, vLLM frees a
    finished request's blocks only once the step that may write them is done
    (deferred frees); they move when vLLM frees them."""
    sched = build(Scheduler, num_blocks=NUM_BLOCKS, kv_connector_dir=str(tmp_path / "kv"))
    # What vLLM sets with this connector and async scheduling on (the rig's
    # config leaves vLLM's async flag off: TwoInFlight does the stepping).
    sched.defer_block_free = True
    deferred = []
    pop = sched.kv_cache_manager.pop_blocks_for_free
    sched.kv_cache_manager.pop_blocks_for_free = lambda r: deferred.append(r.request_id) or pop(r)
    hashes, think, _ = after_reasoning(sched)
    assert "r1" in deferred, "vLLM deferred freeing r1's blocks"
    assert [h for h in hashes if h is not None][:THINK_BLOCKS] == think
    assert sched.meridian_stats()["think_blocks_evicted_first"] == THINK_BLOCKS
    assert not sched.meridian.think_eviction.pending


def test_a_vllm_without_the_free_queue_methods_keeps_its_order_and_says_so(monkeypatch, caplog):
    """A vLLM whose free queue lacks a method the move needs: one warning at
    start, vLLM's own order (the next turn misses, as under stock vLLM), no
    fallback."""
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    monkeypatch.delattr(FreeKVCacheBlockQueue, "iter_blocks_after")
    with caplog.at_level("WARNING", logger="meridian.vllm"):
        hit, sched = next_turn_hit(Scheduler)
    assert "lacks the free-queue methods" in caplog.text
    assert hit < CHAT_PROMPT_BLOCKS * BLOCK
    assert sched.meridian_stats()["think_blocks_evicted_first"] == 0
    assert sched.meridian_stats()["fallbacks"] == 0
