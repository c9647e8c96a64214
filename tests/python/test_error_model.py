"""Issue 15 at the Python boundary: one error model (each Meridian error maps
to one Python exception type), validation of hand-built configs wherever
the bindings take them, the batch router path for prose-marker models,
counters as snapshots, and a step-cost model that one bad timing cannot
poison."""
import math

import pytest

import meridian
from meridian import _meridian

# --- one error model ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "python_type"),
    [
        ("config", ValueError),
        ("tokenizer", ValueError),
        ("trace", ValueError),
        ("invalid_argument", ValueError),
        ("not_found", KeyError),
        ("out_of_range", IndexError),
        ("kernel", meridian.KernelError),
        ("other", RuntimeError),
    ],
)
def test_each_meridian_error_maps_to_one_python_type(kind, python_type):
    with pytest.raises(python_type, match="boom") as err:
        _meridian._raise_error(kind, "boom")
    if python_type is RuntimeError:
        assert not isinstance(err.value, (ValueError, meridian.KernelError))


def test_argument_errors_are_value_errors_not_runtime_errors():
    router = meridian.PhaseRouter(meridian.MeridianConfig.defaults(), "qwen3")
    with pytest.raises(ValueError, match="tokens .* must match ids"):
        router.on_tokens([1, 2], [785])
    with pytest.raises(ValueError, match="texts"):
        router.on_tokens([1, 2], [785, 785], texts=["a"])
    with pytest.raises(ValueError, match="max_idle_s must be >= 0"):
        router.reap_idle(-1.0)
    with pytest.raises(ValueError, match="max_idle_s must be >= 0"):
        router.reap_idle(math.nan)
    assert router.reap_idle(1e300) == 0  # "never": no undefined float -> int conversion
    with pytest.raises(ValueError, match="not valid JSON"):
        meridian.TokenizerVocab.from_json("{")


def test_an_index_outside_the_pool_is_an_index_error():
    options = meridian.KvBlockManagerOptions()
    options.num_blocks = 8
    kv = meridian.KvBlockManager(options)
    with pytest.raises(IndexError, match="block 8 out of range"):
        kv.tier_of(8)


# --- validation at every entry point ----------------------------------------


def test_router_rejects_a_hand_built_config_that_was_never_validated():
    # The example: accepted by PhaseRouter before.
    cfg = meridian.MeridianConfig.defaults()
    cfg.scheduler.min_think_tokens = 10
    cfg.scheduler.max_think_tokens = 0
    with pytest.raises(ValueError, match=r"scheduler\.min_think_tokens must be < scheduler\.max_think_tokens"):
        meridian.PhaseRouter(cfg, "qwen3")
    with pytest.raises(ValueError, match=r"scheduler\.min_think_tokens"):
        meridian.SchedulerOptions.from_config(cfg, 1024)


def test_router_rejects_an_invalid_model():
    cfg = meridian.MeridianConfig.defaults()
    model = cfg.model("qwen3")
    model.name = "mine"
    model.eos_token_ids = list(model.think_end_token_ids)  # one id, two roles
    cfg.set_model(model)
    with pytest.raises(ValueError, match=r"model\.mine\.eos_token_ids\[0\]"):
        meridian.PhaseRouter(cfg, "mine")


def test_sections_are_validated_where_they_are_used():
    cfg = meridian.MeridianConfig.defaults()
    cfg.scheduler.step_cost_base_ms = -1.0
    with pytest.raises(ValueError, match=r"scheduler\.step_cost_base_ms"):
        meridian.StepCostModel.from_config(cfg.scheduler)
    cfg = meridian.MeridianConfig.defaults()
    cfg.kv_memory.think_phase_memory_fraction = 1.5
    with pytest.raises(ValueError, match=r"kv_memory\.think_phase_memory_fraction"):
        meridian.KvBlockManagerOptions.from_config(cfg, 1 << 30)
    cfg = meridian.MeridianConfig.defaults()
    cfg.entropy.ema_alpha = 0.0
    with pytest.raises(ValueError, match=r"entropy\.ema_alpha"):
        meridian.EntropyProbe(cfg, model="qwen3")
    options = meridian.SchedulerOptions()
    options.think_batch_multiplier = math.inf
    with pytest.raises(ValueError, match=r"scheduler\.think_batch_multiplier must be finite"):
        meridian.DualQueueScheduler(options, meridian.StepCostModel(meridian.StepCostCoefficients()))


# --- the batch path carries decoded text ------------------------------------


def test_granite_changes_phase_through_on_tokens():
    router = meridian.PhaseRouter(meridian.MeridianConfig.defaults(), "granite_3_2")
    router.begin(1)
    router.begin(2)
    events = router.on_tokens([1, 2], [500, 501], texts=["Here is my thought process:", "Hello"])
    assert [(e.request_id, e.kind) for e in events] == [(1, meridian.PhaseEventKind.ENTER_THINK)]
    events = router.on_tokens([1], [502], texts=[" Done. Here is my response:"])
    assert [e.kind for e in events] == [meridian.PhaseEventKind.EXIT_THINK]
    assert router.snapshot(1).phase == meridian.Phase.OUTPUT_DECODE
    assert router.snapshot(2).phase == meridian.Phase.OUTPUT_DECODE  # answered without reasoning
    # Without texts, a token-id model's batch path is unchanged.
    assert router.on_tokens([1], [503]) == []


# --- counters are snapshots ---------------------------------------------------


def test_every_counter_object_is_a_snapshot():
    cfg = meridian.parse_config("")
    blocks = 256
    kv = meridian.KvBlockManager(meridian.KvBlockManagerOptions.from_config(cfg, blocks * cfg.kv_memory.block_size_bytes))
    sched = meridian.DualQueueScheduler(
        meridian.SchedulerOptions.from_config(cfg, blocks), meridian.StepCostModel.from_config(cfg.scheduler)
    )
    router = meridian.PhaseRouter(cfg, "qwen3")
    sched_counters, kv_counters, usage = sched.counters, kv.counters, kv.usage
    router_counters, model, options = router.counters(), sched.cost_model, kv.options

    sched.add(1, prompt_tokens=32)
    driver = meridian.StepDriver(sched, kv)
    driver.plan(meridian.StepLimits(), 0)
    driver.complete(5.0, 5_000_000)
    router.begin(1)

    assert (sched_counters.steps, sched.counters.steps) == (0, 1)
    assert (kv_counters.allocated_blocks, usage.free_blocks) == (0, blocks)
    assert kv.counters.allocated_blocks > 0 and kv.usage.free_blocks < blocks
    assert (router_counters.begun, router.counters().begun) == (0, 1)
    assert (model.observations, sched.cost_model.observations) == (0, 1)
    options.num_blocks = 1  # a copy: the manager is unaffected
    assert kv.options.num_blocks == blocks


# --- step-cost poisoning ------------------------------------------------------


def test_one_outlier_cannot_poison_the_step_cost_model():
    model = meridian.StepCostModel(meridian.StepCostCoefficients(6.0, 0.03, 0.044))
    for _ in range(200):
        model.observe(64, 128_000, 20.0)
    assert model.observe(64, 128_000, 60_000.0)
    assert model.clamped == 1
    assert model.predict_ms(64, 128_000) <= 40.0
    assert model.observe(64, 128_000, 1e308)
    assert model.predict_ms(64, 128_000) <= 80.0
    for _ in range(10):
        model.observe(64, 128_000, 20.0)
    assert model.predict_ms(64, 128_000) == pytest.approx(20.0, abs=2.0)
    assert not model.observe(64, 128_000, math.inf)
    assert model.rejected == 1
