"""Finished reasoning is the first thing vLLM's prefix cache evicts (ADR-0031).

A reasoning request's think tokens sit in its KV after its prompt. Once it
has finished, those blocks stay in vLLM's prefix cache (hashed, free, evicted
least recently used first) like any other, although a later prompt can hit
them only if it repeats the whole reasoning: the chat templates of reasoning
models drop it from the history (Qwen3, DeepSeek-R1), so the next turn's
prompt repeats the prompt and the answer, not the think block. Kept in LRU
order, a burst of finished reasoning pushes out the prompt blocks that the
conversations' next turns would hit.

Meridian's block manager evicts that KV first (the ThinkComplete tier,
docs/architecture.md). vLLM keeps its own pool, so the adapter does the same
there: when vLLM frees a finished request, the full blocks written while it
thought (still hashed, so a prompt that does repeat them still hits) move to
the front of vLLM's cached blocks in its free queue: allocation takes them
after the blocks that hold nothing cached (as the block manager takes its
free list first) and before any other cached block. Nothing else changes:
prompt and answer blocks keep vLLM's LRU order, a block another request
shares is left alone, and a preempted request's blocks are vLLM's (it
resumes from them).

vLLM frees a request's blocks at once, or a step later when a GPU step in
flight may still write them (async scheduling, KV connectors). So the blocks
are collected when the request finishes and moved at the start of the first
``schedule()`` after vLLM has freed them, all of a step's at once and before
vLLM allocates; one that was evicted, reused or shared meanwhile is dropped
from the list.
The moved blocks are followed until vLLM reuses them: how many are still
cached is ``meridian_block_manager_cached_blocks{tier="think_complete"}``.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Any

logger = logging.getLogger("meridian.vllm")

# A collected block vLLM has not freed after this many steps (a KV connector
# still sending it) is left to vLLM's LRU order.
_MAX_WAIT_STEPS = 64
# The free queue is walked from its front past at most this many blocks that
# hold nothing cached. More than that (a pool still mostly unused) and nothing
# is evicted soon: the blocks are left in LRU order, as vLLM put them.
_MAX_UNCACHED_SCAN = 256


class ThinkFirstEviction:
    """Moves finished requests' think blocks ahead of every other cached block
    in vLLM's free queue.

    Thread-safety: called only from vLLM's scheduler thread (inside the
    scheduler's hooks). Ownership: holds references to blocks of finished
    requests until vLLM frees them (at most ``_MAX_WAIT_STEPS`` steps); the
    blocks, the pool and its free queue stay vLLM's.
    """

    def __init__(self, sched: Any) -> None:
        manager = sched.kv_cache_manager
        self.pool = manager.block_pool
        self.queue = getattr(self.pool, "free_block_queue", None)
        # Each KV cache group's block size (hybrid models have several).
        groups = getattr(getattr(sched, "kv_cache_config", None), "kv_cache_groups", None) or []
        self.block_sizes = [g.kv_cache_spec.block_size for g in groups]
        caching = bool(getattr(self.pool, "enable_caching", False) and self.block_sizes)
        self.enabled = caching and hasattr(manager, "get_blocks") and all(
            hasattr(self.queue, f) for f in ("remove", "prepend_n", "popleft_n", "iter_blocks_after"))
        if caching and not self.enabled:
            logger.warning("meridian: this vLLM's block pool lacks the free-queue methods Meridian uses; "
                           "finished reasoning stays in vLLM's LRU order (ADR-0031)")
        self.pending: deque[tuple[int, Any, Any]] = deque()  # (step, block, its hash then)
        self.moved = 0  # blocks moved ahead of the other cached blocks
        # The moved blocks by block id, (block, its hash), until vLLM reuses them;
        # pruned at each metrics sync, so at most one entry per block of the pool.
        self.cached: dict[int, tuple[Any, Any]] = {}

    def collect(self, sched: Any, request: Any, think_start: int, think_end: int, step: int) -> None:
        """`request` finished; its output tokens [think_start, think_end) were
        its reasoning. Remembers the full blocks that hold only those tokens."""
        if not self.enabled or think_end <= think_start:
            return
        groups = sched.kv_cache_manager.get_blocks(request.request_id).blocks
        if len(groups) != len(self.block_sizes):
            return
        begin = request.num_prompt_tokens + think_start
        end = request.num_prompt_tokens + think_end
        for blocks, size in zip(groups, self.block_sizes):
            first, last = -(-begin // size), min(end // size, len(blocks))
            # The tail first, as vLLM frees a request's blocks.
            for b in reversed(blocks[first:last]):
                if b.is_null or b.block_hash is None or b.ref_cnt != 1:
                    continue  # not cached, or another request holds it too
                if b.pool is not None and b.pool is not self.pool:
                    continue
                self.pending.append((step, b, b.block_hash))

    def apply(self, step: int) -> int:
        """Moves the collected blocks vLLM has freed ahead of every other cached
        block in its free queue; returns how many moved."""
        if not self.pending:
            return 0
        front = []
        waiting: deque[tuple[int, Any, Any]] = deque()
        for entry in self.pending:
            at, b, h = entry
            if b.block_hash is not h:
                continue  # evicted (and maybe reused) since
            if b.ref_cnt == 0:
                front.append(b)  # free: vLLM's free queue holds every block with no reference
            elif b.ref_cnt == 1 and step - at < _MAX_WAIT_STEPS:
                waiting.append(entry)  # vLLM has not freed it yet (a deferred free)
            # Shared meanwhile (a prompt hit it): LRU order, like any block in use.
        self.pending = waiting
        if not front:
            return 0
        # vLLM puts blocks that hold nothing cached at the queue's front
        # (never used, or freed before a block filled); they stay ahead.
        uncached = 0
        for b in self.queue.iter_blocks_after(None):
            if b.block_hash is not None:
                break
            uncached += 1
            if uncached > _MAX_UNCACHED_SCAN:
                return 0
        for b in front:
            self.queue.remove(b)
        ahead = self.queue.popleft_n(uncached) if uncached else []
        self.queue.prepend_n(front)
        self.queue.prepend_n(ahead)
        self.moved += len(front)
        for b in front:
            self.cached[b.block_id] = (b, b.block_hash)
        return len(front)

    def cached_blocks(self) -> int:
        """How many moved blocks are still cached and free: neither reused
        by vLLM (their hash gone or replaced) nor hit by a running request."""
        self.cached = {i: e for i, e in self.cached.items() if e[0].block_hash is e[1] and e[0].ref_cnt == 0}
        return len(self.cached)
