"""Loading meridian.toml from Python. Parsing and validation are the C++
schema's (one schema, no second parser); errors are ValueError whose text
lists every problem with its dotted path, e.g.
``entropy.ema_alpha must be in (0, 1]; got 1.5 (at meridian.toml:3:13)``.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from ._meridian import MeridianConfig, find_default_config_file, load_config_files

PathLike = str | os.PathLike


def load_config(path: PathLike | Sequence[PathLike] | None = None) -> MeridianConfig:
    """Defaults overlaid by `path` (or several paths, later ones win).

    With no path, the first of $MERIDIAN_CONFIG, ./meridian.toml and
    ~/.config/meridian/meridian.toml that exists is used; if none does, the
    defaults (with the built-in model presets) are returned.
    """
    if path is None:
        found = find_default_config_file()
        if found is None:
            return MeridianConfig.defaults()
        paths = [found]
    elif isinstance(path, (str, os.PathLike)):
        paths = [path]
    else:
        paths = list(path)
    return load_config_files([os.fspath(p) for p in paths])
