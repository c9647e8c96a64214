// The bytes behind KV block ids: what the offloader copies into MRDN frames
// and back (meridian/kv_offload.h). The block manager only does bookkeeping;
// a KvBlockStore maps a BlockId to its block_size_bytes of memory.
//
// Thread-safety: a store hands out spans and does no locking; callers
// serialise writes to one block (the engine loop owns them). Ownership:
// HostBlockStore either owns one aligned host arena or views caller memory
// (a Python buffer, a vLLM KV tensor) that the caller keeps alive and unmoved
// for the store's lifetime; spans stay valid as long as the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "meridian/kv_block_manager.h"

namespace meridian {

class KvBlockStore {
 public:
  virtual ~KvBlockStore() = default;
  KvBlockStore() = default;
  KvBlockStore(const KvBlockStore&) = delete;
  KvBlockStore& operator=(const KvBlockStore&) = delete;

  /// The bytes of `block` (block_size_bytes() of them). Throws OutOfRange
  /// for block >= num_blocks().
  [[nodiscard]] virtual std::span<std::byte> block_bytes(BlockId block) = 0;
  [[nodiscard]] virtual std::uint32_t num_blocks() const noexcept = 0;
  [[nodiscard]] virtual std::uint64_t block_size_bytes() const noexcept = 0;
};

/// Blocks laid out back to back in one host arena: block b at b × block_size_bytes.
class HostBlockStore final : public KvBlockStore {
 public:
  /// Owns a zeroed arena of num_blocks × block_size_bytes, aligned to 4096 bytes.
  /// Throws InvalidArgument for zero sizes or a product that overflows.
  HostBlockStore(std::uint32_t num_blocks, std::uint64_t block_size_bytes);
  /// Views caller memory (not owned; must outlive the store). Throws
  /// InvalidArgument when `memory` is smaller than num_blocks × block_size_bytes.
  HostBlockStore(std::span<std::byte> memory, std::uint32_t num_blocks, std::uint64_t block_size_bytes);
  ~HostBlockStore() override;

  [[nodiscard]] std::span<std::byte> block_bytes(BlockId block) override;
  [[nodiscard]] std::uint32_t num_blocks() const noexcept override { return num_blocks_; }
  [[nodiscard]] std::uint64_t block_size_bytes() const noexcept override { return block_size_; }
  [[nodiscard]] bool owns_memory() const noexcept { return owned_ != nullptr; }

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, FreeDeleter> owned_;
  std::byte* base_ = nullptr;
  std::uint32_t num_blocks_ = 0;
  std::uint64_t block_size_ = 0;
};

}  // namespace meridian
