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
os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="meridian-vllm-cache-"))

REPO = pathlib.Path(__file__).resolve().parents[2]
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
