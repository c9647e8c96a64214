"""meridian.EntropyProbe against a float64 NumPy reference and a Python
transcription of the EAT/RPDI rules, with the real Qwen3 vocabulary size and
</think> id. bf16/fp16 go through torch CPU tensors; the CUDA cases run only
where torch sees a GPU and meridian was built with the CUDA kernel."""
from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import meridian
from meridian import EntropyProbe, ForceReason, KernelError

VOCAB = 151936  # Qwen3
END_THINK = 151668  # Qwen3 </think>
NAN_FLAG, POS_INF_FLAG, ALL_NEG_INF_FLAG = 1, 2, 4


def row(kind: str, vocab: int = VOCAB, seed: int = 0) -> np.ndarray:
    """One float32 logits row of a given shape."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        return (rng.standard_normal(vocab) * 3).astype(np.float32)
    if kind == "peaked":  # entropy ~ 0
        x = (rng.standard_normal(vocab) - 20).astype(np.float32)
        x[rng.integers(vocab)] = 25
        return x
    if kind == "flat":  # entropy ~ ln(vocab)
        return (rng.standard_normal(vocab) * 0.1).astype(np.float32)
    if kind == "neg_inf":
        x = (rng.standard_normal(vocab) * 3).astype(np.float32)
        x[rng.choice(vocab, vocab // 3, replace=False)] = -np.inf
        return x
    if kind == "large":
        return (rng.standard_normal(vocab) * 30 + 80).astype(np.float32)
    raise ValueError(kind)


def batch(n: int, vocab: int = VOCAB, seed: int = 0) -> np.ndarray:
    kinds = ["random", "peaked", "flat", "neg_inf", "large"]
    return np.stack([row(kinds[i % len(kinds)], vocab, seed + i) for i in range(n)])


def reference(x: np.ndarray, end_ids: list[int]) -> dict[str, np.ndarray]:
    """Float64 two-pass statistics of each row of `x` (the kernel's contract)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    out = {k: [] for k in ("entropy", "max_logit", "log_sum_exp", "end_think_mass", "argmax", "flags")}
    for r in x:
        flags = (NAN_FLAG if np.isnan(r).any() else 0) | (POS_INF_FLAG if np.isposinf(r).any() else 0)
        m = r.max() if flags == 0 else math.nan
        if flags:
            values = (math.nan, math.nan, math.nan, math.nan, -1)
        elif m == -np.inf:
            flags = ALL_NEG_INF_FLAG
            values = (0.0, -np.inf, -np.inf, 0.0, -1)
        else:
            finite = np.isfinite(r)
            shifted = np.where(finite, r - m, 0.0)
            e = np.where(finite, np.exp(shifted), 0.0)
            s = e.sum()
            entropy = max(math.log(s) - (e * shifted).sum() / s, 0.0)
            values = (entropy, m, m + math.log(s), e[end_ids].sum() / s, int(np.argmax(r == m)))
        for key, value in zip(("entropy", "max_logit", "log_sum_exp", "end_think_mass", "argmax"), values):
            out[key].append(value)
        out["flags"].append(flags)
    return {k: np.array(v) for k, v in out.items()}


def assert_matches(stats: dict[str, np.ndarray], ref: dict[str, np.ndarray], tol: float = 1e-5) -> None:
    np.testing.assert_array_equal(stats["flags"], ref["flags"])
    valid = (ref["flags"] & (NAN_FLAG | POS_INF_FLAG)) == 0
    assert np.isnan(stats["entropy"][~valid]).all()
    np.testing.assert_array_equal(stats["argmax"][valid], ref["argmax"][valid])
    np.testing.assert_array_equal(stats["max_logit"][valid], ref["max_logit"][valid])
    for key in ("entropy", "log_sum_exp"):
        got, want = stats[key][valid].astype(np.float64), ref[key][valid]
        finite = np.isfinite(want)
        np.testing.assert_array_equal(got[~finite], want[~finite])
        assert (np.abs(got[finite] - want[finite]) <= tol * np.maximum(1.0, np.abs(want[finite]))).all(), key
    assert (np.abs(stats["end_think_mass"][valid] - ref["end_think_mass"][valid]) <= tol).all()


@pytest.fixture
def probe() -> EntropyProbe:
    return EntropyProbe(backend="cpu")


# ---- import hygiene ---------------------------------------------------------------------------


def test_import_meridian_imports_neither_torch_nor_vllm():
    code = "import meridian, sys; assert 'torch' not in sys.modules and 'vllm' not in sys.modules, sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names():
    assert issubclass(meridian.KernelError, RuntimeError)
    assert meridian.KernelError.__module__ == "meridian"
    for name in ("EntropyProbe", "EntropySignal", "KernelError"):
        assert name in meridian.__all__


# ---- statistics against the float64 reference --------------------------------------------------


def test_fp32_batch_matches_float64_reference(probe):
    x = batch(10)
    assert_matches(probe.row_stats(x), reference(x, [END_THINK]))


@pytest.mark.parametrize("vocab", [1, 3, 17, 1000, 8193, 32001])
def test_odd_vocab_sizes(vocab):
    probe = EntropyProbe(think_end_token_ids=[0, vocab - 1], backend="cpu")
    x = batch(5, vocab, seed=vocab)
    assert_matches(probe.row_stats(x), reference(x, [0, vocab - 1]))


def test_row_stats_types_and_1d_input(probe):
    x = row("random")
    stats = probe.row_stats(x)
    assert set(stats) == {"entropy", "max_logit", "log_sum_exp", "end_think_mass", "argmax", "flags"}
    assert stats["entropy"].dtype == np.float32 and stats["entropy"].shape == (1,)
    assert stats["argmax"].dtype == np.int32 and stats["flags"].dtype == np.uint32
    assert_matches(stats, reference(x, [END_THINK]))


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_bf16_and_fp16_torch_tensors(probe, dtype_name):
    torch = pytest.importorskip("torch")
    x = batch(6)
    if dtype_name == "float16":
        x = np.clip(x, -60000, 60000)
    t = torch.from_numpy(x).to(getattr(torch, dtype_name))
    # The reference reads the same 16-bit values, widened exactly.
    assert_matches(probe.row_stats(t), reference(t.to(torch.float64).numpy(), [END_THINK]))
    one = probe.compute(1, t[0])
    assert one.token_entropy == pytest.approx(reference(t[0].double().numpy(), [END_THINK])["entropy"][0],
                                              rel=1e-5, abs=1e-5)


def test_torch_fp32_cpu_tensor_matches_numpy(probe):
    torch = pytest.importorskip("torch")
    x = batch(4)
    a, b = probe.row_stats(x), probe.row_stats(torch.from_numpy(x))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_strided_rows_and_unaligned_starts(probe):
    x = batch(6)
    padded = np.full((6, VOCAB + 37), np.nan, dtype=np.float32)  # padding is never read
    padded[:, :VOCAB] = x
    strided = padded[:, :VOCAB]
    assert strided.strides[0] == (VOCAB + 37) * 4
    assert_matches(probe.row_stats(strided), reference(x, [END_THINK]))
    buffer = np.concatenate([np.zeros(3, np.float32), x[0]])
    unaligned = buffer[3:]  # 12 bytes past the allocation
    assert_matches(probe.row_stats(unaligned), reference(x[0], [END_THINK]))


def test_strided_torch_bf16(probe):
    torch = pytest.importorskip("torch")
    x = batch(3)
    padded = torch.full((3, VOCAB + 5), float("nan"), dtype=torch.bfloat16)
    padded[:, :VOCAB] = torch.from_numpy(x).to(torch.bfloat16)
    view = padded[:, :VOCAB]
    assert not view.is_contiguous()
    assert_matches(probe.row_stats(view), reference(view.double().numpy(), [END_THINK]))


def test_nan_inf_and_all_neg_inf_rows(probe):
    x = batch(4)
    x[0, 123] = np.nan
    x[1, :] = -np.inf
    x[2, 7] = np.inf
    stats = probe.row_stats(x)
    assert list(stats["flags"]) == [NAN_FLAG, ALL_NEG_INF_FLAG, POS_INF_FLAG, 0]
    assert math.isnan(stats["entropy"][0]) and math.isnan(stats["entropy"][2])
    assert stats["entropy"][1] == 0 and stats["log_sum_exp"][1] == -np.inf and stats["argmax"][1] == -1
    assert_matches(stats, reference(x, [END_THINK]))
    # Neither row with no usable distribution is fed to the signals.
    for req, bad in enumerate(x[:3]):
        sig = probe.compute(req, bad)
        assert sig.token_entropy is None and sig.rpdi_samples == 0
    assert probe.compute(9, x[3]).rpdi_samples == 1
    # Nor an EAT sample when one is due.
    every_token = EntropyProbe(config("[entropy]\neat_probe_interval_tokens = 1\n"), backend="cpu")
    assert every_token.compute(1, x[1]).eat is None and every_token.compute(1, x[1]).eat_samples == 0
    assert every_token.compute(1, x[3]).eat == pytest.approx(stats["entropy"][3])


# ---- compute_batch ------------------------------------------------------------------------------


def test_compute_batch_with_a_row_subset(probe):
    x = batch(8)
    ref = reference(x, [END_THINK])["entropy"]
    signals = probe.compute_batch([10, 11, 12], x, rows=[6, 1, 2], think_tokens=[5, 9, 1],
                                  tool_call_open=[False, True, False])
    assert [s.think_tokens for s in signals] == [5, 9, 1]
    for sig, r in zip(signals, [6, 1, 2]):
        assert sig.token_entropy == pytest.approx(ref[r], rel=1e-5, abs=1e-5)
    # Default rows: the batch has one row per request.
    signals = probe.compute_batch(list(range(8)), x)
    np.testing.assert_allclose([s.token_entropy for s in signals], ref, rtol=1e-5, atol=1e-5)
    # Repeated rows and a subset of row_stats.
    stats = probe.row_stats(x, rows=[3, 3, 0])
    np.testing.assert_array_equal(stats["entropy"], probe.row_stats(x)["entropy"][[3, 3, 0]])


def test_compute_batch_empty(probe):
    assert probe.compute_batch([], np.zeros((0, VOCAB), np.float32)) == []
    assert len(probe) == 0


def test_compute_batch_argument_errors(probe):
    x = batch(4)
    with pytest.raises(ValueError, match="rows has 2 entries for 3 req_ids"):
        probe.compute_batch([1, 2, 3], x, rows=[0, 1])
    with pytest.raises(ValueError, match="think_tokens has 1 entries for 2 req_ids"):
        probe.compute_batch([1, 2], x, rows=[0, 1], think_tokens=[3])
    with pytest.raises(ValueError, match="tool_call_open has 3 entries"):
        probe.compute_batch([1, 2], x, rows=[0, 1], tool_call_open=[True, False, True])
    with pytest.raises(ValueError, match=r"rows\[1\] = 4 is outside the batch of 4 rows"):
        probe.compute_batch([1, 2], x, rows=[0, 4])
    with pytest.raises(ValueError, match=r"rows\[0\] = -1"):
        probe.compute_batch([1], x, rows=[-1])
    with pytest.raises(ValueError, match="3 req_ids for logits of 4 rows"):
        probe.compute_batch([1, 2, 3], x)
    with pytest.raises(ValueError, match=r"req_ids\[1\] = 7 appears more than once"):
        probe.compute_batch([7, 7], x, rows=[0, 1])
    with pytest.raises(ValueError, match="2-D"):
        probe.compute_batch([1], x[0])
    assert len(probe) == 0, "a rejected batch creates no request state"


# ---- errors on bad tensors and settings ----------------------------------------------------------


def test_bad_tensors_raise_clear_errors(probe):
    x = batch(2)
    with pytest.raises(ValueError, match="dtype is int64"):
        probe.compute(1, np.zeros(VOCAB, np.int64))
    with pytest.raises(ValueError, match="dtype is float64"):
        probe.row_stats(x.astype(np.float64))
    with pytest.raises(ValueError, match="ndim is 3"):
        probe.row_stats(x.reshape(2, 1, VOCAB))
    with pytest.raises(ValueError, match="last-dimension stride is 2"):
        probe.row_stats(x[:, ::2])
    with pytest.raises(ValueError, match="last-dimension stride"):
        probe.row_stats(np.asfortranarray(x[:, :1000]))
    with pytest.raises(ValueError, match="use compute_batch"):
        probe.compute(1, x)
    with pytest.raises(ValueError, match=r"end_think_ids\[0\] = 151668 is outside row 0 \(vocab size 1000\)"):
        probe.compute(1, x[0, :1000])
    with pytest.raises(ValueError, match="vocab size 0"):
        probe.row_stats(np.zeros((2, 0), np.float32))
    with pytest.raises(TypeError, match="NumPy array or a DLPack tensor"):
        probe.compute(1, [0.0] * 10)
    assert len(probe) == 0


def test_bad_torch_tensors(probe):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(batch(2))
    with pytest.raises(ValueError, match="last-dimension stride"):
        probe.row_stats(t.t())
    with pytest.raises(ValueError, match="dtype is int32"):
        probe.row_stats(t.to(torch.int32))


def test_settings_errors():
    with pytest.raises(ValueError, match="backend must be 'auto', 'cpu' or 'cuda'; got 'gpu'"):
        EntropyProbe(backend="gpu")
    with pytest.raises(ValueError, match="model.granite_3_2.think_end_token_ids is empty"):
        EntropyProbe(model="granite_3_2")
    with pytest.raises(ValueError, match="model.nope is not defined"):
        EntropyProbe(model="nope")
    with pytest.raises(ValueError, match="think_end_token_ids is empty"):
        EntropyProbe(think_end_token_ids=[])
    with pytest.raises(ValueError, match=r"think_end_token_ids\[1\] = -3"):
        EntropyProbe(think_end_token_ids=[1, -3])
    with pytest.raises(ValueError, match="at most 8"):
        EntropyProbe(think_end_token_ids=list(range(9)))
    cfg = meridian.MeridianConfig.defaults()
    cfg.entropy.ema_alpha = 1.5
    with pytest.raises(ValueError, match=r"entropy.ema_alpha must be in \(0, 1\]"):
        EntropyProbe(cfg)
    with pytest.raises(ValueError, match="no end-of-think ids"):
        EntropyProbe(meridian.MeridianConfig())  # no models defined at all


def test_end_ids_come_from_the_model_preset():
    assert EntropyProbe().think_end_token_ids == [END_THINK]
    assert EntropyProbe(model="deepseek_r1").think_end_token_ids == [128799]
    assert EntropyProbe(model="deepseek_r1", think_end_token_ids=[5]).think_end_token_ids == [5]


def test_cuda_backend_without_cuda_raises_kernel_error():
    if EntropyProbe.cuda_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(KernelError, match="backend='cuda'"):
        EntropyProbe(backend="cuda")


# ---- per-request state, forcing and the signals ---------------------------------------------------


def config(toml: str) -> meridian.MeridianConfig:
    return meridian.parse_config(toml)


def test_hard_cap_forces_at_max_think_tokens():
    cfg = config("[scheduler]\nmin_think_tokens = 2\nmax_think_tokens = 4\n")
    for enabled in (True, False):
        cfg.entropy.enabled = enabled
        probe = EntropyProbe(cfg, backend="cpu")
        x = row("random")
        forces = [probe.compute(1, x).force for _ in range(5)]
        assert forces == [None, None, None, ForceReason.HARD_CAP, ForceReason.HARD_CAP]
    assert probe.compute(2, x, think_tokens=100).force == ForceReason.HARD_CAP


def test_tool_call_open_holds_the_force():
    probe = EntropyProbe(config("[scheduler]\nmin_think_tokens = 1\nmax_think_tokens = 3\n"), backend="cpu")
    x = row("random")
    probe.compute(1, x)
    probe.compute(1, x)
    held = probe.compute(1, x, tool_call_open=True)
    assert held.force is None and held.held_by_tool_call == ForceReason.HARD_CAP
    released = probe.compute(1, x)
    assert released.force == ForceReason.HARD_CAP and released.held_by_tool_call is None
    batch_signals = probe.compute_batch([1], x[None, :], tool_call_open=[True])
    assert batch_signals[0].held_by_tool_call == ForceReason.HARD_CAP


def test_think_tokens_default_explicit_and_going_back(probe):
    x = row("random")
    assert [probe.compute(1, x).think_tokens for _ in range(3)] == [1, 2, 3]
    assert probe.compute(1, x, think_tokens=10).think_tokens == 10
    assert probe.compute(1, x).think_tokens == 11
    with pytest.raises(ValueError, match="think_tokens = 4 for request 1 goes back from 11"):
        probe.compute(1, x, think_tokens=4)
    with pytest.raises(ValueError, match="must be >= 1"):
        probe.compute(1, x, think_tokens=0)
    with pytest.raises(ValueError, match=r"think_tokens\[0\] = 2 for request 1 goes back"):
        probe.compute_batch([1, 5], np.stack([x, x]), think_tokens=[2, 1])
    assert 5 not in probe, "the rejected batch left request 5 untouched"
    assert probe.compute(1, x).think_tokens == 12


def test_release_len_and_contains(probe):
    x = row("random")
    probe.compute(1, x)
    probe.compute_batch([2, 3], np.stack([x, x]))
    assert len(probe) == 3 and 2 in probe and 4 not in probe and "2" not in probe and -1 not in probe
    assert probe.release(2) is True
    assert probe.release(2) is False
    assert len(probe) == 2 and 2 not in probe
    assert probe.compute(2, x).think_tokens == 1, "a released request starts over"


def test_signal_is_a_read_only_record(probe):
    sig = probe.compute(1, row("random"))
    with pytest.raises(AttributeError):
        sig.force = ForceReason.HARD_CAP
    text = repr(sig)
    assert text.startswith("EntropySignal(think_tokens=1, token_entropy=") and "force=None" in text
    forced = EntropyProbe(config("[scheduler]\nmin_think_tokens = 0\nmax_think_tokens = 1\n"), backend="cpu")
    assert "force=ForceReason.HARD_CAP" in repr(forced.compute(1, row("random")))


class ReferenceProbe:
    """The EAT/RPDI rules of docs/architecture.md#signals-and-the-forcing-decision,
    transcribed independently of the C++ EntropyProbe."""

    def __init__(self, cfg: meridian.MeridianConfig) -> None:
        self.e, self.s = cfg.entropy, cfg.scheduler
        self.ema = self.var = 0.0
        self.eat_samples = 0
        self.window: list[bool] = []
        self.samples = self.transitions = 0

    def observe(self, t: int, entropy: float, tool_call_open: bool) -> dict:
        self.samples += 1
        transition = entropy > self.e.transition_entropy_threshold
        self.transitions += transition
        self.window = (self.window + [transition])[-self.e.rpdi_window_tokens:]
        eat = None
        if t % self.e.eat_probe_interval_tokens == 0:
            eat = entropy
            if self.eat_samples == 0:
                self.ema, self.var = entropy, 0.0
            else:
                a = self.e.ema_alpha
                self.ema = a * entropy + (1 - a) * self.ema
                self.var = a * (entropy - self.ema) ** 2 + (1 - a) * self.var
            self.eat_samples += 1
        local = sum(self.window) / len(self.window)
        glob = self.transitions / self.samples
        ratio = local / glob if glob else 0.0
        reason = None
        if t >= self.s.max_think_tokens:
            reason = ForceReason.HARD_CAP
        elif t >= self.s.min_think_tokens:
            if self.eat_samples >= self.e.eat_min_samples and self.var < self.e.eat_ema_variance_threshold:
                reason = ForceReason.CONVERGED
            elif self.samples >= self.e.rpdi_min_samples and ratio > self.e.rpdi_threshold:
                reason = ForceReason.OVERTHINKING
        return {"eat": eat, "eat_ema": self.ema, "eat_ema_variance": self.var, "eat_samples": self.eat_samples,
                "rpdi_local": local, "rpdi_global": glob, "rpdi_ratio": ratio, "rpdi_samples": self.samples,
                "force": None if tool_call_open else reason, "held_by_tool_call": reason if tool_call_open else None}


def run_sequence(cfg: meridian.MeridianConfig, kinds: list[str], tool_call_at: int | None = None) -> list:
    """Feeds the same rows to EntropyProbe (one by one and as batches) and to
    the reference; returns the probe's signals after checking every field."""
    probe = EntropyProbe(cfg, backend="cpu")
    batched = EntropyProbe(cfg, backend="cpu")
    ref = ReferenceProbe(cfg)
    rows = {kind: row(kind, seed=11) for kind in set(kinds)}
    entropies = {kind: reference(x, [END_THINK])["entropy"][0] for kind, x in rows.items()}
    signals = []
    for t, kind in enumerate(kinds, start=1):
        open_ = t == tool_call_at
        sig = probe.compute(7, rows[kind], tool_call_open=open_)
        # The same token through compute_batch, as one of two requests.
        other = batched.compute_batch([7, 8], np.stack([rows[kind], rows[kind]]), tool_call_open=[open_, False])[0]
        assert sig.token_entropy == pytest.approx(entropies[kind], rel=1e-5, abs=1e-5)
        want = ref.observe(t, sig.token_entropy, open_)
        for got in (sig, other):
            assert got.think_tokens == t
            for key, value in want.items():
                if isinstance(value, float):
                    assert getattr(got, key) == pytest.approx(value, rel=1e-12, abs=1e-12), (t, key)
                else:
                    assert getattr(got, key) == value, (t, key)
        signals.append(sig)
    return signals


def test_eat_converges_like_the_reference():
    cfg = config("[scheduler]\nmin_think_tokens = 6\nmax_think_tokens = 1000\n"
                 "[entropy]\neat_probe_interval_tokens = 2\neat_min_samples = 3\nema_alpha = 0.3\n"
                 "eat_ema_variance_threshold = 0.01\n")
    # Same distribution every token: the EAT variance is 0 once seeded.
    signals = run_sequence(cfg, ["random"] * 8)
    assert [s.force for s in signals] == [None] * 5 + [ForceReason.CONVERGED] * 3
    assert [s.eat is not None for s in signals] == [False, True] * 4


def test_eat_does_not_converge_while_the_samples_vary():
    cfg = config("[scheduler]\nmin_think_tokens = 2\nmax_think_tokens = 1000\n"
                 "[entropy]\neat_probe_interval_tokens = 1\neat_min_samples = 2\n")
    signals = run_sequence(cfg, ["random", "peaked", "flat", "peaked", "random", "peaked"], tool_call_at=5)
    assert all(s.force is None for s in signals)
    assert signals[-1].eat_ema_variance > 0.01


def test_rpdi_overthinking_like_the_reference():
    cfg = config("[scheduler]\nmin_think_tokens = 8\nmax_think_tokens = 1000\n"
                 "[entropy]\neat_min_samples = 1000000\nrpdi_window_tokens = 4\nrpdi_min_samples = 4\n"
                 "rpdi_threshold = 1.5\ntransition_entropy_threshold = 2.5\n")
    kinds = ["random"] + ["peaked"] * 7 + ["random"] * 4
    signals = run_sequence(cfg, kinds, tool_call_at=11)
    assert signals[-2].held_by_tool_call == ForceReason.OVERTHINKING and signals[-2].force is None
    assert signals[-1].force == ForceReason.OVERTHINKING
    assert signals[-1].rpdi_ratio == pytest.approx(1.0 / (5 / 12))


def test_disabled_entropy_measures_nothing_but_keeps_the_cap():
    cfg = config("[scheduler]\nmin_think_tokens = 1\nmax_think_tokens = 3\n[entropy]\nenabled = false\n")
    probe = EntropyProbe(cfg, backend="cpu")
    signals = [probe.compute(1, row("random")) for _ in range(3)]
    assert all(s.token_entropy is None and s.rpdi_samples == 0 for s in signals)
    assert signals[-1].force == ForceReason.HARD_CAP


# ---- the GIL ------------------------------------------------------------------------------------


def test_gil_is_released_while_the_kernel_runs(probe):
    """A helper thread stamps the time whenever it holds the GIL. With the
    switch interval at 10 s the main thread only gives the GIL up by
    releasing it explicitly, so a stamp taken between the start and end of a
    compute call proves the call released it."""
    x = batch(64)
    stamps: list[int] = []
    stop = threading.Event()
    started = threading.Event()

    def helper() -> None:
        started.set()
        while not stop.is_set():
            stamps.append(time.perf_counter_ns())
            stop.wait(0.0002)  # blocks without the GIL

    old = sys.getswitchinterval()
    thread = threading.Thread(target=helper)
    thread.start()
    started.wait()
    sys.setswitchinterval(10.0)
    try:
        overlapped = False
        for _ in range(50):
            begin = time.perf_counter_ns()
            probe.row_stats(x)
            end = time.perf_counter_ns()
            if any(begin < s < end for s in stamps[-1000:]):
                overlapped = True
                break
    finally:
        sys.setswitchinterval(old)
        stop.set()
        thread.join()
    assert overlapped, "no other thread ran while the kernel did"


# ---- CUDA (where available) ---------------------------------------------------------------------


def cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if not EntropyProbe.cuda_available():
        pytest.skip("this meridian build has no CUDA kernel")
    return torch


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_cuda_matches_cpu_on_a_side_stream(dtype_name):
    torch = cuda_torch()
    x = batch(256)
    if dtype_name == "float16":
        x = np.clip(x, -60000, 60000)
    host = torch.from_numpy(x).to(getattr(torch, dtype_name))
    probe = EntropyProbe()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # produced and probed on the same non-default stream
        device = host.to("cuda", non_blocking=False) * 1
        gpu = probe.row_stats(device)
        subset = probe.compute_batch([1, 2], device, rows=[200, 3])
    cpu = EntropyProbe(backend="cpu").row_stats(host)
    for key in ("flags", "argmax", "max_logit"):
        np.testing.assert_array_equal(gpu[key], cpu[key])
    valid = (cpu["flags"] & 3) == 0
    np.testing.assert_allclose(gpu["entropy"][valid], cpu["entropy"][valid], rtol=1e-5, atol=1e-5)
    assert subset[0].token_entropy == pytest.approx(float(cpu["entropy"][200]), rel=1e-5, abs=1e-5)
    with pytest.raises(ValueError, match="backend='cpu'"):
        EntropyProbe(backend="cpu").row_stats(device)
    with pytest.raises(ValueError, match="backend='cuda'"):
        EntropyProbe(backend="cuda").row_stats(host)


def test_checking_a_view_costs_what_was_asked_not_its_row_count():
    """Issue 27: row_stats(x, rows=[0]) on a strided view of 2^40 rows checked every row
    with the GIL held (2^32 rows: 8 s, other threads starved). Rows alike are checked once.
    Run in a child with a generous bound, so a regression fails instead of hanging."""
    code = (
        "import numpy as np\n"
        "from meridian import EntropyProbe\n"
        "p = EntropyProbe(think_end_token_ids=[3], backend='cpu')\n"
        "base = np.zeros(16, np.float32)\n"
        "x = np.lib.stride_tricks.as_strided(base, shape=(2**40, 16), strides=(64, 4))\n"
        "s = p.row_stats(x, rows=[0])\n"
        "assert abs(float(s['entropy'][0]) - float(np.log(16))) < 1e-5, s\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_an_uninitialised_probe_says_so():
    """An EntropyProbe made by __new__ alone (no __init__) names the mistake
    instead of a bare AttributeError about a private slot."""
    bare = EntropyProbe.__new__(EntropyProbe)
    for call in (lambda: bare.compute(1, row("random")), lambda: bare.row_stats(row("random")),
                 lambda: bare.release(1), lambda: len(bare), lambda: bare.backend):
        with pytest.raises(RuntimeError, match="never initialised"):
            call()
    assert repr(bare) == "EntropyProbe(<uninitialised>)"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bare.nope  # noqa: B018
