// MRDN v1 codec (meridian/mrdn.h): known-answer vectors (tests/data/mrdn_vectors.json,
// written independently with Python's struct and the PyPI blake3 package), round trips,
// every single-byte corruption and every truncation of a frame, batches, and messages.
#include "meridian/mrdn.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "source_path.h"
#include <sys/mman.h>

namespace meridian::mrdn {
namespace {

using Bytes = std::vector<std::byte>;

/// The official BLAKE3 test vectors' input: byte i is i % 251.
Bytes pattern_body(std::size_t size) {
  Bytes body(size);
  for (std::size_t i = 0; i < size; ++i) body[i] = static_cast<std::byte>(i % 251);
  return body;
}

Bytes from_hex(const std::string& hex) {
  Bytes out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

Bytes from_u8(const std::vector<std::uint8_t>& in) {
  Bytes out(in.size());
  std::transform(in.begin(), in.end(), out.begin(), [](std::uint8_t b) { return std::byte{b}; });
  return out;
}

Bytes frame_of(BlockTier tier, const Bytes& body) {
  Bytes out;
  encode_append(tier, body, out);
  return out;
}

std::uint32_t u32_at(const Bytes& b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(b[at + i]) << (8 * i);
  return v;
}

nlohmann::json load_vectors() {
  std::ifstream in(meridian::test::source_path("tests/data/mrdn_vectors.json"));
  EXPECT_TRUE(in.good()) << "tests/data/mrdn_vectors.json is missing";
  return nlohmann::json::parse(in);
}

TEST(MrdnVectors, EncodeMatchesTheCheckedInFrames) {
  const nlohmann::json doc = load_vectors();
  ASSERT_EQ(doc["vectors"].size(), 8U);
  for (const auto& v : doc["vectors"]) {
    const auto size = v["body_len"].get<std::size_t>();
    SCOPED_TRACE("body_len " + std::to_string(size));
    const Bytes body = pattern_body(size);
    const auto tier = static_cast<BlockTier>(v["tier"].get<int>());
    const Bytes frame = frame_of(tier, body);
    ASSERT_EQ(frame.size(), kHeaderSize + size);
    const Bytes header(frame.begin(), frame.begin() + kHeaderSize);
    EXPECT_EQ(header, from_hex(v["header_hex"].get<std::string>()));
    EXPECT_TRUE(std::equal(body.begin(), body.end(), frame.begin() + kHeaderSize));
    const auto sum = checksum(body);
    EXPECT_EQ(Bytes(sum.begin(), sum.end()), from_hex(v["checksum"].get<std::string>()));

    const DecodeResult decoded = decode(frame);
    ASSERT_TRUE(decoded.ok()) << decoded.message();
    EXPECT_EQ(decoded.frame.tier, tier);
    EXPECT_EQ(decoded.frame.frame_size, frame.size());
    EXPECT_EQ(decoded.frame.checksum, sum);
    // Zero-copy: the body view points into the decoded buffer.
    EXPECT_EQ(decoded.frame.body.data(), frame.data() + kHeaderSize);
    EXPECT_EQ(decoded.frame.body.size(), size);
  }
}

TEST(MrdnVectors, ChecksumIsTheOfficialBlake3Prefix) {
  const nlohmann::json doc = load_vectors();
  const auto empty = checksum({});
  EXPECT_EQ(Bytes(empty.begin(), empty.end()),
            from_hex(doc["official_blake3"]["empty"].get<std::string>().substr(0, 2 * kChecksumSize)));
  const Bytes zero{std::byte{0}};
  const auto one = checksum(zero);
  EXPECT_EQ(
      Bytes(one.begin(), one.end()),
      from_hex(doc["official_blake3"]["one_zero_byte"].get<std::string>().substr(0, 2 * kChecksumSize)));
}

RC_GTEST_PROP(MrdnProperty, RoundTripsAnyTierAndBody, ()) {
  const auto tier = static_cast<BlockTier>(*rc::gen::inRange(0, 3));
  const Bytes body = from_u8(*rc::gen::arbitrary<std::vector<std::uint8_t>>());
  const Bytes frame = frame_of(tier, body);
  RC_ASSERT(frame.size() == frame_size(body.size()));
  // encode_into writes the same bytes as encode_append.
  Bytes direct(frame.size() + 7, std::byte{0xAA});
  RC_ASSERT(encode_into(tier, body, direct) == frame.size());
  RC_ASSERT(std::equal(frame.begin(), frame.end(), direct.begin()));
  const DecodeResult decoded = decode(frame);
  RC_ASSERT(decoded.ok());
  RC_ASSERT(decoded.frame.tier == tier);
  RC_ASSERT(std::equal(body.begin(), body.end(), decoded.frame.body.begin(), decoded.frame.body.end()));
  // Trailing bytes (the next frame) are not part of this one.
  const DecodeResult with_tail = decode(direct);
  RC_ASSERT(with_tail.ok());
  RC_ASSERT(with_tail.frame.frame_size == frame.size());
}

RC_GTEST_PROP(MrdnProperty, BatchesDecodeFrameByFrame, ()) {
  const auto tiers = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 3));
  std::vector<Bytes> bodies;
  Bytes batch;
  for (const int tier : tiers) {
    bodies.push_back(from_u8(*rc::gen::container<std::vector<std::uint8_t>>(
        *rc::gen::inRange<std::size_t>(0, 300), rc::gen::arbitrary<std::uint8_t>())));
    encode_append(static_cast<BlockTier>(tier), bodies.back(), batch);
  }
  const BatchDecodeResult decoded = decode_batch(batch);
  RC_ASSERT(decoded.error.ok());
  RC_ASSERT(decoded.frames.size() == tiers.size());
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    RC_ASSERT(decoded.frames[i].tier == static_cast<BlockTier>(tiers[i]));
    RC_ASSERT(std::equal(bodies[i].begin(), bodies[i].end(), decoded.frames[i].body.begin(),
                         decoded.frames[i].body.end()));
  }
}

