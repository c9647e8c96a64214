"""Meridian's logging from ``[logging]``: the Python ``meridian`` logger (and
its children, ``meridian.vllm`` ...) and the C++ core's logger, with one level
and one format.

``configure_logging(config)`` gives the ``meridian`` logger its level and one
stderr handler in the chosen format; it does not touch the root logger or any
other logger, and calling it again replaces its own handler (idempotent).
Records still propagate to the root logger, so an application that
configured root handlers (or pytest's caplog) also sees them.

Formats (the C++ logger writes the same shapes):

* ``text``: ``[2026-01-31T12:00:00.123Z] [meridian.vllm] [warn] message``
* ``json``: one object per line,
  ``{"ts": "2026-01-31T12:00:00.123Z", "level": "warn", "logger": "meridian.vllm", "msg": "message"}``
  (plus ``"exc"`` with the traceback when one is logged).

Level names are the configuration's: ``trace`` (Python level 5), ``debug``,
``info``, ``warn``, ``error``, ``off`` (nothing from ``meridian``).
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

from . import _meridian

LOGGER_NAME = "meridian"
TRACE = 5  # below DEBUG; not registered with logging.addLevelName (that is process-wide)

#: [logging] level -> the Python level the ``meridian`` logger gets.
LEVELS: dict[str, int] = {
    "trace": TRACE,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 10,  # above every level: nothing is emitted
}
FORMATS = ("text", "json")

_lock = threading.Lock()


def _level_name(levelno: int) -> str:
    """The configuration's name for a Python level (the names the C++ side writes)."""
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    if levelno >= logging.INFO:
        return "info"
    if levelno >= logging.DEBUG:
        return "debug"
    return "trace"


def _utc_timestamp(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class TextFormatter(logging.Formatter):
    """``[ts] [logger] [level] message``, the C++ text format."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"[{_utc_timestamp(record.created)}] [{record.name}] [{_level_name(record.levelno)}] " \
               f"{record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg (and exc). Written with
    the stdlib ``json`` module, so any message, newlines and quotes included,
    yields one valid line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _utc_timestamp(record.created),
            "level": _level_name(record.levelno),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr`` (looked up per record, so a
    redirected stderr is honoured). Marked so configure_logging finds its own."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ assigns it
        pass


def _validated(config: Any) -> tuple[str, str]:
    logging_config = getattr(config, "logging", config)  # a MeridianConfig or its LoggingConfig
    level = str(logging_config.level)
    fmt = str(getattr(logging_config, "format", "text"))
    if level not in LEVELS:
        allowed = ", ".join(f'"{name}"' for name in LEVELS)
        raise ValueError(f"logging.level must be one of {allowed}; got {level!r}")
    if fmt not in FORMATS:
        allowed = ", ".join(f'"{name}"' for name in FORMATS)
        raise ValueError(f"logging.format must be one of {allowed}; got {fmt!r}")
    return level, fmt


def configure_logging(config: Any) -> logging.Logger:
    """Applies ``[logging]`` (a MeridianConfig or a LoggingConfig) to the Python
    ``meridian`` logger and to the C++ core's logger; returns the logger.
    ValueError naming the field on a bad level or format (nothing changed)."""
    level, fmt = _validated(config)
    logger = logging.getLogger(LOGGER_NAME)
    with _lock:
        _meridian.configure_logging(level, fmt)
        for handler in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
            logger.removeHandler(handler)
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
        logger.addHandler(handler)
        logger.setLevel(LEVELS[level])
    return logger
