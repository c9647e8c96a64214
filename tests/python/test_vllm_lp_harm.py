"""``ForceThinkEnd`` does no harm (issue #26), against the real vLLM 0.32 package.

* Not enabled, nothing of it runs: the package registers no
  ``vllm.logits_processors`` entry point, so an engine that does not list the
  processor never builds it (no forcing, no injected ``</think>``, no
  ``extra_args`` validation), here on a model whose vocabulary is larger than
  Qwen3's and where Qwen3's think ids are ordinary tokens.
* Enabled on a model whose tokenizer does not confirm the preset's think ids,
  it logs why once and stays inert.
* An invalid ``meridian.toml`` stops only engines that enabled a Meridian part.
* Model Runner V2: no device-to-host read in a step that holds none of the
  tracked requests, one read otherwise; slots are forgotten when their request
  needs nothing more.
* The hard cap never depends on the entropy probe.

The processors are built by vLLM's own loaders from real ``VllmConfig``s and
driven with real ``BatchUpdate``s, ``RequestState``s and ``LogitsContext``s
(see ``test_vllm_logits_processor.v2_states`` for the two V2 pieces that
cannot be real without a GPU).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

# The vLLM environment (offline, CPU, a private cache root) is set by conftest.py.

import pytest
import torch
from vllm import SamplingParams
from vllm.config import ModelConfig, VllmConfig
from vllm.v1.sample.logits_processor import BatchUpdate

import meridian
import meridian.vllm._lp_v2 as lp_v2
from meridian.vllm import ForceThinkEnd
from test_vllm_logits_processor import (  # noqa: F401 - v2_states is a fixture
    ANSWER_PROMPT,
    CAP4,
    END_THINK,
    IM_END,
    PROMPT,
    TINY,
    WORD,
    V1Runner,
    commit,
    context,
    flush,
    is_forced,
    params,
    v1,
    v2_states,
)

# About 15 s on 2 cores: scheduled first (conftest.py).
pytestmark = pytest.mark.slow(15)

REPO = pathlib.Path(__file__).resolve().parents[2]
BIG_VOCAB = 262_144  # Gemma 3's size: Qwen3's think ids 151667/151668 are ordinary tokens here


@pytest.fixture(scope="module")
def vllm_config() -> VllmConfig:
    model = ModelConfig(model=str(TINY), tokenizer=str(TINY), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=2048)
    return VllmConfig(model_config=model)


@pytest.fixture(scope="module")
def big_model(tmp_path_factory) -> pathlib.Path:
    """A model directory with a 262,144-token vocabulary whose tokenizer is
    not Qwen3's (token i is "w<i>")."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = tmp_path_factory.mktemp("big-vocab")
    config = json.loads((TINY / "config.json").read_text())
    config["vocab_size"] = BIG_VOCAB
    (path / "config.json").write_text(json.dumps(config))
    shutil.copy(TINY / "generation_config.json", path)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(BIG_VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "w0"}))
    return path


@pytest.fixture(scope="module")
def big_config(big_model) -> VllmConfig:
    model = ModelConfig(model=str(big_model), tokenizer=str(big_model), skip_tokenizer_init=True,
                        dtype="float32", max_model_len=2048)
    assert model.get_vocab_size() == BIG_VOCAB
    return VllmConfig(model_config=model)


@pytest.fixture
def cap4(tmp_path, monkeypatch):
    path = tmp_path / "cap4.toml"
    path.write_text(CAP4)
    monkeypatch.setenv("MERIDIAN_CONFIG", str(path))
    monkeypatch.delenv("MERIDIAN_MODEL", raising=False)


def drive_v1(procs, steps: int = 10) -> tuple[list[int], bool]:
    """Runs a think request (prompt ends in <think>) through every processor
    of a V1 engine, as vLLM's V1 runner does, on the big vocabulary; the
    sampled token is always WORD unless a row was forced. Returns the output
    and whether any processor changed the logits."""
    output: list[int] = []
    sp = SamplingParams(max_tokens=1000)
    for proc in procs:
        proc.update_state(BatchUpdate(1, [], [(0, sp, list(PROMPT), output)], []))
    gen = torch.Generator().manual_seed(11)
    changed = False
    for _ in range(steps):
        logits = torch.randn(1, BIG_VOCAB, generator=gen)
        before = logits.clone()
        for proc in procs:
            proc.update_state(None)
            logits = proc.apply(logits)
        changed |= not torch.equal(before, logits)
        forced = bool(torch.isfinite(logits[0, END_THINK])) and int(torch.isneginf(logits[0]).sum()) == BIG_VOCAB - 1
        output.append(END_THINK if forced else WORD)
    return output, changed


