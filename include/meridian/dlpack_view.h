// LogitsView from a DLPack tensor, so the probe reads a framework's logits
// (torch, NumPy, CuPy, ...) in place. Needs <dlpack/dlpack.h> (Debian's
// libdlpack-dev); the rest of Meridian does not.
//
// Thread-safety: pure function. Ownership: the view borrows the tensor's
// memory; the caller keeps the tensor alive while the view is used.
#pragma once

#include "meridian/row_stats.h"
#include <dlpack/dlpack.h>

namespace meridian {

/// A 1-D ([vocab]) or 2-D ([rows, vocab]) tensor of float32, bfloat16 or
/// float16 whose last dimension is contiguous. `device` receives where the
/// data lives (CPU, or CUDA for kDLCUDA / kDLCUDAManaged). Throws
/// KernelError naming the offending property (dtype, ndim, strides, device).
[[nodiscard]] LogitsView logits_view_from_dlpack(const DLTensor& tensor, ProbeDevice* device = nullptr);

}  // namespace meridian
