"""Errors a disaggregated KV fabric raises (the fabric protocol of ``meridian.disagg``).

The C++ offloader maps them to its fabric status codes when it drives a Python
fabric: FabricBusy is back-pressure (kBusy), FabricUnavailable a fabric or peer
that is down (kUnavailable), FabricTransferFailed a transfer that failed
(kFailed). None of them ever reaches the engine loop: the offloader falls back
to local eviction and counts it.
"""
from __future__ import annotations

__all__ = ["FabricError", "FabricBusy", "FabricUnavailable", "FabricTransferFailed"]


class FabricError(RuntimeError):
    """Base class of every fabric error."""


class FabricBusy(FabricError):
    """The fabric's queue, staging memory or remote arena is full: try later."""


class FabricUnavailable(FabricError, ConnectionError):
    """The fabric or its peer is down (dead process, refused connection)."""


class FabricTransferFailed(FabricError):
    """A transfer failed: an unregistered range, a peer that died mid-transfer, a timeout."""