# -- not enabled: not there --------------------------------------------------------------


def test_the_package_registers_no_logits_processor_entry_point():
    from importlib.metadata import entry_points

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("entry-points", {})
    assert "vllm.logits_processors" not in declared and "vllm.general_plugins" not in declared
    installed = [ep.value for ep in entry_points(group="vllm.logits_processors")]
    assert not [value for value in installed if value.startswith("meridian")], installed


def test_an_engine_that_does_not_list_it_never_forces_on_a_larger_vocabulary(big_config, cap4, v2_states):
    """The exact loaders a V1 and a V2 engine run, with the engine's own
    (empty) --logits-processors: Meridian's processor is not among them, so a
    request whose prompt ends in token 151667 (an ordinary token here) is never
    forced, not even past the hard cap of 4, and 151668 is never injected."""
    from vllm.v1.sample.logits_processor import build_logitsprocs, validate_logits_processors_parameters
    from vllm.v1.worker.gpu.sample.logits_processor.loader import build_custom_logits_processors

    custom = big_config.model_config.logits_processors or ()
    procs = build_logitsprocs(big_config, torch.device("cpu"), False, False, custom)
    assert not [p for p in procs.all if isinstance(p, ForceThinkEnd)]
    output, changed = drive_v1(list(procs.all))
    assert output == [WORD] * 10 and not changed
    assert build_custom_logits_processors(big_config, v2_states, False, custom) == []
    # Meridian's keys are nobody's business there: no validation either.
    validate_logits_processors_parameters(custom, params(max_think_tokens=-3))


def test_enabled_on_a_model_whose_tokenizer_does_not_confirm_the_preset_is_inert(big_config, cap4, v2_states,
                                                                               caplog):
    """Listed explicitly, without --reasoning-parser: the qwen3 preset's ids
    decode to ordinary tokens with the served tokenizer, so it says so once and
    leaves every request alone (V1 and V2)."""
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm.v1.worker.gpu.sample.logits_processor.loader import build_custom_logits_processors

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="meridian.vllm"):
        procs = build_logitsprocs(big_config, torch.device("cpu"), False, False, ["meridian.vllm:ForceThinkEnd"])
    ours = [p for p in procs.all if isinstance(p, ForceThinkEnd)]
    assert len(ours) == 1 and (ours[0].model, ours[0].end_token_id) == (None, None)
    errors = [r.getMessage() for r in caplog.records if r.name == "meridian.vllm" and r.levelno >= logging.WARNING]
    assert len(errors) == 1, errors
    assert "model preset 'qwen3' does not match the served tokenizer" in errors[0]
    assert "[151667] is 'w151667' in the served tokenizer, not '<think>'" in errors[0]
    output, changed = drive_v1(list(procs.all))
    assert output == [WORD] * 10 and not changed
    assert ours[0].counters.requests_tracked == 0
    v2 = build_custom_logits_processors(big_config, v2_states, False, ["meridian.vllm:ForceThinkEnd"])
    assert v2[0].model is None and v2[0].add_request(0, params()) is False


# -- an invalid meridian.toml --------------------------------------------------------------


@pytest.fixture
def invalid_toml_in_cwd(tmp_path, monkeypatch):
    """An invalid ./meridian.toml, found by Meridian's discovery (no
    $MERIDIAN_CONFIG, no ~/.config/meridian)."""
    monkeypatch.delenv("MERIDIAN_CONFIG", raising=False)
    monkeypatch.delenv("MERIDIAN_MODEL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "meridian.toml").write_text("[scheduler]\nmax_think_tokens = -1\n")
    assert meridian.find_default_config_file() is not None
    return tmp_path / "meridian.toml"


def test_invalid_meridian_toml_never_stops_an_engine_that_does_not_use_meridian(vllm_config, invalid_toml_in_cwd,
                                                                                v2_states):
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm.v1.worker.gpu.sample.logits_processor.loader import build_custom_logits_processors

    procs = build_logitsprocs(vllm_config, torch.device("cpu"), False, False, ())
    assert list(procs.all) and not [p for p in procs.all if isinstance(p, ForceThinkEnd)]
    assert build_custom_logits_processors(vllm_config, v2_states, False, None) == []


def test_vllm_loads_nothing_of_meridian_in_an_engine_that_did_not_enable_it(tmp_path):
    """No entry point of the installed package puts Meridian into every vLLM process: vLLM's
    own plugin loaders (general, platform, logits processors, IO processors) import nothing of
    it, so no meridian.toml, however hostile, is ever read there."""
    from importlib.metadata import entry_points

    for group in ("vllm.general_plugins", "vllm.platform_plugins", "vllm.logits_processors",
                  "vllm.io_processor_plugins", "vllm.stat_logger_plugins"):
        assert not [e for e in entry_points(group=group) if e.value.startswith("meridian")], group
    code = ("import sys; from vllm.plugins import load_general_plugins; load_general_plugins(); "
            "bad = sorted(m for m in sys.modules if m == 'meridian' or m.startswith('meridian.')); "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "MERIDIAN_CONFIG": str(tmp_path / "absent.toml")})
    assert result.returncode == 0, result.stderr[-2000:]


