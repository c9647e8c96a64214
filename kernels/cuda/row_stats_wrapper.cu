// CudaRowStatsKernel: the convenience wrapper over launch_row_stats() that
// owns its workspace (include/meridian/cuda_row_stats.h). Allocation happens
// here, before a launch, never inside one.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "meridian/cuda_row_stats.h"
#include <cuda_runtime.h>

namespace meridian::cuda {
namespace {

using detail::check;

// Makes `device` current for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    int current = 0;
    check(cudaGetDevice(&current), "cudaGetDevice");
    if (current != device) {
      check(cudaSetDevice(device), "cudaSetDevice");
      previous_ = current;
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  DeviceGuard(DeviceGuard&&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;

 private:
  int previous_ = -1;
};

// A device buffer that only grows (cudaMalloc'd, so 256-byte aligned).
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  void reserve(std::size_t want) {
    if (want <= bytes) return;
    // cudaFree waits for work in flight on the old buffer.
    if (ptr != nullptr) check(cudaFree(ptr), "cudaFree");
    ptr = nullptr;
    bytes = 0;
    check(cudaMalloc(&ptr, want), "cudaMalloc");
    bytes = want;
  }
  void release() noexcept {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
};

}  // namespace

struct CudaRowStatsKernel::Impl {
  int device = 0;
  int sm_count = 1;
  DeviceBuffer workspace;
  DeviceBuffer out;

  Impl() = default;
  ~Impl() {
    // Free on the buffers' own device.
    int current = -1;
    const bool switched =
        cudaGetDevice(&current) == cudaSuccess && current != device && cudaSetDevice(device) == cudaSuccess;
    workspace.release();
    out.release();
    if (switched) cudaSetDevice(current);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  Impl(Impl&&) = delete;
  Impl& operator=(Impl&&) = delete;
};

CudaRowStatsKernel::CudaRowStatsKernel(int device) : impl_(std::make_unique<Impl>()) {
  if (device < 0) {
    if (device_count() == 0) {
      throw KernelError("CUDA row-stats kernel unavailable: " + unavailable_reason());
    }
    check(cudaGetDevice(&device), "cudaGetDevice");
  }
  impl_->sm_count = multiprocessor_count(device);
  impl_->device = device;
}

CudaRowStatsKernel::~CudaRowStatsKernel() = default;

int CudaRowStatsKernel::device() const noexcept { return impl_->device; }
int CudaRowStatsKernel::sm_count() const noexcept { return impl_->sm_count; }
std::size_t CudaRowStatsKernel::workspace_bytes() const noexcept { return impl_->workspace.bytes; }

unsigned CudaRowStatsKernel::splits_for(const LogitsView& view) const noexcept {
  std::size_t vocab = view.vocab;
  if (!view.row_vocab.empty()) {
    vocab = 0;
    for (const std::uint32_t v : view.row_vocab) vocab = std::max<std::size_t>(vocab, v);
  }
  return row_stats_splits(view.rows, vocab, impl_->sm_count);
}

void CudaRowStatsKernel::reserve(std::size_t rows, std::size_t vocab, bool ragged) {
  const DeviceGuard guard(impl_->device);
  impl_->workspace.reserve(row_stats_workspace_bytes(rows, vocab, ragged));
  impl_->out.reserve(rows * sizeof(RowStats));
}

void CudaRowStatsKernel::launch(const LogitsView& view, std::span<const TokenId> end_think_ids,
                                RowStats* out_device, void* stream) {
  const DeviceGuard guard(impl_->device);
  impl_->workspace.reserve(row_stats_workspace_bytes(view));
  launch_row_stats(view, end_think_ids, out_device, impl_->workspace.ptr, impl_->workspace.bytes, stream,
                   impl_->sm_count);
}

void CudaRowStatsKernel::compute(const LogitsView& view, std::span<const TokenId> end_think_ids,
                                 std::span<RowStats> out, void* stream) {
  // launch_row_stats() validates the view; only the host output is checked here.
  if (out.size() < view.rows) {
    throw KernelError("logits: output holds " + std::to_string(out.size()) + " rows, need " +
                      std::to_string(view.rows));
  }
  if (view.rows == 0) return;
  const DeviceGuard guard(impl_->device);
  impl_->out.reserve(view.rows * sizeof(RowStats));
  auto* device_out = static_cast<RowStats*>(impl_->out.ptr);
  launch(view, end_think_ids, device_out, stream);
  auto* s = static_cast<cudaStream_t>(stream);
  check(cudaMemcpyAsync(out.data(), device_out, view.rows * sizeof(RowStats), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync(results)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

namespace {

class CudaRowStatsBackend final : public RowStatsBackend {
 public:
  explicit CudaRowStatsBackend(int device) : kernel_(device) {}
  [[nodiscard]] ProbeDevice device() const noexcept override { return ProbeDevice::kCuda; }
  [[nodiscard]] std::string_view name() const noexcept override { return "cuda"; }
  void compute(const LogitsView& view, std::span<const TokenId> end_think_ids, std::span<RowStats> out,
               void* stream) override {
    kernel_.compute(view, end_think_ids, out, stream);
  }

 private:
  CudaRowStatsKernel kernel_;
};

}  // namespace

std::unique_ptr<RowStatsBackend> make_cuda_row_stats_backend(int device) {
  return std::make_unique<CudaRowStatsBackend>(device);
}

}  // namespace meridian::cuda
