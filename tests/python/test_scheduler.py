"""The dual-queue scheduler and the KV block manager through Python, driven
the way an engine adapter drives them: plan, carry out preemptions, allocate
blocks, report the step, feed phase changes from the router."""
import pytest

import meridian
from meridian import (
    AllocStatus,
    BlockTier,
    DualQueueScheduler,
    KvBlockManager,
    KvBlockManagerOptions,
    Phase,
    ReclaimMode,
    ReleaseKind,
    SchedulerOptions,
    StepCostCoefficients,
    StepCostModel,
    StepLimits,
    WorkKind,
)

THINK, END_THINK, IM_END = 151667, 151668, 151645
WORD = 785


def engine_parts(num_blocks=1024, config_text=""):
    cfg = meridian.parse_config(config_text)
    block_bytes = cfg.kv_memory.block_size_bytes
    kv = KvBlockManager(KvBlockManagerOptions.from_config(cfg, num_blocks * block_bytes))
    sched = DualQueueScheduler(SchedulerOptions.from_config(cfg, num_blocks), StepCostModel.from_config(cfg.scheduler))
    return cfg, sched, kv


def run_step(sched, kv, now_ns, limits=None):
    """One engine step through the core driver; returns the plan and the new clock."""
    driver = meridian.StepDriver(sched, kv)
    plan = driver.plan(limits or StepLimits(), now_ns)
    assert driver.not_run == []  # the scheduler's block accounting matches the pool's
    assert len(driver.released_blocks) == len(plan.preemptions)
    took_ms = plan.stats.predicted_step_ms
    now_ns += int(took_ms * 1e6)
    driver.complete(took_ms, now_ns)
    return plan, now_ns


def test_release_kind_maps_every_reclaim_mode():
    assert meridian.release_kind(ReclaimMode.RECOMPUTE) == ReleaseKind.RECOMPUTE
    assert meridian.release_kind(ReclaimMode.SWAP) == ReleaseKind.SWAP
    assert meridian.release_kind(ReclaimMode.OFFLOAD) == ReleaseKind.OFFLOAD


def test_router_scheduler_and_blocks_together():
    cfg, sched, kv = engine_parts()
    router = meridian.PhaseRouter(cfg, "qwen3")
    router.begin(1, prompt_token_ids=[WORD, THINK])  # the template opened <think>
    router.begin(2, thinking_disabled=True)
    sched.add(1, prompt_tokens=40, phase=router.snapshot(1).phase)
    sched.add(2, prompt_tokens=20, phase=Phase.OUTPUT_DECODE)
    now = 0
    plan, now = run_step(sched, kv, now)
    assert [(w.request_id, w.kind) for w in plan.work] == [(1, WorkKind.PREFILL), (2, WorkKind.PREFILL)]
    assert all(w.completes_prefill for w in plan.work)

    plan, now = run_step(sched, kv, now)
    assert [(w.request_id, w.phase) for w in plan.work] == [(2, Phase.OUTPUT_DECODE), (1, Phase.THINK_DECODE)]

    # Request 1 emits </think>: the router says so, the scheduler moves it
    # ahead of the answers already streaming, its reasoning blocks are demoted.
    ev = router.on_token(1, END_THINK)
    assert ev.kind == meridian.PhaseEventKind.EXIT_THINK
    assert sched.set_phase(1, Phase.OUTPUT_DECODE)
    kv.demote_think_blocks(1)
    plan, now = run_step(sched, kv, now)
    assert [w.request_id for w in plan.work] == [1, 2]
    assert plan.stats.output_batch == 2 and plan.stats.think_batch == 0

    for rid in (1, 2):
        assert sched.finish(rid)
        kv.release(rid, ReleaseKind.FINISHED)
    assert len(sched) == 0
    assert kv.usage.live_blocks == [0, 0, 0]
    assert kv.check_invariants() == ""
    assert sched.counters.steps == 3


def test_plan_outlives_the_next_step():
    _, sched, kv = engine_parts()
    sched.add(7, prompt_tokens=8)
    first, now = run_step(sched, kv, 0)
    run_step(sched, kv, now)
    assert first.step == 1 and first.work[0].request_id == 7 and first.work[0].tokens == 8


def test_view_reports_progress():
    _, sched, kv = engine_parts()
    sched.add(3, prompt_tokens=16, cached_prompt_tokens=8, arrival_ns=5)
    view = sched.view(3)
    assert view.state == meridian.RequestView.State.WAITING and view.context_tokens == 8
    run_step(sched, kv, 10)
    view = sched.view(3)
    assert view.state == meridian.RequestView.State.RUNNING
    assert view.context_tokens == 16 and view.generated_tokens == 1
    assert sched.view(99) is None