def test_invalid_meridian_toml_stops_an_engine_that_enabled_the_processor(vllm_config, invalid_toml_in_cwd,
                                                                         v2_states):
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm.v1.worker.gpu.sample.logits_processor.loader import build_custom_logits_processors

    from meridian.vllm._setup import MeridianSetupError

    message = r"meridian: invalid configuration in \S*meridian\.toml: .*scheduler\.max_think_tokens"
    with pytest.raises(MeridianSetupError, match=message):
        build_logitsprocs(vllm_config, torch.device("cpu"), False, False, ["meridian.vllm:ForceThinkEnd"])
    with pytest.raises(MeridianSetupError, match=message):
        build_custom_logits_processors(vllm_config, v2_states, False, ["meridian.vllm:ForceThinkEnd"])


# -- Model Runner V2: device reads ----------------------------------------------------------


class DeviceReads:
    """Counts reads of tensor data into Python during ``ForceThinkEnd.apply``:
    ``lp_v2.read_device`` calls (and their sizes) and every other way a
    tensor's values reach the host (``.cpu()``, ``.tolist()``, ``.item()``,
    ``.numpy()``, ``int()``/``bool()``/``float()``/index, ``.to("cpu")``),
    except reading the result of a ``read_device`` copy."""

    _METHODS = ("cpu", "tolist", "item", "numpy", "__int__", "__index__", "__bool__", "__float__")

    def __init__(self, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.copies: list[int] = []  # elements per read_device call
        self.other: list[str] = []
        self._copied: set[int] = set()
        self._inside = 0

    @contextlib.contextmanager
    def watching(self):
        with self.monkeypatch.context() as m:
            real_read = lp_v2.read_device

            def read_device(parts):
                self.copies.append(sum(int(p.numel()) for p in parts))
                self._inside += 1
                try:
                    return real_read(parts)
                finally:
                    self._inside -= 1

            m.setattr(lp_v2, "read_device", read_device)
            for name in self._METHODS:
                m.setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
            real_to = torch.Tensor.to

            def to(tensor, *args, **kwargs):
                target = kwargs.get("device", args[0] if args else None)
                if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
                    self.other.append("to(cpu)")
                return real_to(tensor, *args, **kwargs)

            m.setattr(torch.Tensor, "to", to)
            yield self

    def _wrap(self, name, real):
        def method(tensor, *args, **kwargs):
            if self._inside and name == "cpu":
                out = real(tensor, *args, **kwargs)
                self._copied.add(id(out))
                return out
            if not (name == "tolist" and id(tensor) in self._copied):
                self.other.append(name)
            return real(tensor, *args, **kwargs)

        return method


def v2_proc(vllm_config, states) -> ForceThinkEnd:
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcRequestState

    return ForceThinkEnd(vllm_config, LogitsProcRequestState.from_request_state(states))


def admit(proc, states, req_id: str, sp: SamplingParams, prompt=PROMPT) -> tuple[int, bool]:
    states.add_request(req_id, len(prompt), list(prompt), 0, sp.max_tokens)
    slot = states.req_id_to_index[req_id]
    return slot, proc.add_request(slot, sp)


def test_v2_reads_the_device_once_per_step_and_not_at_all_for_untracked_steps(vllm_config, cap4, v2_states,
                                                                            monkeypatch):
    states = v2_states
    proc = v2_proc(vllm_config, states)
    a, tracked_a = admit(proc, states, "a", params())  # thinks; cap 4
    b, tracked_b = admit(proc, states, "b", params(forcing=False))
    c, tracked_c = admit(proc, states, "c", SamplingParams(max_tokens=100), prompt=ANSWER_PROMPT)
    assert (tracked_a, tracked_b, tracked_c) == (True, False, True)
    proc.apply_staged_writes()
    flush(states)
    reads = DeviceReads(monkeypatch)
    gen = torch.Generator().manual_seed(5)

    def step(slots: list[int], sample: dict[int, int] | None = None) -> torch.Tensor:
        logits = torch.randn(len(slots), proc_vocab(states), generator=gen)
        ctx = context(states, slots)
        with reads.watching():
            proc.apply(logits, ctx)
        for row, slot in enumerate(slots):
            token = END_THINK if is_forced(logits[row]) else (sample or {}).get(slot, WORD)
            commit(states, slot, token)
        return logits

    step([b])  # a and c are tracked but not in this step
    assert (reads.copies, reads.other) == ([], [])
    step([a, b, c])  # first step: the prompts of a and c, in the one copy
    assert len(reads.copies) == 1 and reads.other == []
    assert reads.copies[0] == 2 * 3 + len(PROMPT) + len(ANSWER_PROMPT)
    for i in range(4):  # think tokens 1..4; </think> forced at the cap
        logits = step([a, b, c])
        assert is_forced(logits[0]) == (i == 3)
        if i == 0:  # c's first token is not <think>: an answer, forgotten
            assert set(proc._v2.slots) == {a}
    assert len(reads.copies) == 5 and reads.other == [] and max(reads.copies[1:]) == 2 * 3
    step([a, b, c])  # </think> landed: a needs nothing more
    assert proc._v2.slots == {} and not proc._v2.tracked.any()
    before = len(reads.copies)
    for _ in range(3):
        step([a, b, c])
    assert len(reads.copies) == before and reads.other == []
    assert proc.counters.forced["hard_cap"] == 1 and proc.counters.fallbacks == 0


def proc_vocab(states) -> int:
    return int(states.vocab_size)


def test_v2_forgets_requests_at_eos_and_at_max_tokens(vllm_config, cap4, v2_states, monkeypatch):
    states = v2_states
    proc = v2_proc(vllm_config, states)
    eos, _ = admit(proc, states, "eos", params())
    short, _ = admit(proc, states, "short", SamplingParams(max_tokens=2, extra_args={"meridian": {}}))
    flush(states)
    reads = DeviceReads(monkeypatch)

    def step(slots, sample):
        logits = torch.zeros(len(slots), proc_vocab(states))
        ctx = context(states, slots)
        with reads.watching():
            proc.apply(logits, ctx)
        for slot in slots:
            commit(states, slot, sample.get(slot, WORD))

    step([eos, short], {})  # samples output token 1 of each
    assert set(proc._v2.slots) == {eos, short}
    step([eos, short], {eos: IM_END})  # short samples its last (2nd) token: forgotten
    assert set(proc._v2.slots) == {eos}
    step([eos], {})  # the router sees EOS: forgotten
    assert proc._v2.slots == {}
    count = len(reads.copies)
    step([eos], {})
    assert len(reads.copies) == count == 3 and reads.other == []
    # A reused slot starts afresh.
    states.remove_request("eos")
    again, tracked = admit(proc, states, "again", params(max_think_tokens=1))
    assert tracked and again == eos and set(proc._v2.slots) == {again}


def test_v2_with_drafts_reads_once_and_forces_only_the_first_row(vllm_config, cap4, v2_states, monkeypatch):
    """Speculative decoding: a request owns a row per draft; tokens accepted
    several at once come from all_token_ids, in the step's one copy."""
    states = v2_states
    proc = v2_proc(vllm_config, states)
    a, _ = admit(proc, states, "a", params(max_think_tokens=3))
    flush(states)
    reads = DeviceReads(monkeypatch)
    ctx = context(states, [a])
    with reads.watching():
        proc.apply(torch.zeros(1, proc_vocab(states)), ctx)
    for _ in range(3):  # three tokens accepted in one step
        commit(states, a, WORD)
    last = int(states.total_len.gpu[a]) - 1
    logits = torch.zeros(2, proc_vocab(states))
    ctx = context(states, [a, a], local_pos=[0, 1], pos=[last, last + 1])
    with reads.watching():
        proc.apply(logits, ctx)
    assert is_forced(logits[0]) and not is_forced(logits[1])
    assert len(reads.copies) == 2 and reads.other == []
    assert reads.copies[1] == 4 * 2 + 3  # the layout of two rows, and the three new tokens


# -- the probe -------------------------------------------------------------------------------


class RaisingProbe:
    """An entropy probe whose kernel fails (as when the CUDA kernel is unavailable)."""

    def __init__(self) -> None:
        self.calls = 0

    def compute_batch(self, *args, **kwargs):
        self.calls += 1
        raise meridian.KernelError("EntropyProbe.compute_batch: CUDA kernel failed: no device")

    def release(self, req_id: int) -> bool:
        return False


def test_the_hard_cap_does_not_depend_on_the_probe_v1(vllm_config, cap4, caplog):
    """Issue #26's reproduction: cap 4, the probe raising KernelError, 10 steps."""
    proc = v1(vllm_config)
    probe = proc._core.probe = RaisingProbe()
    run = V1Runner(proc)
    out = run.add(0, params())
    late = run.add(1, params(min_think_tokens=6, max_think_tokens=7))
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="meridian.vllm"):
        for _ in range(10):
            run.step()
    assert out.index(END_THINK) == 4 and late.index(END_THINK) == 7
    assert out.count(END_THINK) == late.count(END_THINK) == 1
    c = proc.counters
    assert c.forced["hard_cap"] == 2 and c.probe_errors == probe.calls >= 4 and c.fallbacks == probe.calls
    assert not c.probe_on_host  # the logits are on the host: the CPU kernel itself failed; cap only
    records = [r for r in caplog.records if r.name == "meridian.vllm"]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    message = records[0].getMessage()
    assert "entropy probe raised KernelError" in message and "the hard cap" in message


