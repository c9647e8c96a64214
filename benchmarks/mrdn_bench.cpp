// MRDN v1 codec throughput (docs/benchmarks.md) against a plain memcpy of the
// same bytes in the same run: encode (BLAKE3 + header + copy of the body into a
// preallocated frame), decode (header checks + BLAKE3 verification of the body;
// zero-copy, so no body copy), BLAKE3 alone, and a 1 MiB batch of 64 16 KiB
// frames through decode_batch. 16 KiB is one KV block of a small model; 1 MiB
// is an offload batch. Bytes/s is of the body.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "meridian/mrdn.h"

namespace {

namespace mrdn = meridian::mrdn;
using meridian::BlockTier;

std::vector<std::byte> body_of(std::size_t size) {
  std::vector<std::byte> body(size);
  for (std::size_t i = 0; i < size; ++i) body[i] = static_cast<std::byte>((i * 2654435761U) >> 13);
  return body;
}

void count(benchmark::State& state, std::size_t body_bytes, std::size_t frames) {
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(body_bytes * frames));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(frames));
}

void BM_Memcpy(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::vector<std::byte> body = body_of(size);
  std::vector<std::byte> out(mrdn::frame_size(size));
  for (auto _ : state) {
    std::memcpy(out.data() + mrdn::kHeaderSize, body.data(), size);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count(state, size, 1);
}

void BM_MrdnEncode(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::vector<std::byte> body = body_of(size);
  std::vector<std::byte> out(mrdn::frame_size(size));
  for (auto _ : state) {
    benchmark::DoNotOptimize(mrdn::encode_into(BlockTier::kThinkComplete, body, out));
    benchmark::ClobberMemory();
  }
  count(state, size, 1);
}

void BM_MrdnDecode(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> frame;
  mrdn::encode_append(BlockTier::kThinkComplete, body_of(size), frame);
  for (auto _ : state) {
    const mrdn::DecodeResult result = mrdn::decode(frame);
    if (!result.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(result.frame.body.data());
  }
  count(state, size, 1);
}

void BM_Blake3Checksum(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::vector<std::byte> body = body_of(size);
  for (auto _ : state) benchmark::DoNotOptimize(mrdn::checksum(body));
  count(state, size, 1);
}

constexpr std::size_t kBatchFrames = 64;
constexpr std::size_t kBlockBytes = 16 * 1024;

void BM_MrdnDecodeBatch(benchmark::State& state) {
  std::vector<std::byte> batch;
  const std::vector<std::byte> body = body_of(kBlockBytes);
  for (std::size_t i = 0; i < kBatchFrames; ++i) mrdn::encode_append(BlockTier::kThinkComplete, body, batch);
  for (auto _ : state) {
    const mrdn::BatchDecodeResult result = mrdn::decode_batch(batch);
    if (!result.error.ok() || result.frames.size() != kBatchFrames)
      state.SkipWithError("batch decode failed");
    benchmark::DoNotOptimize(result.frames.data());
  }
  count(state, kBlockBytes, kBatchFrames);
}

void BM_MemcpyBatch(benchmark::State& state) {
  const std::vector<std::byte> source(kBatchFrames * mrdn::frame_size(kBlockBytes), std::byte{7});
  std::vector<std::byte> out(source.size());
  for (auto _ : state) {
    std::memcpy(out.data(), source.data(), source.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count(state, kBlockBytes, kBatchFrames);
}

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(16 * 1024)->Arg(1024 * 1024);
BENCHMARK(BM_MrdnEncode)->Arg(16 * 1024)->Arg(1024 * 1024);
BENCHMARK(BM_MrdnDecode)->Arg(16 * 1024)->Arg(1024 * 1024);
BENCHMARK(BM_Blake3Checksum)->Arg(16 * 1024)->Arg(1024 * 1024);
BENCHMARK(BM_MrdnDecodeBatch);
BENCHMARK(BM_MemcpyBatch);
