// Run-time choice between the CPU and CUDA row-statistics backends.
#include <fmt/format.h>

#include "meridian/row_stats.h"
#if MERIDIAN_HAVE_CUDA
#include "meridian/cuda_row_stats.h"
#endif

namespace meridian {

bool cuda_row_stats_available() noexcept {
#if MERIDIAN_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<RowStatsBackend> make_row_stats_backend(ProbeDevice device, CpuRowStatsOptions cpu_options) {
  if (device == ProbeDevice::kCpu) return make_cpu_row_stats_backend(cpu_options);
#if MERIDIAN_HAVE_CUDA
  return cuda::make_cuda_row_stats_backend();
#else
  throw KernelError(
      "CUDA row-stats backend unavailable: this build has no CUDA kernels (nvcc was not found "
      "when it was configured, or MERIDIAN_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace meridian