/// What a frame with one byte changed must decode to, derived from the layout
/// and the check order (magic, version, tier, padding, body_len, checksum).
struct Expected {
  DecodeStatus status;
  std::uint64_t offset;
};

Expected expected_after_change(const Bytes& changed, std::size_t at, std::size_t body_size) {
  if (at < 4) return {DecodeStatus::kBadMagic, 0};
  if (at < 8) return {DecodeStatus::kUnsupportedVersion, 4};
  if (at < 12) {
    // body_len: longer than the buffer holds, or a shorter body whose checksum differs.
    return u32_at(changed, 8) > body_size ? Expected{DecodeStatus::kTruncatedBody, changed.size()}
                                          : Expected{DecodeStatus::kChecksumMismatch, 16};
  }
  if (at == 12) {
    return std::to_integer<unsigned>(changed[12]) > 2 ? Expected{DecodeStatus::kBadTier, 12}
                                                      : Expected{DecodeStatus::kOk, 0};
  }
  if (at < 16) return {DecodeStatus::kNonzeroPadding, at};
  return {DecodeStatus::kChecksumMismatch, 16};
}

TEST(MrdnCorruption, EveryByteOfAFrameEveryChange) {
  const Bytes body = pattern_body(9);
  const Bytes frame = frame_of(BlockTier::kThinkActive, body);
  for (std::size_t at = 0; at < frame.size(); ++at) {
    for (unsigned mask = 1; mask < 256; ++mask) {
      Bytes changed = frame;
      changed[at] ^= static_cast<std::byte>(mask);
      const Expected want = expected_after_change(changed, at, body.size());
      const DecodeResult got = decode(changed);
      ASSERT_EQ(got.status, want.status) << "byte " << at << " ^ " << mask << ": " << got.message();
      ASSERT_EQ(got.offset, want.offset) << "byte " << at << " ^ " << mask << ": " << got.message();
      if (!got.ok()) {
        ASSERT_NE(got.message().find("at byte " + std::to_string(want.offset) + ":"), std::string::npos)
            << got.message();
      }
    }
  }
}

