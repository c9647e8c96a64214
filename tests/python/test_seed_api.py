"""The seeds' Python API (docs/api-python.md#the-seeds-forms): their examples, nearly
verbatim, on a small meridian.toml and NumPy logits, checked against real results;
the compatibility forms' errors; the removed V0 plugin."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import meridian
from meridian import EntropyProbe, KernelError, load_config

VOCAB = 151_936  # the seeds' Qwen3 vocabulary
END_THINK = 151668

# EAT sampled on every think token, so each token moves the EMA.
SEED_TOML = """\
[entropy]
ema_alpha = 0.05
eat_probe_interval_tokens = 1

[model.mine]
reasoning_parser = "qwen3"
think_start_token_ids = [11]
think_end_token_ids = [12]
eos_token_ids = [13]
"""


@pytest.fixture
def toml_path(tmp_path):
    path = tmp_path / "meridian.toml"
    path.write_text(SEED_TOML)
    return path


@pytest.fixture
def cfg(toml_path):
    return load_config(toml_path)


def entropy(x: np.ndarray) -> np.ndarray:
    """Entropy (nats) of softmax over the last axis, in float64."""
    z = x.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)


def fields(sig: meridian.EntropySignal) -> tuple:
    names = ("think_tokens", "token_entropy", "eat", "eat_ema", "eat_ema_variance", "eat_samples",
             "rpdi_local", "rpdi_global", "rpdi_ratio", "rpdi_samples", "force", "held_by_tool_call")
    return tuple(getattr(sig, n) for n in names)


# ---- the seeds' examples -------------------------------------------------------------------------


def test_seed_entropy_probe_example(toml_path, monkeypatch):
    monkeypatch.chdir(toml_path.parent)  # the seeds load "meridian.toml" from the working directory
    np.random.seed(7)

    # --- the seeds' example (docs: Python API, EntropyProbe) ---
    cfg = load_config("meridian.toml")
    probe = EntropyProbe(
        think_end_token_ids=cfg.model["qwen3"].think_end_token_ids,
        backend="cpu",          # "cpu" (NumPy) or "cuda" (CUDA kernel)
        ema_alpha=cfg.entropy.ema_alpha,
    )

    # Per-token call — call once per decoded token.
    logits = np.random.randn(151_936).astype(np.float32)
    sig = probe.compute(req_id=42, logits=logits)
    print(sig.token_entropy, sig.eat, sig.eat_ema_variance)

    # Batch path — more efficient for large batch sizes.
    batch_logits = np.random.randn(8, 151_936).astype(np.float32)
    signals = probe.compute_batch(req_ids=list(range(8)), logits_batch=batch_logits)
    # --- end of the example ---

    assert isinstance(cfg, meridian.MeridianConfig)
    assert cfg.entropy.ema_alpha == 0.05 and cfg.entropy.eat_probe_interval_tokens == 1
    assert probe.think_end_token_ids == [END_THINK] and probe.backend == "cpu"
    assert sig.token_entropy == pytest.approx(entropy(logits), rel=1e-5)
    # No config passed: the default EAT interval (16), so no sample at the first token.
    assert sig.eat is None and sig.eat_samples == 0 and sig.eat_ema_variance == 0.0 and sig.think_tokens == 1
    assert [s.think_tokens for s in signals] == [1] * 8
    assert [s.token_entropy for s in signals] == pytest.approx(list(entropy(batch_logits)), rel=1e-5)
    assert len(probe) == 9 and 42 in probe and 7 in probe


def test_ema_alpha_is_per_probe_and_overrides_the_config(cfg):
    rng = np.random.default_rng(1)
    rows = [rng.standard_normal(VOCAB).astype(np.float32) * scale for scale in (0.5, 4.0, 1.0)]
    slow = EntropyProbe(cfg, backend="cpu")                   # the config's 0.05
    fast = EntropyProbe(cfg, backend="cpu", ema_alpha=0.5)
    same = EntropyProbe(cfg, backend="cpu", ema_alpha=0.05)
    out = {name: [p.compute(1, r) for r in rows] for name, p in (("slow", slow), ("fast", fast), ("same", same))}

    e = entropy(np.stack(rows))
    for name, alpha in (("slow", 0.05), ("fast", 0.5)):
        ema = e[0]
        for i in range(1, 3):
            ema = alpha * e[i] + (1 - alpha) * ema
            assert out[name][i].eat_ema == pytest.approx(ema, rel=1e-5), (name, i)
    assert abs(out["fast"][2].eat_ema - out["slow"][2].eat_ema) > 0.1
    assert [fields(s) for s in out["same"]] == [fields(s) for s in out["slow"]]
    assert cfg.entropy.ema_alpha == 0.05  # the override changed only the probe


def test_compute_batch_keyword_and_positional_forms_agree(cfg):
    rng = np.random.default_rng(2)
    batch = rng.standard_normal((4, VOCAB)).astype(np.float32) * np.array([[0.3], [1.0], [3.0], [6.0]],
                                                                          dtype=np.float32)
    probes = [EntropyProbe(cfg, backend="cpu", ema_alpha=0.3) for _ in range(4)]
    results = []
    for step in range(3):
        logits = np.roll(batch, step, axis=0)
        results.append([
            probes[0].compute_batch([5, 6, 7], logits, rows=[3, 0, 1]),
            probes[1].compute_batch([5, 6, 7], logits_batch=logits, rows=[3, 0, 1]),
            probes[2].compute_batch(req_ids=[5, 6, 7], logits_batch=logits, rows=[3, 0, 1]),
            probes[3].compute_batch(req_ids=[5, 6, 7], logits=logits, rows=[3, 0, 1]),
        ])
    for forms in results:
        want = [fields(s) for s in forms[0]]
        assert all([fields(s) for s in form] == want for form in forms[1:])
    last = results[-1][0]
    assert [s.think_tokens for s in last] == [3, 3, 3]
    assert [s.token_entropy for s in last] == pytest.approx(list(entropy(np.roll(batch, 2, axis=0)[[3, 0, 1]])),
                                                            rel=1e-5)


def test_compute_batch_needs_exactly_one_logits(cfg):
    probe = EntropyProbe(cfg, backend="cpu")
    logits = np.zeros((1, 16), np.float32)
    with pytest.raises(TypeError, match="logits or logits_batch"):
        probe.compute_batch([1], logits, logits_batch=logits)
    with pytest.raises(TypeError, match="missing the logits"):
        probe.compute_batch(req_ids=[1])
    with pytest.raises(TypeError, match="NumPy array or a DLPack tensor"):
        probe.compute_batch(req_ids=[1], logits_batch=[[0.0] * 16])
    assert len(probe) == 0


# ---- load_config and cfg.model -------------------------------------------------------------------


def test_cfg_model_is_a_mapping_and_still_callable(cfg):
    assert cfg.model["qwen3"].think_end_token_ids == [END_THINK]
    assert cfg.model("qwen3") == cfg.model["qwen3"]
    assert cfg.model["mine"].think_end_token_ids == [12]  # defined in the file
    assert "mine" in cfg.model and "nope" not in cfg.model and 3 not in cfg.model
    assert list(cfg.model) == cfg.model_names == cfg.model.keys() and len(cfg.model) == len(cfg.model_names)
    assert dict(cfg.model.items())["mine"] == cfg.model["mine"]
    assert cfg.model.get("nope") is None and cfg.model.get("mine").name == "mine"
    with pytest.raises(KeyError, match="model.nope is not defined; known models: .*qwen3"):
        cfg.model["nope"]
    with pytest.raises(ValueError, match="model.nope is not defined"):
        cfg.model("nope")
    with pytest.raises(TypeError, match="model names are str; got int"):
        cfg.model[3]
    view = load_config().model  # the view keeps its (temporary) config alive
    assert view["qwen3"].think_end_token_ids == [END_THINK]


def test_load_config_reports_the_seeds_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[entropy]\nema_alpha = 1.5\n")
    with pytest.raises(ValueError, match=r"entropy\.ema_alpha must be in \(0, 1\]; got 1\.5"):
        load_config(str(bad))


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.5, math.nan, math.inf])
def test_ema_alpha_out_of_range_is_a_value_error(value):
    with pytest.raises(ValueError, match=r"EntropyProbe: ema_alpha must be in \(0, 1\]"):
        EntropyProbe(backend="cpu", ema_alpha=value)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ema_alpha": "0.5"}, "ema_alpha must be a float in \\(0, 1\\]; got str"),
    ({"ema_alpha": True}, "ema_alpha must be a float in \\(0, 1\\]; got bool"),
    ({"backend": 1}, "backend must be 'auto', 'cpu' or 'cuda'; got int"),
    ({"think_end_token_ids": END_THINK}, "think_end_token_ids must be a sequence of ints"),
    ({"think_end_token_ids": "151668"}, "think_end_token_ids must be a sequence of ints"),
    ({"think_end_token_ids": [1.5]}, r"think_end_token_ids\[0\] = 1.5 is not a token id"),
    ({"model": 3}, "model must be a str"),
])
def test_wrong_types_are_type_errors(kwargs, match):
    with pytest.raises(TypeError, match=match):
        EntropyProbe(**kwargs)


def test_config_must_be_a_config_object(toml_path):
    with pytest.raises(TypeError, match=r"config must be a MeridianConfig \(meridian.load_config\(path\)\)"):
        EntropyProbe(str(toml_path))


def test_bad_values_name_the_parameter():
    with pytest.raises(ValueError, match=r"think_end_token_ids\[1\] = -3 is not a token id"):
        EntropyProbe(think_end_token_ids=[1, -3])
    with pytest.raises(ValueError, match="backend must be 'auto', 'cpu' or 'cuda'; got 'gpu'"):
        EntropyProbe(backend="gpu", ema_alpha=0.5)


def test_cuda_backend_without_cuda_says_what_to_use():
    if EntropyProbe.cuda_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(KernelError, match="backend='cuda'.*backend='auto' runs host tensors on the CPU kernel"):
        EntropyProbe(backend="cuda", ema_alpha=0.5)


# ---- the removed V0 plugin -----------------------------------------------------------------------

V1_FLAGS = ("--scheduler-cls meridian.vllm.Scheduler", "--logits-processors meridian.vllm:ForceThinkEnd",
            "--reasoning-parser qwen3")


def test_vllm_plugin_imports_without_vllm():
    code = ("import sys, meridian.vllm_plugin as p; assert 'vllm' not in sys.modules, 'vllm imported'; "
            "print(p.MeridianSchedulerPlugin.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "MeridianSchedulerPlugin"


def test_vllm_plugin_attach_names_the_v1_flags(cfg):
    from meridian.vllm_plugin import MeridianSchedulerPlugin, SchedulerPluginRemovedError

    assert issubclass(SchedulerPluginRemovedError, NotImplementedError)
    assert issubclass(SchedulerPluginRemovedError, RuntimeError)
    engine = object()
    with pytest.raises(SchedulerPluginRemovedError, match="V0 attach API") as attach:
        MeridianSchedulerPlugin.attach(engine, cfg, model_key="qwen3")
    with pytest.raises(SchedulerPluginRemovedError, match="V0 attach API") as construct:
        MeridianSchedulerPlugin(scheduler=engine, config=cfg)
    for error in (attach.value, construct.value):
        for flag in V1_FLAGS:
            assert flag in str(error)
