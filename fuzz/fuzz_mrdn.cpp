// MRDN v1 wire payloads (meridian/mrdn.h). The input is decoded as one frame
// and as a batch: an accepted frame re-encodes to exactly its bytes, a rejected
// one names an offset inside the buffer and says it in its message, and the
// batch decoder agrees frame by frame with the single-frame decoder. The input
// is also used as a body: it round-trips, and a frame with one byte changed
// (where the input says) is rejected unless only the tier moved to another
// valid tier (the checksum covers the body only).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "meridian/mrdn.h"

namespace meridian::fuzz {
namespace {

namespace mrdn = meridian::mrdn;
using Bytes = std::vector<std::byte>;

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void check_rejection(const mrdn::DecodeResult& result, std::uint64_t begin, std::uint64_t end) {
  check(result.status != mrdn::DecodeStatus::kOversizedBody, "decode reported an oversized body");
  check(result.offset >= begin && result.offset <= end,
        "error offset outside the buffer: " + result.message());
  const std::string message = result.message();
  check(message.find("at byte " + std::to_string(result.offset) + ":") != std::string::npos,
        "message does not name the offset: " + message);
}

void check_frame(const mrdn::DecodeResult& result, std::span<const std::byte> buffer) {
  check(result.frame.frame_size == mrdn::frame_size(result.frame.body.size()), "frame_size != header + body");
  check(result.frame.frame_size <= buffer.size(), "frame runs past the buffer");
  check(result.frame.body.data() == buffer.data() + mrdn::kHeaderSize, "body view is not zero-copy");
  Bytes again;
  mrdn::encode_append(result.frame.tier, result.frame.body, again);
  check(same(again, buffer.first(result.frame.frame_size)), "accepted frame does not re-encode to its bytes");
}

void decode_as_payload(std::span<const std::byte> input) {
  const mrdn::DecodeResult one = mrdn::decode(input);
  if (one.ok()) {
    check_frame(one, input);
  } else {
    check_rejection(one, 0, input.size());
  }
  const mrdn::BatchDecodeResult batch = mrdn::decode_batch(input);
  std::size_t position = 0;
  for (const mrdn::FrameView& frame : batch.frames) {
    const mrdn::DecodeResult alone = mrdn::decode(input.subspan(position), position);
    check(alone.ok() && alone.frame.body.data() == frame.body.data() && alone.frame.tier == frame.tier,
          "batch frame differs from decoding it alone");
    position += frame.frame_size;
  }
  check(position <= input.size(), "batch frames run past the buffer");
  if (batch.error.ok()) {
    check(position == input.size(), "batch stopped early without an error");
  } else {
    check_rejection(batch.error, position, input.size());
    const mrdn::DecodeResult alone = mrdn::decode(input.subspan(position), position);
    check(alone.status == batch.error.status && alone.offset == batch.error.offset,
          "batch error differs from decoding the frame alone");
  }
}

void encode_as_body(std::span<const std::byte> input) {
  const auto tier = static_cast<BlockTier>(input.size() % kBlockTierCount);
  Bytes frame;
  mrdn::encode_append(tier, input, frame);
  const mrdn::DecodeResult decoded = mrdn::decode(frame);
  check(decoded.ok() && decoded.frame.tier == tier && same(decoded.frame.body, input),
        "frame does not round-trip");
  if (input.empty()) return;
  // One byte changed: where and how come from the input itself.
  const std::size_t at = (std::to_integer<std::size_t>(input[0]) * 131 + input.size()) % frame.size();
  const auto mask = static_cast<std::byte>(std::to_integer<unsigned>(input.back()) | 1U);
  frame[at] ^= mask;
  const mrdn::DecodeResult changed = mrdn::decode(frame);
  if (changed.ok()) {
    check(at == 12 && same(changed.frame.body, input),
          "a changed frame was accepted: byte " + std::to_string(at));
  } else {
    check_rejection(changed, 0, frame.size());
  }
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] {
    const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
    meridian::fuzz::decode_as_payload(input);
    meridian::fuzz::encode_as_body(input);
  });
}
