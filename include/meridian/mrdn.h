// MRDN v1: the wire format of one disaggregated KV payload (ADR-0020, from
// the original design's ADR-0006).
//
//   offset  size  field
//        0     4  magic "MRDN"
//        4     4  version, u32 little-endian, = 1
//        8     4  body_len, u32 little-endian (a body is at most 4 GiB - 1)
//       12     1  tier: 0 ThinkComplete, 1 ThinkActive, 2 OutputCritical (BlockTier)
//       13     3  padding, zero
//       16    16  first 16 bytes of BLAKE3(body)
//       32     -  body (body_len bytes: raw KV bytes, opaque to the format)
//
// Frames are self-delimiting, so a batch is frames back to back.
// BLAKE3 is the official C implementation (Debian's librust-blake3-dev
// sources, x86-64 assembly included).
//
// Thread-safety: free functions on caller-owned memory; safe from any thread.
// Ownership: FrameView points into the caller's buffer and lives as long as it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/error.h"
#include "meridian/kv_block_manager.h"

namespace meridian::mrdn {

inline constexpr std::size_t kHeaderSize = 32;
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kChecksumSize = 16;
inline constexpr std::uint64_t kMaxBodyBytes = 0xFFFF'FFFFULL;  ///< body_len is a u32

/// Why a payload was rejected. Each has its own message and byte offset.
enum class DecodeStatus : std::uint8_t {
  kOk = 0,
  kShortHeader = 1,         ///< fewer than 32 bytes left; offset = where the frame starts
  kBadMagic = 2,            ///< offset of the frame's magic
  kUnsupportedVersion = 3,  ///< offset of the version field
  kTruncatedBody = 4,       ///< body_len runs past the buffer; offset = end of the buffer
  kOversizedBody = 5,       ///< encode only: body over kMaxBodyBytes; offset 8 (body_len). decode
                            ///< never reports it: a u32 body_len cannot declare more, and bytes
                            ///< past the frame are the next frame's
  kBadTier = 6,             ///< offset of the tier byte
  kNonzeroPadding = 7,      ///< offset of the first nonzero padding byte
  kChecksumMismatch = 8,    ///< offset of the checksum field
};

/// A decoded frame: views into the caller's buffer (zero-copy).
struct FrameView {
  BlockTier tier = BlockTier::kThinkComplete;
  std::span<const std::byte> body;
  std::array<std::byte, kChecksumSize> checksum{};
  std::size_t frame_size = 0;  ///< kHeaderSize + body.size(): where the next frame starts
};

/// Ownership: `frame` views the decoded buffer (meaningful only when ok()).
struct DecodeResult {
  DecodeStatus status = DecodeStatus::kOk;
  std::uint64_t offset = 0;  ///< absolute byte offset of the problem in the decoded buffer
  FrameView frame;
  /// For message(): the value found at `offset` (magic bytes packed little-endian, version, tier
  /// or padding byte; the bytes left for a short header or truncated body; the body size of an
  /// oversized body) and what the format needs there (32, kVersion, body_len, kMaxBodyBytes).
  std::uint64_t found = 0;
  std::uint64_t expected = 0;
  /// kChecksumMismatch: the body's checksum (frame.checksum holds the header's).
  std::array<std::byte, kChecksumSize> computed_checksum{};
  [[nodiscard]] bool ok() const noexcept { return status == DecodeStatus::kOk; }
  /// "MRDN checksum mismatch at byte 16: ..." — what was wrong and where.
  [[nodiscard]] std::string message() const;
};

/// Thrown by the *_or_throw forms and by encode (oversized body). what() is
/// DecodeResult::message(); status() and offset() say which and where.
class WireFormatError : public Error {
 public:
  WireFormatError(DecodeStatus status, std::uint64_t offset, const std::string& message);
  [[nodiscard]] DecodeStatus status() const noexcept { return status_; }
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

 private:
  DecodeStatus status_;
  std::uint64_t offset_;
};

/// First 16 bytes of BLAKE3(data).
[[nodiscard]] std::array<std::byte, kChecksumSize> checksum(std::span<const std::byte> data) noexcept;

/// Bytes a frame of `body_size` takes.
[[nodiscard]] constexpr std::size_t frame_size(std::size_t body_size) noexcept {
  return kHeaderSize + body_size;
}

/// Writes header + body into `out` (out.size() >= frame_size(body.size())).
/// Returns the bytes written. Throws WireFormatError(kOversizedBody) for a body
/// over kMaxBodyBytes, InvalidArgument for a short `out` or an out-of-range tier.
std::size_t encode_into(BlockTier tier, std::span<const std::byte> body, std::span<std::byte> out);
/// Appends one frame to `out`.
void encode_append(BlockTier tier, std::span<const std::byte> body, std::vector<std::byte>& out);

/// Decodes the frame at the start of `buffer`; `base_offset` is added to every
/// reported offset (the frame's position in a larger batch). Never throws,
/// never reads past `buffer`.
[[nodiscard]] DecodeResult decode(std::span<const std::byte> buffer, std::uint64_t base_offset = 0) noexcept;
/// decode(), throwing WireFormatError on any problem.
FrameView decode_or_throw(std::span<const std::byte> buffer);

/// Decodes frames back to back until the buffer ends; stops at the first bad
/// frame (status and absolute offset in the result, frames decoded so far kept).
struct BatchDecodeResult {
  std::vector<FrameView> frames;
  DecodeResult error;  ///< ok() when the whole buffer decoded
};
[[nodiscard]] BatchDecodeResult decode_batch(std::span<const std::byte> buffer);

[[nodiscard]] std::string_view to_string(DecodeStatus status) noexcept;

}  // namespace meridian::mrdn