TEST(MrdnCorruption, TierIsNotCoveredByTheChecksum) {
  // The checksum covers the body only (ADR): a tier byte changed to another
  // valid tier decodes, with that tier. Recorded so the limitation stays visible.
  Bytes frame = frame_of(BlockTier::kThinkActive, pattern_body(9));
  frame[12] = std::byte{2};
  const DecodeResult got = decode(frame);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.frame.tier, BlockTier::kOutputCritical);
}

TEST(MrdnCorruption, EveryTruncation) {
  const Bytes frame = frame_of(BlockTier::kOutputCritical, pattern_body(20));
  for (std::size_t length = 0; length < frame.size(); ++length) {
    // An exact-size copy, so a sanitizer build catches any read past the end.
    const Bytes prefix(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(length));
    const DecodeResult got = decode(prefix);
    if (length < kHeaderSize) {
      EXPECT_EQ(got.status, DecodeStatus::kShortHeader) << length;
      EXPECT_EQ(got.offset, 0U);
      EXPECT_EQ(got.found, length);
    } else {
      EXPECT_EQ(got.status, DecodeStatus::kTruncatedBody) << length;
      EXPECT_EQ(got.offset, length);
      EXPECT_EQ(got.expected, 20U);
    }
  }
}

TEST(MrdnBatch, TruncatedSecondFrameKeepsTheFirst) {
  Bytes batch = frame_of(BlockTier::kThinkComplete, pattern_body(5));
  const std::size_t first = batch.size();
  encode_append(BlockTier::kThinkActive, pattern_body(40), batch);
  for (std::size_t length = first + 1; length < batch.size(); ++length) {
    const Bytes prefix(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(length));
    const BatchDecodeResult got = decode_batch(prefix);
    ASSERT_EQ(got.frames.size(), 1U);
    const bool header_cut = length - first < kHeaderSize;
    EXPECT_EQ(got.error.status, header_cut ? DecodeStatus::kShortHeader : DecodeStatus::kTruncatedBody);
    EXPECT_EQ(got.error.offset, header_cut ? first : length);
  }
}

TEST(MrdnBatch, OffsetsAreAbsolute) {
  Bytes batch = frame_of(BlockTier::kThinkComplete, pattern_body(5));
  const std::size_t second = batch.size();
  encode_append(BlockTier::kThinkActive, pattern_body(7), batch);
  batch[second + 14] = std::byte{1};
  const BatchDecodeResult got = decode_batch(batch);
  ASSERT_EQ(got.frames.size(), 1U);
  EXPECT_EQ(got.error.status, DecodeStatus::kNonzeroPadding);
  EXPECT_EQ(got.error.offset, second + 14);
  EXPECT_EQ(decode(std::span<const std::byte>(batch).subspan(second), 1000).offset, 1014U);
}

TEST(MrdnBatch, EmptyBufferIsAnEmptyBatch) {
  const BatchDecodeResult got = decode_batch({});
  EXPECT_TRUE(got.error.ok());
  EXPECT_TRUE(got.frames.empty());
}

TEST(MrdnDecode, ReadsFromAnUnalignedAddress) {
  const Bytes frame = frame_of(BlockTier::kThinkActive, pattern_body(33));
  Bytes shifted(frame.size() + 1);
  std::copy(frame.begin(), frame.end(), shifted.begin() + 1);
  const DecodeResult got = decode(std::span<const std::byte>(shifted).subspan(1));
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(got.frame.body.size(), 33U);
}

