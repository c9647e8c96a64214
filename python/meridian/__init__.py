"""Meridian: phase-aware scheduling for serving reasoning language models.

The configuration schema and the phase router are implemented in C++
(``meridian._meridian``); this package re-exports them. Nothing here imports
vLLM: the integration lives in ``meridian.vllm`` and is loaded only when
asked for.
"""
from __future__ import annotations

from ._meridian import (
    DisaggConfig,
    EntropyConfig,
    FabricKind,
    ForceReason,
    ForceResult,
    KvMemoryConfig,
    LoggingConfig,
    MeridianConfig,
    ModelConfig,
    Phase,
    PhaseEvent,
    PhaseEventKind,
    PhaseRouter,
    ReasoningParser,
    RequestIdMap,
    RequestSnapshot,
    RouterCounters,
    SchedulerConfig,
    TelemetryConfig,
    TokenizerVocab,
    __version__,
    builtin_model_presets,
    config_field_paths,
    find_default_config_file,
    parse_config,
    prompt_disables_thinking,
)
from .config import load_config

__all__ = [
    "DisaggConfig",
    "EntropyConfig",
    "FabricKind",
    "ForceReason",
    "ForceResult",
    "KvMemoryConfig",
    "LoggingConfig",
    "MeridianConfig",
    "ModelConfig",
    "Phase",
    "PhaseEvent",
    "PhaseEventKind",
    "PhaseRouter",
    "ReasoningParser",
    "RequestIdMap",
    "RequestSnapshot",
    "RouterCounters",
    "SchedulerConfig",
    "TelemetryConfig",
    "TokenizerVocab",
    "__version__",
    "builtin_model_presets",
    "config_field_paths",
    "find_default_config_file",
    "load_config",
    "parse_config",
    "prompt_disables_thinking",
]
