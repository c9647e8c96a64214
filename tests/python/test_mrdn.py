"""MRDN v1 codec from Python (meridian.mrdn_*): the checked-in known-answer
vectors recomputed with struct and the PyPI ``blake3`` package, checksums
cross-checked against that package over many sizes and input types, round
trips, and every error status with its byte offset."""

from __future__ import annotations

import hashlib
import json
import mmap
import random
import struct

import blake3
import numpy as np
import pytest

import meridian
from conftest import DATA

VECTORS = json.loads((DATA / "mrdn_vectors.json").read_text())
HEADER = struct.Struct("<4sIIB3x16s")  # magic, version, body_len, tier, 3 pad bytes, checksum


def pattern(size: int) -> bytes:
    """The official BLAKE3 test vectors' input: byte i is i % 251."""
    return bytes(i % 251 for i in range(size))


def reference_frame(tier: int, body: bytes) -> bytes:
    """An MRDN v1 frame built without Meridian: struct + the PyPI blake3 package."""
    return HEADER.pack(b"MRDN", 1, len(body), tier, blake3.blake3(body).digest()[:16]) + body


def error_of(call, *args) -> meridian.MrdnError:
    with pytest.raises(meridian.MrdnError) as info:
        call(*args)
    return info.value


def test_constants():
    assert meridian.MRDN_HEADER_SIZE == HEADER.size == 32
    assert meridian.MRDN_VERSION == 1
    assert issubclass(meridian.MrdnError, ValueError)


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: f"body_len={v['body_len']}")
def test_checked_in_vectors_match_blake3_and_the_codec(vector):
    body = pattern(vector["body_len"])
    expected = reference_frame(vector["tier"], body)
    # The file agrees with an independent recomputation...
    assert vector["checksum"] == blake3.blake3(body).digest()[:16].hex()
    assert vector["header_hex"] == expected[:32].hex()
    assert vector["frame_sha256"] == hashlib.sha256(expected).hexdigest()
    # ...and the codec agrees with the file.
    frame = meridian.mrdn_encode(vector["tier"], body)
    assert frame == expected
    assert meridian.mrdn_checksum(body).hex() == vector["checksum"]
    tier, decoded, frame_size = meridian.mrdn_decode(frame)
    assert tier == meridian.BlockTier(vector["tier"])
    assert decoded == body
    assert frame_size == len(frame)


def test_official_blake3_values():
    official = VECTORS["official_blake3"]
    assert blake3.blake3(b"").hexdigest() == official["empty"]
    assert blake3.blake3(b"\0").hexdigest() == official["one_zero_byte"]
    assert meridian.mrdn_checksum(b"").hex() == official["empty"][:32]
    assert meridian.mrdn_checksum(b"\0").hex() == official["one_zero_byte"][:32]


def test_checksum_matches_blake3_over_many_sizes():
    # Chunk (1024) and SIMD-batch boundaries, and sizes large enough for the
    # widest assembly path the CPU has.
    rng = random.Random(17)
    sizes = list(range(0, 70)) + [1023, 1024, 1025, 2047, 2048, 2049, 4096, 8191, 16384, 65537, (1 << 20) + 3]
    for size in sizes:
        data = rng.randbytes(size)
        assert meridian.mrdn_checksum(data) == blake3.blake3(data).digest()[:16], size


@pytest.mark.parametrize(
    "wrap",
    [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, dtype=np.uint8)],
    ids=["bytes", "bytearray", "memoryview", "numpy"],
)
def test_bytes_like_inputs(wrap):
    body = pattern(3000)
    frame = meridian.mrdn_encode(meridian.BlockTier.THINK_ACTIVE, wrap(body))
    assert frame == reference_frame(1, body)
    assert meridian.mrdn_decode(wrap(frame))[1] == body
    assert meridian.mrdn_checksum(wrap(body)) == blake3.blake3(body).digest()[:16]


def test_round_trip_random_batches():
    rng = random.Random(1)
    for _ in range(50):
        frames = [(rng.randrange(3), rng.randbytes(rng.randrange(0, 5000))) for _ in range(rng.randrange(0, 8))]
        batch = b"".join(meridian.mrdn_encode(tier, body) for tier, body in frames)
        assert batch == b"".join(reference_frame(tier, body) for tier, body in frames)
        decoded = meridian.mrdn_decode_batch(batch)
        assert [(int(tier.value), body) for tier, body in decoded] == frames


