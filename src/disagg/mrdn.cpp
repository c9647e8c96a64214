// MRDN v1 codec (meridian/mrdn.h). Every header field is written and read
// byte by byte in little-endian order, so the wire layout does not depend on
// the host's endianness or on struct padding.
#include "meridian/mrdn.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "blake3.h"

namespace meridian::mrdn {
namespace {

constexpr std::size_t kMagicOffset = 0;
constexpr std::size_t kVersionOffset = 4;
constexpr std::size_t kBodyLenOffset = 8;
constexpr std::size_t kTierOffset = 12;
constexpr std::size_t kPaddingOffset = 13;
constexpr std::size_t kPaddingSize = 3;
constexpr std::size_t kChecksumOffset = 16;
constexpr std::array<std::byte, 4> kMagic = {std::byte{'M'}, std::byte{'R'}, std::byte{'D'}, std::byte{'N'}};

void put_u32_le(std::byte* out, std::uint32_t value) noexcept {
  for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFU);
}

std::uint32_t get_u32_le(const std::byte* in) noexcept {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) value |= std::to_integer<std::uint32_t>(in[i]) << (8 * i);
  return value;
}

std::string hex(std::span<const std::byte> bytes, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i > 0) out += separator;
    out += fmt::format("{:02x}", std::to_integer<unsigned>(bytes[i]));
  }
  return out;
}

DecodeResult failure(DecodeStatus status, std::uint64_t offset, std::uint64_t found,
                     std::uint64_t expected) noexcept {
  DecodeResult result;
  result.status = status;
  result.offset = offset;
  result.found = found;
  result.expected = expected;
  return result;
}

bool valid_tier(std::uint8_t tier) noexcept { return tier < kBlockTierCount; }

}  // namespace

WireFormatError::WireFormatError(DecodeStatus status, std::uint64_t offset, const std::string& message)
    : Error(message), status_(status), offset_(offset) {}

std::string_view to_string(DecodeStatus status) noexcept {
  switch (status) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kShortHeader: return "short_header";
    case DecodeStatus::kBadMagic: return "bad_magic";
    case DecodeStatus::kUnsupportedVersion: return "unsupported_version";
    case DecodeStatus::kTruncatedBody: return "truncated_body";
    case DecodeStatus::kOversizedBody: return "oversized_body";
    case DecodeStatus::kBadTier: return "bad_tier";
    case DecodeStatus::kNonzeroPadding: return "nonzero_padding";
    case DecodeStatus::kChecksumMismatch: return "checksum_mismatch";
  }
  return "unknown";
}

std::string DecodeResult::message() const {
  const std::uint64_t at = offset;
  switch (status) {
    case DecodeStatus::kOk: return "MRDN v1: ok";
    case DecodeStatus::kShortHeader:
      return fmt::format("MRDN v1: short header at byte {}: a frame header is {} bytes, only {} left", at,
                         expected, found);
    case DecodeStatus::kBadMagic: {
      std::array<std::byte, 4> got{};
      for (std::size_t i = 0; i < got.size(); ++i) {
        got[i] = static_cast<std::byte>((found >> (8 * i)) & 0xFFU);
      }
      return fmt::format("MRDN v1: bad magic at byte {}: expected \"MRDN\", got {}", at, hex(got, " "));
    }
    case DecodeStatus::kUnsupportedVersion:
      return fmt::format("MRDN v1: unsupported version at byte {}: got {}, this build reads version {}", at,
                         found, expected);
    case DecodeStatus::kTruncatedBody:
      return fmt::format(
          "MRDN v1: truncated body at byte {}: body_len says {} bytes but the buffer ends after {} body "
          "bytes",
          at, expected, found);
    case DecodeStatus::kOversizedBody:
      return fmt::format("MRDN v1: oversized body at byte {}: {} bytes, at most {} fit (body_len is a u32)",
                         at, found, expected);
    case DecodeStatus::kBadTier:
      return fmt::format(
          "MRDN v1: bad tier at byte {}: got {}, expected 0 (ThinkComplete), 1 (ThinkActive) or 2 "
          "(OutputCritical)",
          at, found);
    case DecodeStatus::kNonzeroPadding:
      return fmt::format(
          "MRDN v1: nonzero padding at byte {}: got 0x{:02x}, the 3 bytes after the tier must be zero", at,
          found);
    case DecodeStatus::kChecksumMismatch:
      return fmt::format(
          "MRDN v1: checksum mismatch at byte {}: header has {}, BLAKE3 of the {}-byte body starts {}", at,
          hex(frame.checksum, ""), frame.body.size(), hex(computed_checksum, ""));
  }
  return fmt::format("MRDN v1: unknown status {} at byte {}", static_cast<unsigned>(status), at);
}

std::array<std::byte, kChecksumSize> checksum(std::span<const std::byte> data) noexcept {
  blake3_hasher hasher;
  blake3_hasher_init(&hasher);
  blake3_hasher_update(&hasher, data.data(), data.size());
  std::array<std::uint8_t, kChecksumSize> digest{};
  blake3_hasher_finalize(&hasher, digest.data(), digest.size());
  std::array<std::byte, kChecksumSize> out{};
  std::transform(digest.begin(), digest.end(), out.begin(), [](std::uint8_t b) { return std::byte{b}; });
  return out;
}

