"""meridian.vllm.Scheduler stepped as vLLM steps it on a GPU: two steps in
flight (async scheduling, vLLM's default there), against the real vLLM 0.32
scheduler classes (vllm_rig.TwoInFlight). Think decodes are held, outputs are
exact, held requests stay preemptable, answers are never victims while think
requests hold KV, and the core learns from what vLLM ran."""
from __future__ import annotations

import time

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import (  # noqa: E402
    END_THINK, EOS, THINK, WORD, AsyncScheduler, RequestStatus, TwoInFlight, build, prompt, request, script,
    slow_model_config)

from meridian.vllm import Scheduler  # noqa: E402
from meridian.vllm._setup import MeridianSetupError  # noqa: E402

import meridian  # noqa: E402

OUTPUT = meridian.Phase.OUTPUT_DECODE
THINK_PHASE = meridian.Phase.THINK_DECODE


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)


def collect(outputs, into: dict[str, list[int]]) -> None:
    """The tokens vLLM delivered to clients, per request."""
    if not outputs:
        return
    for eco in outputs.values():
        for o in eco.outputs:
            into.setdefault(o.request_id, []).extend(o.new_token_ids)


def think_and_answer_workload(sched, n_think: int = 24, n_answer: int = 4, think_len: int = 60):
    tokens = {}
    for i in range(n_think):
        sched.add_request(request(f"t{i}", prompt(16, i)))
        tokens[f"t{i}"] = [THINK] + [WORD + (i + j) % 7 for j in range(think_len)] + [END_THINK, WORD, WORD, EOS]
    for i in range(n_answer):
        sched.add_request(request(f"a{i}", prompt(16, 100 + i)))
        tokens[f"a{i}"] = [WORD + 11] * (think_len + 40) + [EOS]
    return tokens


def run_two_in_flight(sched, tokens: dict[str, list[int]], max_steps: int = 3000):
    stepper = TwoInFlight(sched, script(tokens))
    delivered: dict[str, list[int]] = {}
    per_step: list[set[str]] = []
    for _ in range(max_steps):
        if not sched.requests:
            break
        out, outputs = stepper.step()
        per_step.append(set(out.num_scheduled_tokens))
        collect(outputs, delivered)
        if not out.total_num_scheduled_tokens:
            # Nothing could run (a grammar still compiling in vLLM's thread pool): an engine's
            # loop lets wall time pass here; 1,500 empty steps can outrun the compile.
            time.sleep(0.001)
    stepper.drain()
    assert not sched.requests, "every request finished"
    return delivered, per_step


def test_think_decodes_are_held_with_two_steps_in_flight_and_outputs_are_exact(tmp_path, monkeypatch):
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    tokens = think_and_answer_workload(sched)
    delivered, per_step = run_two_in_flight(sched, tokens)
    stats = sched.meridian_stats()
    assert stats["throttled_decodes"] > 100
    assert stats["fallbacks"] == 0
    # Held requests really sat steps out while answers streamed.
    assert any(len([r for r in s if r.startswith("t")]) < 24 and any(r.startswith("a") for r in s)
               for s in per_step)
    # Exact: each request delivered its script, no token lost, repeated or reordered.
    assert delivered == tokens


