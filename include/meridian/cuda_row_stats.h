// The CUDA row-statistics kernel (built only when nvcc is found; the
// meridian::kernels target then defines MERIDIAN_HAVE_CUDA). No CUDA header
// is needed to include this file: streams are passed as void*
// (a cudaStream_t).
//
// One fused kernel reads a [rows, vocab] device tensor in place, once, and
// writes every statistic of RowStats per row (row_stats.h has the formulas).
// Long rows are split across several blocks; the last block of a row to
// finish merges the partial results, so it is still a single launch.
//
// Two layers:
//  * The engine-grade launch (FlashInfer's pattern): the caller owns the
//    device workspace. row_stats_workspace_bytes() says how much a shape
//    needs; launch_row_stats() only enqueues stream-ordered work on the given
//    stream (cudaMemsetAsync, the kernel; cudaMemcpyAsync of ragged row sizes)
//    and never allocates, frees, switches device or synchronizes, so it can
//    be captured into a CUDA graph and run on several streams at once, each
//    with its own workspace.
//  * CudaRowStatsKernel, the convenience wrapper: it owns a workspace (grown
//    outside of launches; reserve() grows it ahead of a capture) and a
//    device output buffer for compute().
//
// Thread-safety: the free functions are reentrant; launches that run at the
// same time need separate workspaces. A CudaRowStatsKernel owns its
// workspace: use it from one thread at a time, one stream at a time.
// Ownership: nothing here owns the logits or the caller's workspace; a
// CudaRowStatsKernel frees its own workspace on destruction.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "meridian/row_stats.h"

namespace meridian::cuda {

/// Number of visible CUDA devices; 0 when none (or no driver).
[[nodiscard]] int device_count() noexcept;

/// Why no CUDA device can be used ("" when one can): no device, no driver,
/// or a driver older than this build's CUDA runtime, with CUDA's own words.
[[nodiscard]] std::string unavailable_reason();

/// Streaming multiprocessors of `device` (-1: the current device), which
/// the launch shape depends on. A plain attribute query (no stream work);
/// throws KernelError if the device is not usable.
[[nodiscard]] int multiprocessor_count(int device = -1);

/// At most this many end-of-think ids per launch.
inline constexpr std::size_t kMaxEndIds = 8;
/// At most this many rows per launch (the grid's y dimension).
inline constexpr std::size_t kMaxRows = 65535;
/// Alignment launch_row_stats requires of the workspace (cudaMalloc gives 256).
inline constexpr std::size_t kWorkspaceAlignment = 16;

/// Blocks per row of a launch over `rows` rows of at most `vocab` entries on
/// a device with `sm_count` SMs: about 4 blocks per SM in total, each
/// reading at least 8,192 entries. Host arithmetic only.
[[nodiscard]] unsigned row_stats_splits(std::size_t rows, std::size_t vocab, int sm_count) noexcept;

/// Device workspace bytes launch_row_stats() needs for `rows` rows of at most
/// `vocab` entries, on any device (an upper bound over every SM count).
/// `ragged`: the view has per-row vocab sizes, staged in the workspace.
/// 0 when rows fit one block each and are uniform (vocab < 16,384). Host
/// arithmetic only.
[[nodiscard]] std::size_t row_stats_workspace_bytes(std::size_t rows, std::size_t vocab,
                                                    bool ragged = false) noexcept;

/// The workspace bytes `view` needs (its widest row; ragged if it has
/// row_vocab).
[[nodiscard]] std::size_t row_stats_workspace_bytes(const LogitsView& view) noexcept;

/// Enqueues the statistics of `view` (device memory) into `out_device`
/// (view.rows RowStats in device memory) on `stream` (a cudaStream_t;
/// nullptr: the legacy default stream) and returns at once.
///
/// `workspace` is caller-owned device memory of `workspace_bytes` bytes,
/// aligned to kWorkspaceAlignment, at least row_stats_workspace_bytes(view)
/// (it may be null when that is 0). Its contents need not be initialised:
/// the launch clears what it uses with cudaMemsetAsync on `stream`. Work in
/// flight on one workspace must finish before another launch reuses it (use
/// one workspace per stream). `sm_count` is multiprocessor_count() of the
/// current device, which must be the device of the stream, the logits, the
/// output and the workspace (as for any kernel launch).
///
/// Enqueues only: no allocation, free, device switch or synchronization,
/// so it may be captured into a CUDA graph. Ragged views copy their row
/// sizes from host memory (cudaMemcpyAsync), which stream capture does not
/// allow: a ragged view in a capturing stream throws.
///
/// Throws KernelError for a malformed view (LogitsView::validate), more than
/// kMaxEndIds ids or kMaxRows rows, a workspace that is too small (naming
/// the bytes required and given) or misaligned, sm_count < 1, or a CUDA
/// error while enqueueing.
void launch_row_stats(const LogitsView& view, std::span<const TokenId> end_think_ids, RowStats* out_device,
                      void* workspace, std::size_t workspace_bytes, void* stream, int sm_count);

/// Convenience wrapper owning a workspace on one device.
class CudaRowStatsKernel {
 public:
  /// Uses `device` (-1: the current device). Throws KernelError if no CUDA
  /// device is usable.
  explicit CudaRowStatsKernel(int device = -1);
  ~CudaRowStatsKernel();
  CudaRowStatsKernel(const CudaRowStatsKernel&) = delete;
  CudaRowStatsKernel& operator=(const CudaRowStatsKernel&) = delete;
  CudaRowStatsKernel(CudaRowStatsKernel&&) = delete;
  CudaRowStatsKernel& operator=(CudaRowStatsKernel&&) = delete;

  /// Grows the workspace (and compute()'s device output) to fit `rows` rows
  /// of at most `vocab` entries. Afterwards launch() of any shape within it
  /// allocates nothing and can be captured into a CUDA graph.
  void reserve(std::size_t rows, std::size_t vocab, bool ragged = false);

  /// reserve() for the view's shape, then launch_row_stats() with this
  /// object's workspace on `stream` (nullptr: the legacy default stream).
  /// Makes this object's device current for the call if it is not.
  void launch(const LogitsView& view, std::span<const TokenId> end_think_ids, RowStats* out_device,
              void* stream);

  /// launch() into this object's device output, then copies the results to
  /// host `out` and waits for `stream`.
  void compute(const LogitsView& view, std::span<const TokenId> end_think_ids, std::span<RowStats> out,
               void* stream);

  /// Blocks per row the next launch of this shape uses (for tests/benchmarks).
  [[nodiscard]] unsigned splits_for(const LogitsView& view) const noexcept;

  [[nodiscard]] int device() const noexcept;
  [[nodiscard]] int sm_count() const noexcept;
  /// Bytes of workspace this object holds now.
  [[nodiscard]] std::size_t workspace_bytes() const noexcept;

  static constexpr std::size_t kMaxEndIds = cuda::kMaxEndIds;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The CUDA backend of the probe (wraps a CudaRowStatsKernel).
[[nodiscard]] std::unique_ptr<RowStatsBackend> make_cuda_row_stats_backend(int device = -1);

}  // namespace meridian::cuda
