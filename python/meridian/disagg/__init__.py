"""Disaggregated KV transfer (ADR-0020): MRDN v1 frames over NIXL or Mooncake.

- The codec (``mrdn_encode``, ``mrdn_decode``, ``mrdn_decode_batch``,
  ``mrdn_checksum``, ``MrdnError``) and the C++ side (``KvOffloader``,
  ``HostBlockStore``, ``InProcessFabric``) come from the extension module.
- ``NixlFabric`` and ``MooncakeFabric`` are written over the ``nixl`` and
  ``mooncake`` Python packages, which are optional (``pip install --no-deps
  nixl==1.5.1 nixl-cu12==1.5.1 mooncake-transfer-engine-non-cuda==0.3.13.post1``);
  they are imported only when asked for, so ``import meridian.disagg`` works
  without them.
- ``python -m meridian.disagg.remote_tier`` runs the peer: a remote KV tier that
  registers a host-memory arena and publishes how to reach it in a directory.

A fabric is any object with ``push(payload) -> handle``, ``poll(handle) -> str``
("in_flight", "committed", "failed", "unknown"), ``pull(handle) -> bytes``,
``release(handle)``, ``label() -> str`` and ``health() -> dict``; it raises the
errors of ``meridian.disagg.errors``. ``KvOffloader`` accepts one and never
lets its exceptions reach the caller: they become counted fallbacks.
"""
from __future__ import annotations

from typing import Any

from .._meridian import (
    MRDN_HEADER_SIZE,
    MRDN_VERSION,
    BlockLocation,
    FabricStatus,
    HostBlockStore,
    InProcessFabric,
    IngestResult,
    IngestStatus,
    KvOffloadCounters,
    KvOffloader,
    KvOffloaderOptions,
    MrdnError,
    OffloadFallbackReason,
    OffloadProgress,
    OffloadStart,
    mrdn_checksum,
    mrdn_decode,
    mrdn_decode_batch,
    mrdn_encode,
)
from .errors import FabricBusy, FabricError, FabricTransferFailed, FabricUnavailable

__all__ = [
    "MRDN_HEADER_SIZE",
    "MRDN_VERSION",
    "BlockLocation",
    "FabricBusy",
    "FabricError",
    "FabricStatus",
    "FabricTransferFailed",
    "FabricUnavailable",
    "HostBlockStore",
    "InProcessFabric",
    "IngestResult",
    "IngestStatus",
    "KvOffloadCounters",
    "KvOffloader",
    "KvOffloaderOptions",
    "MooncakeFabric",
    "MrdnError",
    "NixlFabric",
    "OffloadFallbackReason",
    "OffloadProgress",
    "OffloadStart",
    "mrdn_checksum",
    "mrdn_decode",
    "mrdn_decode_batch",
    "mrdn_encode",
]


def __getattr__(name: str) -> Any:
    # The fabric classes import their (optional, large) transfer libraries.
    if name == "NixlFabric":
        from .nixl_fabric import NixlFabric

        return NixlFabric
    if name == "MooncakeFabric":
        from .mooncake_fabric import MooncakeFabric

        return MooncakeFabric
    raise AttributeError(f"module 'meridian.disagg' has no attribute {name!r}")