def test_stock_async_scheduler_holds_nothing_in_the_same_scenario(tmp_path, monkeypatch):
    """The baseline (so the test above can fail): stock vLLM schedules every
    running request every step."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(AsyncScheduler)
    tokens = think_and_answer_workload(sched)
    delivered, per_step = run_two_in_flight(sched, tokens)
    assert delivered == tokens
    meridian_sched = build(Scheduler)
    run_two_in_flight(meridian_sched, think_and_answer_workload(meridian_sched))
    # Meridian's run takes more steps: think decodes sat some out.
    assert meridian_sched.meridian_stats()["steps"] > len(per_step)


def test_held_requests_stay_in_the_running_list_and_keep_their_kv(tmp_path, monkeypatch):
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    tokens = think_and_answer_workload(sched)
    stepper = TwoInFlight(sched, script(tokens))
    seen_held = 0
    for _ in range(30):
        out, _ = stepper.step()
        scheduled = set(out.num_scheduled_tokens)
        for r in sched.running:
            if r.request_id not in scheduled and r.request_id.startswith("t"):
                seen_held += 1
                assert r.status == RequestStatus.RUNNING
                assert sched.kv_cache_manager.get_block_ids(r.request_id)[0], "a held request keeps its KV"
    assert seen_held > 0
    assert len(sched.running) == 28


def run_pressure_two_in_flight(cls, tmp_path, monkeypatch):
    """24 think and 4 answer requests with KV for fewer, stepped two in
    flight, with the slow model so think decodes are held while answers
    stream: vLLM must preempt."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(cls, num_blocks=60)
    victims: list[tuple[str, bool, bool, bool]] = []  # (id, answer victim, think holds KV, victim was held)

    def thinking(r) -> bool:  # phases read from the tokens, the same way for both classes
        return THINK in r.output_token_ids and END_THINK not in r.output_token_ids

    orig = sched._preempt_request

    def record(req, *a, **k):
        answer = req.request_id.startswith("a") or END_THINK in req.output_token_ids
        think_holds_kv = any(thinking(r) for r in sched.running if r is not req)
        # schedule() advanced current_step; a held request is eligible only later.
        was_held = req.next_decode_eligible_step > sched.current_step
        victims.append((req.request_id, answer, think_holds_kv, was_held))
        return orig(req, *a, **k)

    sched._preempt_request = record
    tokens = think_and_answer_workload(sched)
    delivered, _ = run_two_in_flight(sched, tokens)
    assert delivered == tokens, "outputs exact through preemption and recompute"
    return sched, victims


def test_held_think_requests_are_victims_and_no_answer_is_preempted_while_think_holds_kv(tmp_path, monkeypatch):
    sched, victims = run_pressure_two_in_flight(Scheduler, tmp_path, monkeypatch)
    assert victims, "the scenario must exhaust KV"
    bad = [v for v in victims if v[1] and v[2]]
    assert not bad, f"answer-phase victims while think requests held KV: {bad}"
    assert any(v[3] for v in victims), "a held think request was taken as a victim"
    stats = sched.meridian_stats()
    assert stats["throttled_decodes"] > 0
    assert stats["fallbacks"] == 0


def test_stock_async_scheduler_preempts_answers_in_the_same_scenario(tmp_path, monkeypatch):
    _, victims = run_pressure_two_in_flight(AsyncScheduler, tmp_path, monkeypatch)
    assert [v for v in victims if v[1] and v[2]], "stock vLLM takes running[-1], answer-phase or not"


def test_core_learns_step_times_from_what_vllm_ran(tmp_path, monkeypatch):
    """Two in flight, each step's time is observed when its output comes
    back, with the features vLLM scheduled (prefill included): no sample is
    rejected and the learned model follows the clock."""
    path = tmp_path / "meridian-test.toml"
    path.write_text("[scheduler]\nstep_cost_online = true\n")
    monkeypatch.setenv("MERIDIAN_CONFIG", str(path))
    sched = build(Scheduler)
    m = sched.meridian
    clock = {"ns": 0}
    m.clock_ns = lambda: clock["ns"]
    tokens = think_and_answer_workload(sched, n_think=8, n_answer=2, think_len=40)
    stepper = TwoInFlight(sched, script(tokens))
    per_token_ms, base_ms = 0.05, 4.0
    for _ in range(400):
        if not sched.requests:
            break
        out, _ = stepper.step()
        # The step scheduled now ends after its own cost (two in flight:
        # output-to-output), as on a GPU whose queue never drains.
        clock["ns"] += int((base_ms + per_token_ms * out.total_num_scheduled_tokens) * 1e6)
    stepper.drain()
    stats = sched.meridian_stats()
    assert stats["step_times_observed"] > 50
    assert m.core.counters.rejected_step_times == 0
    predicted = m.core.cost_model.predict_ms(300, 0)
    assert predicted == pytest.approx(base_ms + per_token_ms * 300, rel=0.35)


