// The engine-grade launch of the fused CUDA row-statistics kernel
// (include/meridian/cuda_row_stats.h): caller-owned workspace, stream-ordered
// work only. The kernel itself is in row_stats_device.cuh; the convenience
// wrapper that owns a workspace is in row_stats_wrapper.cu.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/row_stats_device.cuh"
#include "meridian/cuda_row_stats.h"
#include <cuda_runtime.h>

namespace meridian::cuda {
namespace {

using detail::check;
using detail::KernelParams;
using detail::ThreadState;

constexpr std::size_t round_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Most blocks a row of `vocab` entries is ever split into, whatever the SM count.
std::size_t max_splits(std::size_t vocab) {
  return std::clamp<std::size_t>(vocab / detail::kMinElementsPerSplit, 1, 65535);
}

// Byte offsets of the workspace's parts; every part starts aligned.
struct WorkspaceLayout {
  std::size_t partials = 0;   // [rows][max_splits] ThreadState, when rows may be split
  std::size_t arrivals = 0;   // [rows] unsigned, when rows may be split
  std::size_t row_vocab = 0;  // [rows] uint32, when ragged
  std::size_t total = 0;
};

WorkspaceLayout layout(std::size_t rows, std::size_t vocab, bool ragged) {
  WorkspaceLayout w;
  if (rows == 0) return w;
  const std::size_t splits = max_splits(vocab);
  std::size_t at = 0;
  if (splits > 1) {
    w.partials = at;
    at += round_up(rows * splits * sizeof(ThreadState));
    w.arrivals = at;
    at += round_up(rows * sizeof(unsigned));
  }
  if (ragged) {
    w.row_vocab = at;
    at += round_up(rows * sizeof(std::uint32_t));
  }
  w.total = at;
  return w;
}

std::size_t widest_vocab(const LogitsView& view) {
  if (view.row_vocab.empty()) return view.vocab;
  std::size_t widest = 0;
  for (const std::uint32_t v : view.row_vocab) widest = std::max<std::size_t>(widest, v);
  return widest;
}

std::string shape_text(const LogitsView& view, std::size_t vocab) {
  return std::to_string(view.rows) + " rows, vocab " + std::to_string(vocab) +
         (view.row_vocab.empty() ? "" : " (ragged)");
}

}  // namespace

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return "";
  cudaGetLastError();  // clear the sticky error
  std::string reason = "no CUDA device is visible";
  if (status != cudaSuccess) {
    reason += std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(status) + ")";
  }
  return reason;
}