def test_the_hard_cap_does_not_depend_on_the_probe_v2(vllm_config, cap4, v2_states, caplog):
    states = v2_states
    proc = v2_proc(vllm_config, states)
    probe = proc._core.probe = RaisingProbe()
    a, _ = admit(proc, states, "a", params())
    flush(states)
    caplog.clear()
    outputs = []
    with caplog.at_level(logging.DEBUG, logger="meridian.vllm"):
        for _ in range(10):
            logits = torch.randn(1, proc_vocab(states))
            proc.apply(logits, context(states, [a]))
            outputs.append(END_THINK if is_forced(logits[0]) else WORD)
            commit(states, a, outputs[-1])
    assert outputs == [WORD] * 4 + [END_THINK] + [WORD] * 5
    assert proc.counters.probe_errors == probe.calls >= 4
    assert len([r for r in caplog.records if r.name == "meridian.vllm"]) == 1


def test_a_build_without_the_cuda_kernel_probes_cuda_logits_on_the_cpu_kernel(vllm_config, cap4, caplog):
    if meridian.EntropyProbe.cuda_available():
        pytest.skip("this build has a usable CUDA kernel")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="meridian.vllm"):
        # Builds nothing on the device; each its own engine config (no idle duplicate).
        proc = ForceThinkEnd(VllmConfig(model_config=vllm_config.model_config), torch.device("cuda"), False)
    assert proc.counters.probe_on_host
    assert any("CPU kernel" in r.getMessage() for r in caplog.records if r.name == "meridian.vllm")
    on_host = v1(VllmConfig(model_config=vllm_config.model_config))
    assert not on_host.counters.probe_on_host