def test_memory_pressure_preempts_think_before_answers():
    # 4 blocks of 16 tokens: two requests of one full block each, then both
    # need a second block while only... none is free.
    cfg = meridian.parse_config("")
    opts = SchedulerOptions.from_config(cfg, 2)
    opts.block_tokens = 16
    opts.think_tpot_budget_ms = 80
    sched = DualQueueScheduler(opts, StepCostModel(StepCostCoefficients(10, 2, 0), online=False))
    sched.add(1, prompt_tokens=16, phase=Phase.OUTPUT_DECODE)
    sched.add(2, prompt_tokens=16, phase=Phase.THINK_DECODE)
    limits = StepLimits(free_kv_blocks=2)
    plan = sched.schedule(limits, 0)
    assert len(plan.work) == 2
    sched.complete_step(20, 20_000_000)
    plan = sched.schedule(StepLimits(free_kv_blocks=0), 40_000_000)
    # The answer needs a block: the think request is the victim, recomputed.
    assert [(p.request_id, p.mode) for p in plan.preemptions] == [(2, ReclaimMode.RECOMPUTE)]
    assert [w.request_id for w in plan.work] == [1]
    assert sched.counters.preempted_think == 1 and sched.counters.preempted_output == 0
    assert sched.counters.preemptions_by_phase == [[0, 0, 0], [1, 0, 0]]  # [output, think] x mode


def test_admission_victims_skip_requests_preempted_before_and_keep_the_step_share():
    # ADR-0027 for an engine adapter: think requests with the slack to wait are
    # named, the most slack first (ADR-0036). One re-added after a preemption (the vLLM
    # adapter re-adds a victim when it resumes) is never named again, and
    # max_victims bounds what one step gives over several prompts.
    _, sched, kv = engine_parts(config_text="[scheduler]\npreempt_max_fraction = 1.0\n")
    sched.add(1, prompt_tokens=160)
    sched.add(2, prompt_tokens=160)
    sched.add(3, prompt_tokens=160, preemptions=1)
    now = 0
    for _ in range(40):  # 40 think tokens each: a 3.2 s mean deadline at 80 ms
        _, now = run_step(sched, kv, now)
    assert sched.view(3).generated_tokens == sched.view(1).generated_tokens == 40
    assert sched.step_victim_share() == 3  # preempt_max_fraction 1.0 of the three it knows
    arrived = now - 600_000_000  # waited past half the 1 s TTFT
    one = sched.view(1).context_tokens // 16
    assert sched.admission_victims(arrived, 1, 0, now) in ([1], [2])
    both = sched.admission_victims(arrived, 2 * one, 0, now)
    assert sorted(both) == [1, 2]  # 3 is never named
    assert sched.admission_victims(arrived, 3 * one, 0, now) == []  # only 3 would cover it
    assert sched.admission_victims(arrived, 2 * one, 0, now, max_victims=1) == []
    assert sched.admission_victims(arrived, 1, 0, now, max_victims=0) == []
    assert sched.admission_victims(now - 100_000_000, 1, 0, now) == []  # not waited long enough
    assert sched.counters.admission_preemptions == 3  # the calls that named victims


def test_step_cost_model_learns():
    model = StepCostModel(StepCostCoefficients(base_ms=1, per_token_ms=1, per_kv_token_us=0), online=True)
    for tokens in range(1, 200):
        model.observe(tokens, 0, 5 + 0.05 * tokens)
    assert model.predict_ms(100, 0) == pytest.approx(10, rel=0.05)
    assert not model.observe(10, 0, float("nan"))
    assert model.rejected == 1


def test_block_manager_tiers_limit_and_prefix_cache():
    opts = KvBlockManagerOptions()
    opts.num_blocks = 10
    opts.think_phase_memory_fraction = 0.3
    kv = KvBlockManager(opts)
    assert meridian.think_block_limit(0.3, 10) == 3
    prompt = kv.allocate(1, BlockTier.OUTPUT_CRITICAL, 2, hashes=[11, 12])
    assert prompt.ok and prompt.status == AllocStatus.OK and len(prompt.blocks) == 2
    assert kv.allocate(1, BlockTier.THINK_ACTIVE, 3)
    assert kv.usage.think_headroom == 0  # at the soft share
    over = kv.allocate(1, BlockTier.THINK_ACTIVE, 1)  # the share is soft: the pool is the limit
    assert over and over.status == AllocStatus.OK
    assert kv.usage.live_blocks == [0, 4, 2]
    too_many = kv.allocate(1, BlockTier.THINK_ACTIVE, 5)
    assert not too_many and too_many.status == AllocStatus.OUT_OF_BLOCKS
    assert kv.usage.live_blocks == [0, 4, 2]  # nothing changed by the failed call
    assert len(kv.demote_think_blocks(1)) == 0  # demoted in place, none dropped
    assert kv.usage.live_blocks == [4, 0, 2]
    kv.release(1, ReleaseKind.FINISHED)
    # The next turn's prompt starts with the same two blocks: a prefix hit.
    assert kv.match_prefix([11, 12, 13]) == 2
    assert kv.attach_prefix(2, [11, 12, 13]) == 2
    assert kv.counters.prefix_hit_blocks == 2
    assert kv.counters.demoted_blocks == 4
    assert kv.check_invariants() == ""


