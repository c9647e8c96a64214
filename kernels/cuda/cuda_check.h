// Host-side CUDA error handling shared by the .cu files of kernels/cuda.
#pragma once

#include <string>

#include "meridian/row_stats.h"
#include <cuda_runtime.h>

namespace meridian::cuda::detail {

/// Throws KernelError naming `what` and the CUDA error when `status` is not
/// cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    // std::string, not fmt: nvcc cannot evaluate fmt's consteval format checks.
    throw KernelError(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(status) + " (" +
                      cudaGetErrorName(status) + ")");
  }
}

}  // namespace meridian::cuda::detail