# -- end to end ----------------------------------------------------------------------------------


@pytest.fixture
def hostile_config_around(tmp_path, monkeypatch):
    """What once crashed or hung every vLLM process with Meridian installed: a ./meridian.toml
    whose table header has 40,000 parts (the TOML reader recursed until SIGSEGV) and
    $MERIDIAN_CONFIG naming a FIFO that nothing writes to (open() blocked forever)."""
    monkeypatch.delenv("MERIDIAN_MODEL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "meridian.toml").write_text("[" + ".".join(["a"] * 40000) + "]\nx = 1\n")
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("MERIDIAN_CONFIG", str(fifo))
    return tmp_path


@pytest.mark.e2e
def test_an_engine_without_meridian_starts_and_generates_next_to_a_hostile_meridian_config(hostile_config_around):
    """``LLM(...)`` without Meridian's flags, next to a ./meridian.toml built to crash the
    reader and a $MERIDIAN_CONFIG FIFO built to hang it: the engine starts and serves, no
    logits processor of Meridian's is built, nothing is forced."""
    import gc

    from vllm import LLM
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.inputs import TokensPrompt

    llm = LLM(model=str(TINY), load_format="dummy", enforce_eager=True, dtype="float32", max_model_len=256,
              max_num_seqs=2, seed=0)
    try:
        out = llm.generate([TokensPrompt(prompt_token_ids=list(PROMPT))],
                           SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True,
                                          extra_args={"meridian": {"max_think_tokens": 1}}))
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()
    tokens = list(out[0].outputs[0].token_ids)
    assert len(tokens) == 8 and END_THINK not in tokens