def test_decode_ignores_bytes_after_the_frame():
    frame = meridian.mrdn_encode(2, b"abc")
    tier, body, frame_size = meridian.mrdn_decode(frame + meridian.mrdn_encode(0, b"next"))
    assert (tier, body, frame_size) == (meridian.BlockTier.OUTPUT_CRITICAL, b"abc", 35)


def corrupt(frame: bytes, at: int, value: int) -> bytes:
    out = bytearray(frame)
    out[at] = value
    return bytes(out)


FRAME = reference_frame(1, pattern(10))


@pytest.mark.parametrize(
    ("buffer", "status", "offset", "text"),
    [
        (FRAME[:31], "short_header", 0, "a frame header is 32 bytes, only 31 left"),
        (corrupt(FRAME, 3, ord("O")), "bad_magic", 0, 'expected "MRDN", got 4d 52 44 4f'),
        (corrupt(FRAME, 4, 2), "unsupported_version", 4, "got 2"),
        (FRAME[:-1], "truncated_body", 41, "body_len says 10 bytes"),
        (corrupt(FRAME, 12, 3), "bad_tier", 12, "got 3"),
        (corrupt(FRAME, 14, 0xFF), "nonzero_padding", 14, "got 0xff"),
        (corrupt(FRAME, 40, 0), "checksum_mismatch", 16, "BLAKE3 of the 10-byte body"),
        (corrupt(FRAME, 20, 0), "checksum_mismatch", 16, "header has"),
    ],
)
def test_every_error_names_its_status_and_offset(buffer, status, offset, text):
    for decode in (meridian.mrdn_decode, meridian.mrdn_decode_batch):
        error = error_of(decode, buffer)
        assert error.status == status
        assert error.offset == offset
        assert f"at byte {offset}:" in str(error)
        assert text in str(error)


def test_batch_error_offset_is_absolute():
    first = meridian.mrdn_encode(0, b"x" * 7)
    second = corrupt(meridian.mrdn_encode(1, b"y" * 5), 13, 1)
    error = error_of(meridian.mrdn_decode_batch, first + second)
    assert (error.status, error.offset) == ("nonzero_padding", len(first) + 13)
    error = error_of(meridian.mrdn_decode_batch, first + second[:20])
    assert (error.status, error.offset) == ("short_header", len(first))


def test_every_single_byte_change_is_caught_or_only_moves_the_tier():
    for at in range(len(FRAME)):
        for mask in (0x01, 0x80, 0xFF):
            changed = corrupt(FRAME, at, FRAME[at] ^ mask)
            try:
                tier, body, _ = meridian.mrdn_decode(changed)
            except meridian.MrdnError as error:
                assert 0 <= error.offset <= len(changed)
                continue
            # The checksum covers the body only: a tier byte flipped to another valid tier decodes.
            assert at == 12 and body == FRAME[32:] and tier != meridian.BlockTier.THINK_ACTIVE


def test_oversized_body_is_refused_before_reading_it():
    size = 2**32  # one byte over the u32 body_len
    try:
        # Anonymous, untouched, MAP_NORESERVE (0x4000 on Linux): costs address space, not memory.
        body = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, prot=mmap.PROT_READ)
    except (OSError, OverflowError, ValueError) as why:
        pytest.skip(f"cannot map 4 GiB of address space here: {why}")
    try:
        error = error_of(meridian.mrdn_encode, 0, body)
        assert (error.status, error.offset) == ("oversized_body", 8)
        assert "4294967296 bytes" in str(error)
    finally:
        body.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="tier 3 is not a BlockTier"):
        meridian.mrdn_encode(3, b"")
    with pytest.raises(ValueError, match="tier -1 is not a BlockTier"):
        meridian.mrdn_encode(-1, b"")
    with pytest.raises(TypeError, match="tier must be a meridian.BlockTier or an int"):
        meridian.mrdn_encode("think", b"")
    with pytest.raises(TypeError, match="body must be a contiguous bytes-like object"):
        meridian.mrdn_encode(0, "text")
    with pytest.raises(TypeError, match="buffer must be a contiguous bytes-like object"):
        meridian.mrdn_decode(memoryview(bytes(64))[::2])
