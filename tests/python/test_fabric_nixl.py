"""NixlFabric against a real remote tier in a second process: NIXL 1.5.1 over UCX
on loopback TCP (UCX_TLS=tcp,self UCX_NET_DEVICES=lo), metadata through files
(fabric_rig.py). Every wait is bounded; the peer exits by itself."""
from __future__ import annotations

import random
import subprocess
import sys

import fabric_rig
import pytest

from meridian.disagg.errors import FabricBusy, FabricTransferFailed, FabricUnavailable

ARENA_BYTES = 16 << 20


def _fabric(directory, **kwargs):
    return fabric_rig.fabric_class("nixl")(directory, timeout_s=5.0, **kwargs)


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    fabric_rig.fabric_class("nixl")
    tier = fabric_rig.RemoteTier("nixl", tmp_path_factory.mktemp("nixl-peer"), ARENA_BYTES)
    yield tier
    tier.stop()


@pytest.fixture
def fabric(peer):
    # One producer per remote tier at a time (producer.lock): each test closes its own.
    with _fabric(peer.dir) as fab:
        yield fab


def test_one_producer_per_remote_tier(fabric, peer):
    with pytest.raises(FabricUnavailable, match="already has a producer"):
        _fabric(peer.dir)


def test_label_and_health(fabric):
    assert fabric.label() == "nixl"
    health = fabric.health()
    assert health["up"] is True
    assert 0 < health["capacity_bytes"] < ARENA_BYTES
    assert set(health) == {"up", "in_flight", "stored_bytes", "capacity_bytes", "detail"}


def test_every_byte_round_trip(fabric, peer):
    fabric_rig.every_byte_round_trip(fabric, peer, random.Random(1))


def test_corrupt_payloads_counted_by_the_peer(fabric, peer):
    fabric_rig.corrupt_payloads_counted(fabric, peer, random.Random(2))


def test_unregistered_range_fails_cleanly(peer, tmp_path):
    fabric_rig.unregistered_range(_fabric, peer, tmp_path, FabricTransferFailed, r"not registered by agent meridian-remote-tier")


def test_in_flight_bound_is_back_pressure(peer):
    rng = random.Random(3)
    with _fabric(peer.dir, max_inflight=1) as fab:
        first = fab.push(fabric_rig.batch(rng, 1))  # not polled yet: still counts as in flight
        with pytest.raises(FabricBusy, match="in flight"):
            fab.push(fabric_rig.batch(rng, 1))
        fabric_rig.wait_committed(fab, [first])
        fabric_rig.wait_committed(fab, [fab.push(fabric_rig.batch(rng, 1))])


def test_staging_bound_is_back_pressure(peer):
    with _fabric(peer.dir, staging_bytes=64 << 10) as fab:
        with pytest.raises(FabricBusy, match="staging"):
            fab.push(fabric_rig.frame(bytes(128 << 10)))


def test_arena_full_is_back_pressure(tmp_path):
    tier = fabric_rig.RemoteTier("nixl", tmp_path / "small", 256 << 10)
    try:
        with _fabric(tier.dir) as fab:
            fabric_rig.back_pressure(fab, tier, random.Random(4), FabricBusy)
    finally:
        tier.stop()


def test_dead_peer_is_unavailable_not_a_hang(tmp_path):
    tier = fabric_rig.RemoteTier("nixl", tmp_path / "doomed", 4 << 20)
    try:
        with _fabric(tier.dir) as fab:
            fabric_rig.dead_peer(fab, tier, random.Random(5), FabricUnavailable, FabricTransferFailed)
    finally:
        tier.stop()


def test_no_peer_is_unavailable(tmp_path):
    with pytest.raises(FabricUnavailable, match="remote_tier"):
        fabric_rig.fabric_class("nixl")(tmp_path, connect_timeout_s=0.2)


@pytest.mark.parametrize("args, message", [
    (["--dir", "{file}"], "--dir {file}: is not a directory"),
    (["--dir", "{tmp}/d", "--arena-bytes", "99999999999999999"],
     "--arena-bytes 99999999999999999: cannot allocate an arena that large"),
    (["--dir", "{tmp}/d", "--arena-bytes", "10"], "--arena-bytes 10 leaves no room for data"),
    (["--dir", "{tmp}/d", "--arena-bytes", "-5"], "--arena-bytes must be > 0; got -5"),
    (["--dir", "{tmp}/d", "--deadline-s", "nan"], "--deadline-s must be a finite number >= 0; got nan"),
])
def test_the_remote_tier_refuses_bad_input_in_one_line_with_exit_2(tmp_path, args, message):
    """Issue 27: a --dir that is a file, or an arena it cannot map, ended in a traceback."""
    afile = tmp_path / "a-file"
    afile.write_text("")
    fill = {"file": afile, "tmp": tmp_path}
    cmd = [sys.executable, "-m", "meridian.disagg.remote_tier", "--fabric", "nixl",
           *(a.format(**fill) for a in args)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message.format(**fill) in result.stderr
    assert "Traceback" not in result.stderr
