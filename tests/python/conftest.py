import os
import pathlib

import pytest

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
