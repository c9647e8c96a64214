"""The remote tier's peer file is untrusted input (issue 27): a Mooncake session id that is
not host:port with a numeric host and a port in 1..65535 is refused by name before it can
reach the transfer engine as something else."""
from __future__ import annotations

import json

import pytest

from meridian.disagg._fabric_common import PEER_FILE, session_problem, wait_for_peer
from meridian.disagg.errors import FabricUnavailable


@pytest.mark.parametrize("session, problem", [
    ("127.0.0.1:15000", ""),
    ("[::1]:15000", ""),
    ("::1:15000", "must put an IPv6 host in brackets"),
    ("999.1.1.1:80", "must name its host by a valid numeric IPv4 or IPv6 address"),
    ("localhost:80", "must name its host by a valid numeric IPv4 or IPv6 address"),
    ("peer.example:80", "must name its host by a valid numeric IPv4 or IPv6 address"),
    ("127.0.0.1:0", "has port '0'"),
    ("127.0.0.1:70000", "has port '70000'"),
    ("127.0.0.1:x", "has port 'x'"),
    ("15000", "must be host:port"),
    ("", "must be host:port"),
])
def test_a_session_id_is_checked_before_use(session, problem):
    found = session_problem(session)
    assert (problem in found) if problem else found == ""


def test_a_peer_file_with_a_bad_session_is_refused_naming_the_file(tmp_path):
    peer = {"fabric": "mooncake", "arena_addr": 4096, "arena_bytes": 1 << 20, "data_offset": 64, "pid": 1,
            "session": "256.0.0.1:15000"}
    (tmp_path / PEER_FILE).write_text(json.dumps(peer))
    with pytest.raises(FabricUnavailable, match=rf"{PEER_FILE}: session must name its host"):
        wait_for_peer(tmp_path, "mooncake", timeout_s=1)
    peer["session"] = "127.0.0.1:15000"
    (tmp_path / PEER_FILE).write_text(json.dumps(peer))
    assert wait_for_peer(tmp_path, "mooncake", timeout_s=1).session == "127.0.0.1:15000"