int multiprocessor_count(int device) {
  const int count = device_count();
  if (count == 0) throw KernelError("CUDA row-stats kernel unavailable: " + unavailable_reason());
  if (device < 0) {
    check(cudaGetDevice(&device), "cudaGetDevice");
  } else if (device >= count) {
    throw KernelError("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                      " visible)");
  }
  int sm_count = 0;
  check(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return sm_count;
}

unsigned row_stats_splits(std::size_t rows, std::size_t vocab, int sm_count) noexcept {
  if (rows == 0) return 1;
  // Aim for ~4 blocks per SM in total so small batches still use the whole GPU.
  const std::size_t target_blocks = static_cast<std::size_t>(std::max(sm_count, 1)) * 4;
  // Rounded down: one more split per row than fits would start a second, mostly empty wave of
  // blocks (on an H100, 3 splits of 256 rows ran at 0.455 of copy bandwidth, 2 at 0.553).
  const std::size_t by_occupancy = target_blocks / rows;
  return static_cast<unsigned>(std::clamp<std::size_t>(std::min(by_occupancy, max_splits(vocab)), 1, 65535));
}

std::size_t row_stats_workspace_bytes(std::size_t rows, std::size_t vocab, bool ragged) noexcept {
  return layout(rows, vocab, ragged).total;
}

std::size_t row_stats_workspace_bytes(const LogitsView& view) noexcept {
  return row_stats_workspace_bytes(view.rows, widest_vocab(view), !view.row_vocab.empty());
}

void launch_row_stats(const LogitsView& view, std::span<const TokenId> end_think_ids, RowStats* out_device,
                      void* workspace, std::size_t workspace_bytes, void* stream, int sm_count) {
  view.validate(end_think_ids, view.rows);
  if (view.rows == 0) return;
  if (end_think_ids.size() > kMaxEndIds) {
    throw KernelError("CUDA row stats: at most " + std::to_string(kMaxEndIds) + " end-of-think ids; got " +
                      std::to_string(end_think_ids.size()));
  }
  if (view.rows > kMaxRows) {
    throw KernelError("CUDA row stats: at most " + std::to_string(kMaxRows) + " rows per launch; got " +
                      std::to_string(view.rows));
  }
  if (out_device == nullptr) throw KernelError("CUDA row stats: out_device is null");
  if (sm_count < 1) {
    throw KernelError("CUDA row stats: sm_count is " + std::to_string(sm_count) + "; expected >= 1");
  }
  const std::size_t vocab = widest_vocab(view);
  const bool ragged = !view.row_vocab.empty();
  const WorkspaceLayout w = layout(view.rows, vocab, ragged);
  if (workspace_bytes < w.total) {
    throw KernelError("CUDA row stats: workspace too small: " + shape_text(view, vocab) + " requires " +
                      std::to_string(w.total) + " bytes (row_stats_workspace_bytes), given " +
                      std::to_string(workspace_bytes));
  }
  if (w.total > 0 && workspace == nullptr) {
    throw KernelError("CUDA row stats: workspace is null but " + std::to_string(w.total) +
                      " bytes are required");
  }
  if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
    throw KernelError("CUDA row stats: workspace is not aligned to " + std::to_string(kWorkspaceAlignment) +
                      " bytes");
  }
  auto* s = static_cast<cudaStream_t>(stream);
  auto* base = static_cast<unsigned char*>(workspace);

  KernelParams params{};
  params.data = view.data;
  params.rows = view.rows;
  params.stride = view.stride();
  params.vocab = vocab;
  for (std::size_t k = 0; k < end_think_ids.size(); ++k) params.end_ids[k] = end_think_ids[k];
  params.end_count = static_cast<unsigned>(end_think_ids.size());
  params.splits = row_stats_splits(view.rows, vocab, sm_count);
  params.out = out_device;
  if (ragged) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(s, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone) {
      throw KernelError(
          "CUDA row stats: a ragged view (row_vocab) copies its row sizes from host memory, which a "
          "capturing stream does not allow; capture uniform rows only");
    }
    auto* row_vocab = reinterpret_cast<std::uint32_t*>(base + w.row_vocab);
    check(cudaMemcpyAsync(row_vocab, view.row_vocab.data(), view.rows * sizeof(std::uint32_t),
                          cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync(row_vocab)");
    params.row_vocab = row_vocab;
  }
  if (params.splits > 1) {
    params.partials = reinterpret_cast<ThreadState*>(base + w.partials);
    params.arrivals = reinterpret_cast<unsigned*>(base + w.arrivals);
    check(cudaMemsetAsync(params.arrivals, 0, view.rows * sizeof(unsigned), s), "cudaMemsetAsync(arrivals)");
  }
  const dim3 grid(params.splits, static_cast<unsigned>(view.rows));
  switch (view.dtype) {
    case LogitsDType::kFloat32:
      detail::row_stats_kernel<float><<<grid, detail::kThreads, 0, s>>>(params);
      break;
    case LogitsDType::kBFloat16:
      detail::row_stats_kernel<__nv_bfloat16><<<grid, detail::kThreads, 0, s>>>(params);
      break;
    case LogitsDType::kFloat16:
      detail::row_stats_kernel<__half><<<grid, detail::kThreads, 0, s>>>(params);
      break;
  }
  check(cudaGetLastError(), "row_stats_kernel launch");
}

}  // namespace meridian::cuda
