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
// Thread-safety: a CudaRowStatsKernel owns device workspace; use it from one
// thread at a time (one per engine thread). Ownership: it frees its
// workspace on destruction; it never owns the logits.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "meridian/row_stats.h"

namespace meridian::cuda {

/// Number of visible CUDA devices; 0 when none (or no driver).
[[nodiscard]] int device_count() noexcept;

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

  /// Enqueues the kernel on `stream` (nullptr: the legacy default stream);
  /// `view.data` is device memory, `out_device` holds view.rows RowStats in
  /// device memory. Returns at once; the results are ready when the stream
  /// reaches this point. At most kMaxEndIds end-of-think ids.
  void launch(const LogitsView& view, std::span<const TokenId> end_think_ids, RowStats* out_device,
              void* stream);

  /// launch(), then copies the results to host `out` and waits for `stream`.
  void compute(const LogitsView& view, std::span<const TokenId> end_think_ids, std::span<RowStats> out,
               void* stream);

  /// Blocks per row the next launch of this shape uses (for tests/benchmarks).
  [[nodiscard]] unsigned splits_for(const LogitsView& view) const noexcept;

  static constexpr std::size_t kMaxEndIds = 8;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The CUDA backend of the probe (wraps a CudaRowStatsKernel).
[[nodiscard]] std::unique_ptr<RowStatsBackend> make_cuda_row_stats_backend(int device = -1);

}  // namespace meridian::cuda