TEST(MrdnMessages, NameWhatAndWhere) {
  Bytes frame = frame_of(BlockTier::kThinkActive, pattern_body(4));
  Bytes bad_magic = frame;
  bad_magic[3] = std::byte{'O'};
  EXPECT_EQ(decode(bad_magic).message(), "MRDN v1: bad magic at byte 0: expected \"MRDN\", got 4d 52 44 4f");
  Bytes bad_version = frame;
  bad_version[4] = std::byte{2};
  EXPECT_EQ(decode(bad_version).message(),
            "MRDN v1: unsupported version at byte 4: got 2, this build reads version 1");
  Bytes bad_tier = frame;
  bad_tier[12] = std::byte{7};
  EXPECT_NE(decode(bad_tier).message().find("bad tier at byte 12: got 7"), std::string::npos);
  Bytes bad_pad = frame;
  bad_pad[15] = std::byte{0x80};
  EXPECT_NE(decode(bad_pad).message().find("nonzero padding at byte 15: got 0x80"), std::string::npos);
  Bytes bad_body = frame;
  bad_body[kHeaderSize] ^= std::byte{1};
  const DecodeResult mismatch = decode(bad_body);
  EXPECT_NE(mismatch.message().find("checksum mismatch at byte 16: header has "), std::string::npos);
  EXPECT_NE(mismatch.computed_checksum, mismatch.frame.checksum);
  EXPECT_EQ(mismatch.computed_checksum, checksum(mismatch.frame.body));
  EXPECT_EQ(decode(std::span<const std::byte>(frame).first(5)).message(),
            "MRDN v1: short header at byte 0: a frame header is 32 bytes, only 5 left");
  EXPECT_EQ(
      decode(std::span<const std::byte>(frame).first(34)).message(),
      "MRDN v1: truncated body at byte 34: body_len says 4 bytes but the buffer ends after 2 body bytes");
}

TEST(MrdnMessages, StatusNamesAreDistinct) {
  std::vector<std::string_view> names;
  for (int s = 0; s <= static_cast<int>(DecodeStatus::kChecksumMismatch); ++s) {
    names.push_back(to_string(static_cast<DecodeStatus>(s)));
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(to_string(DecodeStatus::kChecksumMismatch), "checksum_mismatch");
}

TEST(MrdnDecodeOrThrow, ThrowsWireFormatErrorWithStatusAndOffset) {
  Bytes frame = frame_of(BlockTier::kThinkComplete, pattern_body(3));
  EXPECT_EQ(decode_or_throw(frame).body.size(), 3U);
  frame[13] = std::byte{9};
  try {
    (void)decode_or_throw(frame);
    FAIL() << "no exception";
  } catch (const WireFormatError& e) {
    EXPECT_EQ(e.status(), DecodeStatus::kNonzeroPadding);
    EXPECT_EQ(e.offset(), 13U);
    EXPECT_EQ(std::string(e.what()), decode(frame).message());
  }
}

TEST(MrdnEncode, RejectsBadTierAndShortOutput) {
  const Bytes body = pattern_body(10);
  Bytes out(kHeaderSize + 9);
  EXPECT_THROW((void)encode_into(BlockTier::kThinkActive, body, out), InvalidArgument);
  out.resize(kHeaderSize + 10);
  EXPECT_THROW((void)encode_into(static_cast<BlockTier>(3), body, out), InvalidArgument);
  Bytes appended{std::byte{1}};
  EXPECT_THROW(encode_append(static_cast<BlockTier>(200), body, appended), InvalidArgument);
  EXPECT_EQ(appended, Bytes{std::byte{1}});  // unchanged after the failure
}

TEST(MrdnEncode, RejectsABodyOverFourGiB) {
  // 4 GiB + 1 bytes of untouched, lazily mapped memory: encode must refuse it
  // from its size alone, before reading or allocating anything.
  const std::size_t size = kMaxBodyBytes + 1;
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) GTEST_SKIP() << "cannot map 4 GiB of address space here";
  const std::span<const std::byte> body(static_cast<const std::byte*>(mapping), size);
  Bytes out;
  try {
    encode_append(BlockTier::kThinkComplete, body, out);
    ADD_FAILURE() << "no exception";
  } catch (const WireFormatError& e) {
    EXPECT_EQ(e.status(), DecodeStatus::kOversizedBody);
    EXPECT_EQ(e.offset(), 8U);
    EXPECT_NE(std::string(e.what()).find("oversized body at byte 8: 4294967296 bytes"), std::string::npos);
  }
  EXPECT_TRUE(out.empty());
  Bytes small(64);
  EXPECT_THROW((void)encode_into(BlockTier::kThinkComplete, body, small), WireFormatError);
  munmap(mapping, size);
}

}  // namespace
}  // namespace meridian::mrdn
