#include "meridian/dlpack_view.h"

#include <fmt/format.h>

namespace meridian {

namespace {

LogitsDType dtype_of(const DLDataType& t) {
  if (t.lanes != 1) throw KernelError(fmt::format("logits tensor: dtype has {} lanes; expected 1", t.lanes));
  if (t.code == kDLFloat && t.bits == 32) return LogitsDType::kFloat32;
  if (t.code == kDLFloat && t.bits == 16) return LogitsDType::kFloat16;
  if (t.code == kDLBfloat && t.bits == 16) return LogitsDType::kBFloat16;
  throw KernelError(
      fmt::format("logits tensor: dtype code {} with {} bits is not float32, bfloat16 or float16",
                  static_cast<unsigned>(t.code), static_cast<unsigned>(t.bits)));
}

}  // namespace

LogitsView logits_view_from_dlpack(const DLTensor& tensor, ProbeDevice* device) {
  ProbeDevice where = ProbeDevice::kCpu;
  switch (tensor.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: break;
    case kDLCUDA:
    case kDLCUDAManaged: where = ProbeDevice::kCuda; break;
    default:
      throw KernelError(fmt::format("logits tensor: device type {} is neither CPU nor CUDA",
                                    static_cast<int>(tensor.device.device_type)));
  }
  if (tensor.ndim != 1 && tensor.ndim != 2) {
    throw KernelError(
        fmt::format("logits tensor: ndim is {}; expected 1 ([vocab]) or 2 ([rows, vocab])", tensor.ndim));
  }
  LogitsView view;
  view.dtype = dtype_of(tensor.dtype);
  const auto dims = static_cast<std::size_t>(tensor.ndim);
  for (std::size_t i = 0; i < dims; ++i) {
    if (tensor.shape[i] < 0) throw KernelError(fmt::format("logits tensor: shape[{}] is negative", i));
  }
  view.vocab = static_cast<std::size_t>(tensor.shape[dims - 1]);
  view.rows = dims == 2 ? static_cast<std::size_t>(tensor.shape[0]) : 1;
  // An empty tensor holds no element, so its strides mean nothing: NumPy 2.5 exports a [0, vocab]
  // array with strides (0, 0) where 2.3 exported none.
  const bool empty = view.rows == 0 || view.vocab == 0;
  if (tensor.strides != nullptr && !empty) {
    if (tensor.strides[dims - 1] != 1 && view.vocab > 1) {
      throw KernelError(
          fmt::format("logits tensor: last-dimension stride is {}; the vocab dimension must be "
                      "contiguous",
                      tensor.strides[dims - 1]));
    }
    if (dims == 2 && view.rows > 1) {
      if (tensor.strides[0] < tensor.shape[1]) {
        throw KernelError(fmt::format("logits tensor: row stride {} is smaller than the vocab size {}",
                                      tensor.strides[0], tensor.shape[1]));
      }
      view.row_stride = static_cast<std::size_t>(tensor.strides[0]);
    }
  }
  view.data = static_cast<const char*>(tensor.data) + tensor.byte_offset;
  if (device != nullptr) *device = where;
  return view;
}

}  // namespace meridian
