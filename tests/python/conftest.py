import importlib.metadata
import os
import pathlib
import tempfile

import pytest

# The real vLLM on a CPU-only machine, offline, writing nothing under $HOME
# (docs/deployment.md#testing-against-the-real-vllm). Set before any test
# imports vLLM; a value already in the environment wins.
for _key, _value in {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}.items():
    os.environ.setdefault(_key, _value)

REPO = pathlib.Path(__file__).resolve().parents[2]


def _vllm_cache_root() -> str:
    """One vLLM cache per installed vLLM, in the build tree: every worker, stage and run shares
    it. vLLM keeps the model-class inspection there (``modelinfos/``, keyed on the model file's
    hash, written atomically); without it every engine start re-inspects Qwen3 in a child
    interpreter, about 19 CPU-seconds each."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        path = REPO / "build" / "vllm-cache" / f"{dist}-{version}"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)
    return tempfile.mkdtemp(prefix="meridian-vllm-cache-")  # no vLLM here: nothing will use it


os.environ.setdefault("VLLM_CACHE_ROOT", _vllm_cache_root())

DATA = REPO / "tests" / "data"


@pytest.fixture
def repo() -> pathlib.Path:
    return REPO


@pytest.fixture
def meridian_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("MERIDIAN_BIN", REPO / "build" / "bin" / "meridian"))
    if not path.exists():
        pytest.fail(f"meridian CLI not found at {path}: run `make build` (or set MERIDIAN_BIN)")
    return path


@pytest.fixture
def qwen3_tokenizer() -> pathlib.Path:
    return DATA / "qwen3" / "tokenizer.json"


def pytest_collection_modifyitems(config, items):
    """Modules marked ``slow(seconds)`` first, longest first; the rest keep their order.

    `make test` runs pytest-xdist with ``--dist loadscope``: each module goes whole to the next
    free worker (so a module's engine or server fixture starts once). Handing out the long
    modules first keeps one worker from starting an 80 s module while the other has finished."""
    def cost(item: pytest.Item) -> float:
        marker = item.get_closest_marker("slow")
        return -float(marker.args[0]) if marker and marker.args else 0.0

    items.sort(key=cost)  # stable: the order within a module and among the rest is kept
