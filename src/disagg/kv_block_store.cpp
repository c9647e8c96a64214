#include "meridian/kv_block_store.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian {
namespace {

constexpr std::uint64_t kArenaAlignment = 4096;  // page-aligned: registrable with RDMA NICs

std::uint64_t arena_bytes(std::uint32_t num_blocks, std::uint64_t block_size_bytes) {
  if (num_blocks == 0 || block_size_bytes == 0) {
    throw InvalidArgument(fmt::format("HostBlockStore: num_blocks ({}) and block_size_bytes ({}) must be > 0",
                                      num_blocks, block_size_bytes));
  }
  if (block_size_bytes > std::numeric_limits<std::uint64_t>::max() / num_blocks) {
    throw InvalidArgument(
        fmt::format("HostBlockStore: {} blocks of {} bytes overflow", num_blocks, block_size_bytes));
  }
  return std::uint64_t{num_blocks} * block_size_bytes;
}

}  // namespace

void HostBlockStore::FreeDeleter::operator()(std::byte* p) const noexcept { std::free(p); }  // NOLINT

HostBlockStore::HostBlockStore(std::uint32_t num_blocks, std::uint64_t block_size_bytes)
    : num_blocks_(num_blocks), block_size_(block_size_bytes) {
  const std::uint64_t bytes = arena_bytes(num_blocks, block_size_bytes);
  const std::uint64_t rounded = (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  // NOLINTNEXTLINE(cppcoreguidelines-no-malloc): aligned_alloc pairs with the free in FreeDeleter
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kArenaAlignment, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  owned_.reset(p);
  base_ = p;
}

HostBlockStore::HostBlockStore(std::span<std::byte> memory, std::uint32_t num_blocks,
                               std::uint64_t block_size_bytes)
    : base_(memory.data()), num_blocks_(num_blocks), block_size_(block_size_bytes) {
  const std::uint64_t bytes = arena_bytes(num_blocks, block_size_bytes);
  if (memory.size() < bytes) {
    throw InvalidArgument(
        fmt::format("HostBlockStore: {} blocks of {} bytes need {} bytes; the buffer has {}", num_blocks,
                    block_size_bytes, bytes, memory.size()));
  }
}

HostBlockStore::~HostBlockStore() = default;

std::span<std::byte> HostBlockStore::block_bytes(BlockId block) {
  if (block >= num_blocks_) {
    throw OutOfRange(
        fmt::format("HostBlockStore: block {} out of range: the store has {} blocks", block, num_blocks_));
  }
  return {base_ + std::uint64_t{block} * block_size_, block_size_};
}

}  // namespace meridian