std::size_t encode_into(BlockTier tier, std::span<const std::byte> body, std::span<std::byte> out) {
  const auto tier_byte = static_cast<std::uint8_t>(tier);
  if (!valid_tier(tier_byte)) {
    throw InvalidArgument(fmt::format("MRDN v1 encode: tier {} is not a BlockTier (0, 1 or 2)", tier_byte));
  }
  if (body.size() > kMaxBodyBytes) {
    const DecodeResult why =
        failure(DecodeStatus::kOversizedBody, kBodyLenOffset, body.size(), kMaxBodyBytes);
    throw WireFormatError(why.status, why.offset, why.message());
  }
  const std::size_t size = frame_size(body.size());
  if (out.size() < size) {
    throw InvalidArgument(
        fmt::format("MRDN v1 encode: output holds {} bytes, the frame of a {}-byte body needs {}", out.size(),
                    body.size(), size));
  }
  std::copy(kMagic.begin(), kMagic.end(), out.begin() + kMagicOffset);
  put_u32_le(out.data() + kVersionOffset, kVersion);
  put_u32_le(out.data() + kBodyLenOffset, static_cast<std::uint32_t>(body.size()));
  out[kTierOffset] = std::byte{tier_byte};
  std::fill_n(out.begin() + kPaddingOffset, kPaddingSize, std::byte{0});
  const auto digest = checksum(body);
  std::copy(digest.begin(), digest.end(), out.begin() + kChecksumOffset);
  if (!body.empty()) std::memcpy(out.data() + kHeaderSize, body.data(), body.size());
  return size;
}

void encode_append(BlockTier tier, std::span<const std::byte> body, std::vector<std::byte>& out) {
  if (body.size() > kMaxBodyBytes) {
    // Before resizing `out`: a > 4 GiB allocation only to throw would be wasteful.
    const DecodeResult why =
        failure(DecodeStatus::kOversizedBody, kBodyLenOffset, body.size(), kMaxBodyBytes);
    throw WireFormatError(why.status, why.offset, why.message());
  }
  const std::size_t start = out.size();
  out.resize(start + frame_size(body.size()));
  try {
    encode_into(tier, body, std::span<std::byte>(out).subspan(start));
  } catch (...) {
    out.resize(start);  // strong guarantee: `out` is as it was
    throw;
  }
}

DecodeResult decode(std::span<const std::byte> buffer, std::uint64_t base_offset) noexcept {
  if (buffer.size() < kHeaderSize) {
    return failure(DecodeStatus::kShortHeader, base_offset, buffer.size(), kHeaderSize);
  }
  if (!std::equal(kMagic.begin(), kMagic.end(), buffer.begin() + kMagicOffset)) {
    return failure(DecodeStatus::kBadMagic, base_offset + kMagicOffset,
                   get_u32_le(buffer.data() + kMagicOffset), get_u32_le(kMagic.data()));
  }
  const std::uint32_t version = get_u32_le(buffer.data() + kVersionOffset);
  if (version != kVersion) {
    return failure(DecodeStatus::kUnsupportedVersion, base_offset + kVersionOffset, version, kVersion);
  }
  const auto tier = std::to_integer<std::uint8_t>(buffer[kTierOffset]);
  if (!valid_tier(tier)) {
    return failure(DecodeStatus::kBadTier, base_offset + kTierOffset, tier, kBlockTierCount - 1);
  }
  for (std::size_t i = kPaddingOffset; i < kPaddingOffset + kPaddingSize; ++i) {
    if (buffer[i] != std::byte{0}) {
      return failure(DecodeStatus::kNonzeroPadding, base_offset + i, std::to_integer<std::uint8_t>(buffer[i]),
                     0);
    }
  }
  const std::uint32_t body_len = get_u32_le(buffer.data() + kBodyLenOffset);
  const std::size_t body_left = buffer.size() - kHeaderSize;
  if (body_len > body_left) {
    return failure(DecodeStatus::kTruncatedBody, base_offset + buffer.size(), body_left, body_len);
  }
  DecodeResult result;
  result.frame.tier = static_cast<BlockTier>(tier);
  result.frame.body = buffer.subspan(kHeaderSize, body_len);
  result.frame.frame_size = frame_size(body_len);
  std::copy_n(buffer.begin() + kChecksumOffset, kChecksumSize, result.frame.checksum.begin());
  const auto computed = checksum(result.frame.body);
  if (computed != result.frame.checksum) {
    result.status = DecodeStatus::kChecksumMismatch;
    result.offset = base_offset + kChecksumOffset;
    result.computed_checksum = computed;
  }
  return result;
}

FrameView decode_or_throw(std::span<const std::byte> buffer) {
  const DecodeResult result = decode(buffer);
  if (!result.ok()) throw WireFormatError(result.status, result.offset, result.message());
  return result.frame;
}

BatchDecodeResult decode_batch(std::span<const std::byte> buffer) {
  BatchDecodeResult batch;
  std::size_t position = 0;
  while (position < buffer.size()) {
    DecodeResult result = decode(buffer.subspan(position), position);
    if (!result.ok()) {
      batch.error = result;
      break;
    }
    position += result.frame.frame_size;
    batch.frames.push_back(result.frame);
  }
  return batch;
}

}  // namespace meridian::mrdn