def test_decodes_vllm_ran_beyond_the_plan_reach_the_core(tmp_path, monkeypatch):
    """A request marked no-throttle runs every step even when the plan leaves
    it out: the core counts each decode vLLM ran, planned or not."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    for i in range(24):
        args = {"meridian": {"throttle": False}} if i == 0 else None
        sched.add_request(request(f"t{i}", prompt(16, i), extra_args=args))
    sched.add_request(request("a", prompt(16, 99)))
    stepper = TwoInFlight(sched, script({**{f"t{i}": [THINK] + [WORD] * 500 for i in range(24)},
                                         "a": [WORD] * 500}))
    runs = 0
    for _ in range(40):
        out, _ = stepper.step()
        runs += "t0" in out.num_scheduled_tokens
    m = sched.meridian
    view = m.core.view(m.mid_of["t0"])
    assert m.stats["throttled_decodes"] > 0
    # Every step ran t0; the core saw each of its decodes (its first token
    # came from the prefill step, which the core does not plan).
    assert runs == 40
    assert view.generated_tokens >= runs - 2


def test_a_preempted_requests_dropped_output_is_not_fed_to_the_router():
    """vLLM drops the in-flight output of a request preempted in drop mode (a
    KV connector that delivers KV); a </think> in it must not flip the phase."""
    sched = build(Scheduler)
    sched.add_request(request("t", prompt(16, 1)))
    sched.add_request(request("u", prompt(16, 2)))
    tokens = {"t": [THINK] + [WORD] * 3 + [END_THINK] + [WORD] * 5 + [EOS],
              "u": [THINK] + [WORD] * 30 + [EOS]}
    stepper = TwoInFlight(sched, script(tokens))
    for _ in range(4):  # prefill, then <think> and three think tokens delivered
        stepper.step()
    m = sched.meridian
    assert m.phase[m.mid_of["t"]] == THINK_PHASE
    r = sched.requests["t"]
    assert r.num_output_placeholders > 0  # its next token (</think>) is in flight
    sched.running.remove(r)
    sched._preempt_request(r, 0.0, drop_stale_output=True)
    stepper.step()  # applies the in-flight step: vLLM drops t's </think>
    assert END_THINK not in sched.requests["t"].output_token_ids
    assert m.phase[m.mid_of["t"]] == THINK_PHASE
    assert m.stats["fallbacks"] == 0


def test_a_resumable_session_is_parked_and_resumes_without_fallback():
    sched = build(Scheduler)
    r = request("s", prompt(16, 3))
    r.resumable = True
    sched.add_request(r)
    sched.add_request(request("o", prompt(16, 4)))
    tokens = {"s": [THINK, WORD, END_THINK, WORD, EOS, THINK, WORD, WORD, END_THINK, WORD, EOS],
              "o": [WORD] * 40 + [EOS]}
    stepper = TwoInFlight(sched, script(tokens))
    for _ in range(10):
        stepper.step()
    m = sched.meridian
    s = sched.requests["s"]
    assert s.status == RequestStatus.WAITING_FOR_STREAMING_REQ
    assert m.stats["sessions_parked"] == 1
    assert m.mid_of["s"] not in m.in_core
    # The next input chunk arrives: the session resumes and is tracked again.
    nxt = request("s", prompt(8, 5))
    nxt.resumable = True
    sched.add_request(nxt)
    for _ in range(12):
        stepper.step()
    assert m.stats["fallbacks"] == 0
    # The second turn was tracked: its </think> was seen, and it parked again.
    assert m.stats["phase_exits"] == 2
    assert m.stats["sessions_parked"] == 2


def test_granite_text_markers_are_refused_at_start_up(monkeypatch):
    monkeypatch.setenv("MERIDIAN_MODEL", "granite_3_2")
    with pytest.raises(MeridianSetupError, match="marks reasoning with text, not token ids"):
        build(Scheduler, reasoning_parser=None)


def test_eos_is_exact_for_answers_under_two_in_flight():
    """Chat requests only: Meridian changes nothing vLLM delivers."""
    sched = build(Scheduler)
    tokens = {}
    for i in range(6):
        sched.add_request(request(f"c{i}", prompt(20, i)))
        tokens[f"c{i}"] = [WORD + i] * (10 + i) + [EOS]
    delivered, _ = run_two_in_flight(sched, tokens)
    assert delivered == tokens


def test_chat_prompts_are_admitted_ahead_of_waiting_reasoning_prompts():
    """Meridian's admission lanes in vLLM's FCFS queue: a reasoning prompt
    (the prompt opened a think block) that has not started waits behind a
    chat prompt that arrived later; stock vLLM admits in arrival order."""
    def admitted_order(cls) -> list[str]:
        sched = build(cls, max_num_seqs=1)
        sched.add_request(request("first", prompt(16, 1)))
        for i in range(3):
            sched.add_request(request(f"r{i}", prompt(16, 10 + i) + [THINK]))
        sched.add_request(request("chat", prompt(16, 20)))
        tokens = {"first": [WORD] * 3 + [EOS], "chat": [WORD] * 3 + [EOS],
                  **{f"r{i}": [WORD, END_THINK, WORD, EOS] for i in range(3)}}
        stepper = TwoInFlight(sched, script(tokens))
        order: list[str] = []
        for _ in range(200):
            if not sched.requests:
                break
            out, _ = stepper.step()
            order.extend(r.req_id for r in out.scheduled_new_reqs)
        stepper.drain()
        return order

    assert admitted_order(Scheduler) == ["first", "chat", "r0", "r1", "r2"]
    assert admitted_order(AsyncScheduler) == ["first", "r0", "r1", "r2", "chat"]


def test_speculative_decoding_two_in_flight_never_schedules_drafts_the_runner_does_not_have(tmp_path, monkeypatch):
    """Async + speculative decoding: the runner fills a request's draft
    placeholders (-1) from the previous step's drafts, so a request that sat
    the previous step out must not come back with placeholders. Held think
    requests drop theirs (as vLLM does at preemption); outputs stay exact."""
    slow_model_config(tmp_path, monkeypatch)

    def run(cls):
        sched = build(cls, spec_tokens=2)
        tokens = think_and_answer_workload(sched, think_len=40)
        cursor = {rid: 0 for rid in tokens}

        def sampled(r, drafts: int) -> list[int]:
            # Every draft accepted, plus the bonus token, up to the script's end.
            rid = r.request_id
            take = tokens[rid][cursor[rid]:cursor[rid] + drafts + 1]
            cursor[rid] += len(take)
            return take or [tokens[rid][-1]]

        stepper = TwoInFlight(sched, script({}), sampled=sampled)
        delivered: dict[str, list[int]] = {}
        previous: set[str] = set()
        for _ in range(2000):
            if not sched.requests:
                break
            out, outputs = stepper.step()
            for rid, drafts in out.scheduled_spec_decode_tokens.items():
                if -1 in drafts:
                    assert rid in previous, f"{rid} scheduled with placeholder drafts after sitting a step out"
            previous = set(out.num_scheduled_tokens)
            collect(outputs, delivered)
        stepper.drain()
        assert not sched.requests
        return sched, delivered, tokens

    sched, delivered, tokens = run(Scheduler)
    assert delivered == tokens
    assert sched.meridian_stats()["throttled_decodes"] > 0
    assert sched.meridian_stats()["fallbacks"] == 0


def test_with_a_kv_connector_dropped_outputs_never_reach_the_router(tmp_path, monkeypatch):
    """A KV connector (vLLM's ExampleConnector) makes vLLM drop a victim's
    in-flight output. Under KV pressure, two in flight, with think decodes
    held: no fallback, everything finishes, and the router's phase exits are
    exactly the </think> tokens vLLM delivered."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler, num_blocks=60, kv_connector_dir=str(tmp_path / "kv"))
    assert sched.requires_kv_delivery
    tokens = think_and_answer_workload(sched)
    stepper = TwoInFlight(sched, script(tokens))
    delivered: dict[str, list[int]] = {}
    for _ in range(4000):
        if not sched.requests:
            break
        _, outputs = stepper.step()
        collect(outputs, delivered)
    stepper.drain()
    stats = sched.meridian_stats()
    assert not sched.requests
    assert stats["fallbacks"] == 0
    assert stats["preempted_think"] > 0
    assert stats["phase_exits"] == sum(END_THINK in toks for toks in delivered.values())


def test_after_a_preemption_a_reasoning_prompt_waits_for_the_pool_to_recover():
    """The core's admission lanes on vLLM's pool: once vLLM preempted, a
    reasoning prompt (and a victim) waits until the free blocks pass the high
    watermark (running think requests' growth plus 2 % of the pool). Stock
    vLLM admits it as soon as it fits, to be preempted again."""
    def admitted_at(cls, late_prompt: list[int]) -> tuple[int, int, int]:
        sched = build(cls, num_blocks=100)
        for i in range(12):
            sched.add_request(request(f"t{i}", prompt(16, i)))
        tokens = {f"t{i}": [THINK] + [WORD] * (100 + 20 * i) + [END_THINK, WORD, EOS] for i in range(12)}
        tokens["late"] = [WORD] * 5 + [EOS]
        stepper = TwoInFlight(sched, script(tokens))
        preempted_at = None
        late_at = None
        for n in range(1, 2000):
            if not sched.requests:
                break
            out, _ = stepper.step()
            if preempted_at is None and out.preempted_req_ids:
                preempted_at = n
                sched.add_request(request("late", late_prompt))
            if late_at is None and "late" in {r.req_id for r in out.scheduled_new_reqs}:
                late_at = n
        stepper.drain()
        assert not sched.requests and preempted_at is not None and late_at is not None
        held = sched.meridian_stats()["admission_held_steps"] if cls is Scheduler else 0
        return late_at - preempted_at, held, len(sched.running)

    reasoning_prompt = prompt(16, 99) + [THINK]
    stock_wait, _, _ = admitted_at(AsyncScheduler, reasoning_prompt)
    meridian_wait, held, _ = admitted_at(Scheduler, reasoning_prompt)
    assert held > 0 and meridian_wait > stock_wait


def test_structured_output_requests_are_held_and_their_grammar_sees_exact_tokens(tmp_path, monkeypatch):
    """Structured output under async with holds: think requests whose answer
    must match a regex sit steps out; the grammar (xgrammar, compiled by
    vLLM's StructuredOutputManager) accepts every delivered answer token and
    terminates."""
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher

    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    a, b = 64, 65  # "a", "b" in the Qwen3 vocabulary
    tokens = think_and_answer_workload(sched, n_think=20, n_answer=4, think_len=30)
    constrained = []
    for i in range(4):
        rid = f"s{i}"
        params = SamplingParams(max_tokens=200, stop_token_ids=[EOS],
                                structured_outputs=StructuredOutputsParams(regex="[ab]+"))
        params.structured_outputs._backend = "xgrammar"  # what vLLM's input processor resolves "auto" to
        req = Request(request_id=rid, prompt_token_ids=prompt(16, 200 + i), sampling_params=params,
                      pooling_params=None, block_hasher=get_request_block_hasher(16, sha256))
        sched.structured_output_manager.grammar_init(req)  # as EngineCore.add_request does
        sched.add_request(req)
        constrained.append(req)
        tokens[rid] = [THINK] + [WORD] * 30 + [END_THINK] + [a, b, a, b][: i + 1] + [EOS]
    delivered, _ = run_two_in_flight(sched, tokens, max_steps=1500)
    assert delivered == tokens
    # The grammar took every answer token and reached its end (a rejected token would not).
    assert all(r.structured_output_request.grammar.is_terminated() for r in constrained)
    stats = sched.meridian_stats()
    assert stats["throttled_decodes"] > 0 and stats["fallbacks"] == 0


def thinking(sched, n: int, think_len: int) -> TwoInFlight:
    """`n` think requests (16-token prompts) decoding two steps in flight,
    8 steps in: the steady state the prefill-estimate tests start from."""
    tokens = {f"t{i}": [THINK] + [WORD] * think_len for i in range(n)}
    for i in range(n):
        sched.add_request(request(f"t{i}", prompt(16, i)))
    stepper = TwoInFlight(sched, script(tokens))
    for _ in range(8):
        stepper.step()
    return stepper


def test_a_waiting_prompt_takes_the_prefill_budget_before_optional_think(tmp_path, monkeypatch):
    """ADR-0025 inside vLLM: the core does not track a prompt before its first
    token, so the adapter tells it what vLLM will prefill (the waiting prompts,
    up to the budget and the free KV); that room is taken from optional think,
    whose decodes are held, and the prompt gets the step's prefill budget."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    m = sched.meridian
    stepper = thinking(sched, 6, 400)
    assert m.core.last_stats.engine_prefill_tokens == 0  # nothing waits
    held_before = m.stats["throttled_decodes"]
    sched.add_request(request("long", prompt(600, 99)))
    out, _ = stepper.step()
    stats = m.core.last_stats
    assert stats.engine_prefill_tokens == min(600, stats.prefill_budget_tokens) > 0
    assert out.num_scheduled_tokens.get("long", 0) > 0
    assert m.stats["throttled_decodes"] > held_before  # optional think made room for it
    assert m.stats["fallbacks"] == 0
    stepper.drain()


def test_a_waiting_prompt_vllm_cannot_admit_holds_no_think_decode(tmp_path, monkeypatch):
    """The prefill estimate follows vLLM's admission: a prompt whose blocks do
    not fit (vLLM checks the whole prompt, scheduler_reserve_full_isl) waits,
    so it takes no room from think decodes; counting it held every think
    request with nothing run in its place (the engine replay's small-KV run
    livelocked on a frozen clock)."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler, num_blocks=100)  # 1,600 tokens
    m = sched.meridian
    stepper = thinking(sched, 4, 150)
    assert sched.scheduler_reserve_full_isl  # vLLM's default
    held_before = m.stats["throttled_decodes"]
    sched.add_request(request("long", prompt(1500, 99)))  # 94 blocks: more than are free
    for _ in range(6):
        out, _ = stepper.step()
        assert m.core.last_stats.engine_prefill_tokens == 0
        assert "long" not in out.num_scheduled_tokens
        assert {f"t{i}" for i in range(4)} <= set(out.num_scheduled_tokens)
    assert m.stats["throttled_decodes"] == held_before
    assert m.stats["fallbacks"] == 0


def test_a_prompt_vllm_admits_while_free_blocks_are_below_the_think_growth_is_counted(tmp_path, monkeypatch):
    """vLLM keeps no reserve for the running think requests' growth: with
    fewer free blocks than that growth (12 think requests x 8 blocks here), a
    prompt whose blocks fit is still admitted, so the estimate counts it. It
    read 0 while the cap took that growth off the free blocks: in the engine
    replay's KV-full minutes, steps planned within the answers' ceiling ran
    up to 1.8 times longer (docs/replay.md)."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler, num_blocks=100)  # 1,600 tokens
    m = sched.meridian
    stepper = thinking(sched, 12, 150)
    free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
    assert free < m.core.last_stats.think_queue_depth * m.growth_blocks  # below the growth
    sched.add_request(request("after", prompt(64, 78)))  # 4 blocks: they fit
    out, _ = stepper.step()
    assert out.num_scheduled_tokens.get("after") == 64
    assert m.core.last_stats.engine_prefill_tokens == 64
    assert m.stats["fallbacks"] == 0
    stepper.drain()


def test_a_request_vllm_skips_this_step_holds_no_think_decode(tmp_path, monkeypatch):
    """vLLM's queue passes over a request that cannot start yet (here a
    structured-output request whose grammar is still compiling: it stays
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR) and admits what is behind it; the
    prefill estimate passes over it too, so it holds no think decode. Counted,
    it held every think request for as long as the grammar compiled (a loaded
    CI machine ran out of steps in the structured-output test)."""
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher
    from vllm.v1.request import Request, RequestStatus

    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    m = sched.meridian
    stepper = thinking(sched, 4, 150)
    held_before = m.stats["throttled_decodes"]
    params = SamplingParams(max_tokens=20, structured_outputs=StructuredOutputsParams(regex="[ab]+"))
    params.structured_outputs._backend = "xgrammar"
    compiling = Request(request_id="g", prompt_token_ids=prompt(600, 77), sampling_params=params,
                        pooling_params=None, block_hasher=get_request_block_hasher(16, sha256))
    sched.add_request(compiling)  # no grammar_init: its grammar never becomes ready
    assert compiling.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
    for _ in range(6):
        out, _ = stepper.step()
        assert m.core.last_stats.engine_prefill_tokens == 0
        assert "g" not in out.num_scheduled_tokens
        assert {f"t{i}" for i in range(4)} <= set(out.num_scheduled_tokens)
    assert m.stats["throttled_decodes"] == held_before
    # What waits behind it is still counted: vLLM admits it this step.
    sched.add_request(request("after", prompt(64, 78)))
    out, _ = stepper.step()
    assert m.core.last_stats.engine_prefill_tokens == 64 and out.num_scheduled_tokens.get("after") == 64
    assert m.stats["fallbacks"] == 0


def test_a_victims_re_prefill_takes_only_the_room_the_answers_leave(tmp_path, monkeypatch):
    """ADR-0037 inside vLLM: the prefill floor is for prompts before their
    first token. With 60 answers streaming, the slow model's steps (3 + 1.5 x
    60 ms) pass even the prefill's borrowed ceiling (0.9 x 5 x 20 ms), so a
    think victim that had tokens gets no floor: vLLM's step budget is the
    decodes alone and the victim waits in vLLM's queue. Once half the answers
    finish and leave room, it re-prefills and every output is exact. Before
    ADR-0037 the floor (16 tokens here) went to it every step, on top of a
    ceiling the answers already filled."""
    slow_model_config(tmp_path, monkeypatch)
    sched = build(Scheduler)
    m = sched.meridian
    tokens = {"t": [THINK] + [WORD] * 120 + [END_THINK, WORD, EOS]}
    sched.add_request(request("t", prompt(16, 1)))
    for i in range(60):  # answers: half finish after 30 tokens, the rest after 150
        tokens[f"a{i}"] = [WORD + 1] * (30 if i < 30 else 150) + [EOS]
        sched.add_request(request(f"a{i}", prompt(16, 10 + i)))
    stepper = TwoInFlight(sched, script(tokens))
    delivered: dict[str, list[int]] = {}
    for _ in range(6):
        collect(stepper.step()[1], delivered)
    victim = sched.requests["t"]
    assert victim.num_output_tokens > 0 and victim.status == RequestStatus.RUNNING
    # Preempted as the adapter's admission pause preempts (vLLM's own call; it
    # puts the victim at the front of the waiting queue).
    sched.running.remove(victim)
    sched._preempt_request(victim, time.monotonic(), drop_stale_output=True)
    withheld_steps = 0
    while len(sched.running) > 31:
        out, outputs = stepper.step()
        collect(outputs, delivered)
        withheld_steps += 1
        assert m.limits.engine_resume_tokens > 0  # counted as a victim's re-prefill
        assert m.core.last_stats.prefill_budget_tokens == 0
        assert "t" not in out.num_scheduled_tokens, "the victim took a floor the answers' ceiling has no room for"
    assert withheld_steps >= 20
    for _ in range(400):
        if not sched.requests:
            break
        collect(stepper.step()[1], delivered)
    stepper.drain()
    assert delivered == tokens, "the victim resumed once answers left room, and every output is exact"
    assert m.stats["fallbacks"] == 0