def test_kv_prefix_attach_refuses_states_no_engine_reaches():
    """Issue 27: attached twice, a request listed [0, 1, 0, 1] and check_invariants() was clean."""
    _, _, kv = engine_parts(num_blocks=8)
    assert kv.allocate(1, BlockTier.OUTPUT_CRITICAL, 2, [11, 12])
    assert kv.attach_prefix(2, [11, 12]) == 2
    with pytest.raises(ValueError, match="request 2 already holds 2 blocks"):
        kv.attach_prefix(2, [11, 12])
    with pytest.raises(ValueError, match=r"hashes\[1\] repeats hashes\[0\]"):
        kv.attach_prefix(3, [11, 11])
    with pytest.raises(ValueError, match="request id 0 is reserved"):
        kv.attach_prefix(0, [11])
    with pytest.raises(ValueError, match="request id 0 is reserved"):
        kv.allocate(0, BlockTier.THINK_ACTIVE, 1)
    assert kv.blocks_of(2) == kv.blocks_of(1) and len(kv.blocks_of(2)) == 2
    assert kv.blocks_of(3) == []
    assert kv.check_invariants() == ""


def test_bad_input_is_a_clear_error():
    _, sched, kv = engine_parts()
    sched.add(1, prompt_tokens=4)
    with pytest.raises(ValueError, match="request 1 is already scheduled"):
        sched.add(1, prompt_tokens=4)
    with pytest.raises(ValueError, match="prompt_tokens must be >= 1"):
        sched.add(2, prompt_tokens=0)
    with pytest.raises(ValueError, match="cached_prompt_tokens 9 exceeds prompt_tokens 4"):
        sched.add(3, prompt_tokens=4, cached_prompt_tokens=9)
    with pytest.raises(ValueError, match="computed_prompt_tokens 5 exceeds prompt_tokens 4"):
        sched.add(3, prompt_tokens=4, computed_prompt_tokens=5)
    bad = SchedulerOptions()
    bad.preempt_max_fraction = 1.5
    with pytest.raises(ValueError, match=r"scheduler\.preempt_max_fraction must be in \(0, 1\]; got 1.5"):
        DualQueueScheduler(bad, StepCostModel(StepCostCoefficients()))
    with pytest.raises(ValueError, match="forgetting_factor"):
        StepCostModel(StepCostCoefficients(), online=True, forgetting_factor=0)
    with pytest.raises(ValueError, match="the KV capacity holds 0 blocks"):
        KvBlockManager(KvBlockManagerOptions())
    with pytest.raises(IndexError, match="block 5000 out of range: the manager has 1024 blocks"):
        kv.tier_of(5000)
    with pytest.raises(TypeError):
        sched.add(-1, prompt_tokens=4)  # ids are unsigned 64-bit


def test_ttft_deferrals_names_prompts_that_cannot_meet_their_ttft():
    # ADR-0028: 1 ms a prompt token, a 10 ms TTFT. In queue order 8 + 3 ms passes the second
    # prompt's deadline: the longest kept so far (the first) yields, the short ones make it.
    opts = SchedulerOptions()
    opts.ttft_slo_ms = 10.0
    sched = DualQueueScheduler(opts, StepCostModel(StepCostCoefficients(5, 1, 0), online=False))
    ms = 1_000_000
    assert sched.ttft_deferrals([0, 0, 0], [8, 3, 3], [False] * 3, 0) == [0]
    assert sched.ttft_deferrals([0, 0], [3, 3], [False, False], 0) == []
    assert sched.ttft_deferrals([-5 * ms, 0], [6, 6], [False, False], 0) == [0]  # arrived 5 ms ago
    assert sched.counters.ttft_deferred == 2
    assert sched.ttft_deferrals([0, 0, 0], [8, 3, 3], [True, False, False], 0) == [0]
    assert sched.counters.ttft_deferred == 2  # deferred before: counted once
    with pytest.raises(ValueError, match=r"one entry per prompt \(got 2, 1 and 2\)"):
        sched.ttft_deferrals([0, 0], [3], [False, False], 0)
    opts.ttft_triage = False
    off = DualQueueScheduler(opts, StepCostModel(StepCostCoefficients(5, 1, 0), online=False))
    assert off.ttft_deferrals([0, 0, 0], [8, 3, 3], [False] * 3, 0) == []
