// The fused CUDA row-statistics kernel (include/meridian/cuda_row_stats.h).
//
// grid = (splits, rows), 256 threads per block. Each block reads its slice
// of one row once, with 16-byte loads where the slice is aligned, keeping a
// per-thread online state (running max m, s = sum e^(x-m), d = sum
// e^(x-m)(x-m), best value/index, flags). Warps merge by shuffle, then warps
// through shared memory. With one split the block finishes the row itself;
// otherwise each block writes its partial, and the last block of the row to
// arrive (an atomic counter) merges them in double and finishes the row.
// The merge and finish formulas are the CPU kernel's (row_stats_math.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/row_stats_math.h"
#include "meridian/cuda_row_stats.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace meridian::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// A split is only worth a block when it has this many elements to read.
constexpr std::size_t kMinElementsPerSplit = 8192;

struct ThreadState {
  float m;
  float s;
  float d;
  float best;
  std::int32_t best_index;
  std::uint32_t flags;
};

struct KernelParams {
  const void* data;
  std::size_t rows;
  std::size_t stride;
  std::size_t vocab;
  const std::uint32_t* row_vocab;  // device; null when every row has `vocab`
  TokenId end_ids[CudaRowStatsKernel::kMaxEndIds];
  unsigned end_count;
  unsigned splits;
  RowStats* out;
  ThreadState* partials;  // [rows][splits]
  unsigned* arrivals;     // [rows], zero between launches
};

__device__ __forceinline__ ThreadState empty_state() { return {-INFINITY, 0.0F, 0.0F, -INFINITY, -1, 0U}; }

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }

// Raises the state's running max to m (> st.m), rescaling its sums.
__device__ __forceinline__ void raise_max(ThreadState& st, float m) {
  if (st.s > 0.0F) {
    const float delta = st.m - m;
    const float scale = expf(delta);
    st.d = (st.d + delta * st.s) * scale;
    st.s *= scale;
  }
  st.m = m;
}

// Folds value x at index i into the state (indices arrive in increasing
// order per thread, so a strict > keeps the first index of the max).
__device__ __forceinline__ void observe(ThreadState& st, float x, std::int32_t i) {
  if (isnan(x)) {
    st.flags |= kRowHasNaN;
    return;
  }
  if (x == INFINITY) st.flags |= kRowHasPosInf;
  if (x > st.best) {
    st.best = x;
    st.best_index = i;
  }
  if (x == -INFINITY) return;
  if (x > st.m) raise_max(st, x);
  const float t = x - st.m;
  const float e = expf(t);
  st.s += e;
  st.d = fmaf(e, t, st.d);
}

__device__ __forceinline__ ThreadState merge_states(const ThreadState& a, const ThreadState& b) {
  ThreadState out;
  out.flags = a.flags | b.flags;
  if (b.best > a.best ||
      (b.best == a.best && b.best_index >= 0 && (a.best_index < 0 || b.best_index < a.best_index))) {
    out.best = b.best;
    out.best_index = b.best_index;
  } else {
    out.best = a.best;
    out.best_index = a.best_index;
  }
  const float m = fmaxf(a.m, b.m);
  out.m = m;
  out.s = 0.0F;
  out.d = 0.0F;
  if (m == -INFINITY) return out;
  if (a.s > 0.0F) {
    const float delta = a.m - m;
    const float scale = expf(delta);
    out.s += a.s * scale;
    out.d += (a.d + delta * a.s) * scale;
  }
  if (b.s > 0.0F) {
    const float delta = b.m - m;
    const float scale = expf(delta);
    out.s += b.s * scale;
    out.d += (b.d + delta * b.s) * scale;
  }
  return out;
}

__device__ __forceinline__ ThreadState shuffle_down(const ThreadState& st, int offset) {
  ThreadState o;
  o.m = __shfl_down_sync(0xffffffffU, st.m, offset);
  o.s = __shfl_down_sync(0xffffffffU, st.s, offset);
  o.d = __shfl_down_sync(0xffffffffU, st.d, offset);
  o.best = __shfl_down_sync(0xffffffffU, st.best, offset);
  o.best_index = __shfl_down_sync(0xffffffffU, st.best_index, offset);
  o.flags = __shfl_down_sync(0xffffffffU, st.flags, offset);
  return o;
}

// Whole-block merge; the result is valid in thread 0.
__device__ ThreadState block_merge(ThreadState st) {
  __shared__ ThreadState per_warp[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) st = merge_states(st, shuffle_down(st, offset));
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) per_warp[warp] = st;
  __syncthreads();
  if (warp == 0) {
    st = lane < kWarps ? per_warp[lane] : empty_state();
    for (int offset = 16; offset > 0; offset /= 2) st = merge_states(st, shuffle_down(st, offset));
  }
  return st;
}

template <typename T>
__device__ float load_one(const T* row, std::size_t i) {
  return widen(row[i]);
}

// 16-byte vector of T: 4 floats or 8 halves.
template <typename T>
__device__ __forceinline__ void observe_vector(ThreadState& st, const uint4& raw, std::int32_t first) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  T values[kPer];
  memcpy(values, &raw, sizeof(raw));
  // Raise the max once for the whole vector: fewer rescales.
  float local_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPer; ++k) local_max = fmaxf(local_max, widen(values[k]));
  if (local_max > st.m && local_max != INFINITY) raise_max(st, local_max);
#pragma unroll
  for (int k = 0; k < kPer; ++k) observe(st, widen(values[k]), first + k);
}

// Finishes row `row_index` from its merged state (run by one thread).
template <typename T>
__device__ void write_row(const KernelParams& p, const T* row, std::size_t row_index,
                          const kernels::PartialRow& total, std::int32_t best_index, std::uint32_t flags) {
  double mass = 0.0;
  for (unsigned k = 0; k < p.end_count; ++k) {
    mass += exp(static_cast<double>(widen(row[p.end_ids[k]])) - static_cast<double>(total.m));
  }
  p.out[row_index] = kernels::finish_row(total, mass, total.s > 0.0 ? best_index : -1, flags);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_stats_kernel(KernelParams p) {
  const std::size_t row_index = blockIdx.y;
  const unsigned split = blockIdx.x;
  const std::size_t vocab = p.row_vocab != nullptr ? p.row_vocab[row_index] : p.vocab;
  const T* row = static_cast<const T*>(p.data) + row_index * p.stride;

  // This split's slice, in whole 16-byte vectors where possible.
  constexpr std::size_t kPer = 16 / sizeof(T);
  const std::size_t per_split = ((vocab + p.splits - 1) / p.splits + kPer - 1) / kPer * kPer;
  const std::size_t begin = std::min(vocab, static_cast<std::size_t>(split) * per_split);
  const std::size_t end = std::min(vocab, begin + per_split);

  ThreadState st = empty_state();
  const bool aligned = (reinterpret_cast<std::uintptr_t>(row + begin) % 16) == 0;
  std::size_t scalar_from = begin;
  if (aligned) {
    const std::size_t vectors = (end - begin) / kPer;
    const uint4* vec = reinterpret_cast<const uint4*>(row + begin);
    for (std::size_t v = threadIdx.x; v < vectors; v += kThreads) {
      const uint4 raw = __ldg(vec + v);
      observe_vector<T>(st, raw, static_cast<std::int32_t>(begin + v * kPer));
    }
    scalar_from = begin + vectors * kPer;
  }
  for (std::size_t i = scalar_from + threadIdx.x; i < end; i += kThreads) {
    observe(st, load_one(row, i), static_cast<std::int32_t>(i));
  }
  st = block_merge(st);

  if (p.splits > 1) {
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
      p.partials[row_index * p.splits + split] = st;
      __threadfence();
      const unsigned arrived = atomicAdd(p.arrivals + row_index, 1U);
      is_last = arrived == p.splits - 1;
    }
    __syncthreads();
    if (!is_last) return;
    // Last block of the row: merge every split's partial (in double).
    if (threadIdx.x != 0) return;
    __threadfence();
    kernels::PartialRow total = kernels::empty_partial();
    std::uint32_t flags = 0;
    float best = -INFINITY;
    std::int32_t best_index = -1;
    const volatile ThreadState* parts = p.partials + row_index * p.splits;
    for (unsigned k = 0; k < p.splits; ++k) {
      const float part_m = parts[k].m;
      const float part_s = parts[k].s;
      const float part_d = parts[k].d;
      const float part_best = parts[k].best;
      const std::int32_t part_index = parts[k].best_index;
      flags |= parts[k].flags;
      total = kernels::merge(
          total, kernels::PartialRow{part_m, static_cast<double>(part_s), static_cast<double>(part_d)});
      // Splits come in index order, so a strict > keeps the first index of the max.
      if (part_index >= 0 && part_best > best) {
        best = part_best;
        best_index = part_index;
      }
    }
    p.arrivals[row_index] = 0;  // ready for the next launch
    write_row(p, row, row_index, total, best_index, flags);
    return;
  }
  if (threadIdx.x == 0) {
    write_row(p, row, row_index, {st.m, static_cast<double>(st.s), static_cast<double>(st.d)}, st.best_index,
              st.flags);
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    // std::string, not fmt: nvcc cannot evaluate fmt's consteval format checks.
    throw KernelError(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(status) + " (" +
                      cudaGetErrorName(status) + ")");
  }
}

// A device buffer that only grows.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  void reserve(std::size_t want, bool zero) {
    if (want <= bytes) return;
    if (ptr != nullptr) check(cudaFree(ptr), "cudaFree");
    ptr = nullptr;
    bytes = 0;
    check(cudaMalloc(&ptr, want), "cudaMalloc");
    bytes = want;
    if (zero) check(cudaMemset(ptr, 0, want), "cudaMemset");
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

}  // namespace

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

struct CudaRowStatsKernel::Impl {
  int device = 0;
  int sm_count = 1;
  DeviceBuffer partials;
  DeviceBuffer arrivals;
  DeviceBuffer row_vocab;
  DeviceBuffer out;
};

CudaRowStatsKernel::CudaRowStatsKernel(int device) : impl_(std::make_unique<Impl>()) {
  const int count = device_count();
  if (count == 0) throw KernelError("CUDA row-stats kernel unavailable: no CUDA device is visible");
  if (device < 0) {
    check(cudaGetDevice(&device), "cudaGetDevice");
  } else if (device >= count) {
    throw KernelError("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                      " visible)");
  }
  impl_->device = device;
  check(cudaDeviceGetAttribute(&impl_->sm_count, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute");
}

CudaRowStatsKernel::~CudaRowStatsKernel() = default;

unsigned CudaRowStatsKernel::splits_for(const LogitsView& view) const noexcept {
  if (view.rows == 0) return 1;
  // Aim for ~4 blocks per SM in total so small batches still use the whole GPU.
  const std::size_t target_blocks = static_cast<std::size_t>(impl_->sm_count) * 4;
  const std::size_t by_occupancy = (target_blocks + view.rows - 1) / view.rows;
  const std::size_t by_size = std::max<std::size_t>(1, view.vocab / kMinElementsPerSplit);
  return static_cast<unsigned>(std::clamp<std::size_t>(std::min(by_occupancy, by_size), 1, 65535));
}

void CudaRowStatsKernel::launch(const LogitsView& view, std::span<const TokenId> end_think_ids,
                                RowStats* out_device, void* stream) {
  view.validate(end_think_ids, view.rows);
  if (view.rows == 0) return;
  if (end_think_ids.size() > kMaxEndIds) {
    throw KernelError("CUDA kernel takes at most " + std::to_string(kMaxEndIds) + " end-of-think ids; got " +
                      std::to_string(end_think_ids.size()));
  }
  if (view.rows > 65535)
    throw KernelError("CUDA kernel takes at most 65535 rows; got " + std::to_string(view.rows));
  check(cudaSetDevice(impl_->device), "cudaSetDevice");
  auto* s = static_cast<cudaStream_t>(stream);
  KernelParams params{};
  params.data = view.data;
  params.rows = view.rows;
  params.stride = view.stride();
  params.vocab = view.vocab;
  if (!view.row_vocab.empty()) {
    impl_->row_vocab.reserve(view.rows * sizeof(std::uint32_t), false);
    check(cudaMemcpyAsync(impl_->row_vocab.ptr, view.row_vocab.data(), view.rows * sizeof(std::uint32_t),
                          cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync(row_vocab)");
    params.row_vocab = static_cast<const std::uint32_t*>(impl_->row_vocab.ptr);
    std::size_t widest = 0;
    for (const std::uint32_t v : view.row_vocab) widest = std::max<std::size_t>(widest, v);
    params.vocab = widest;
  }
  for (std::size_t k = 0; k < end_think_ids.size(); ++k) params.end_ids[k] = end_think_ids[k];
  params.end_count = static_cast<unsigned>(end_think_ids.size());
  LogitsView shape = view;
  shape.vocab = params.vocab;
  params.splits = splits_for(shape);
  params.out = out_device;
  if (params.splits > 1) {
    impl_->partials.reserve(view.rows * params.splits * sizeof(ThreadState), false);
    impl_->arrivals.reserve(view.rows * sizeof(unsigned), true);
    params.partials = static_cast<ThreadState*>(impl_->partials.ptr);
    params.arrivals = static_cast<unsigned*>(impl_->arrivals.ptr);
  }
  const dim3 grid(params.splits, static_cast<unsigned>(view.rows));
  switch (view.dtype) {
    case LogitsDType::kFloat32: row_stats_kernel<float><<<grid, kThreads, 0, s>>>(params); break;
    case LogitsDType::kBFloat16: row_stats_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(params); break;
    case LogitsDType::kFloat16: row_stats_kernel<__half><<<grid, kThreads, 0, s>>>(params); break;
  }
  check(cudaGetLastError(), "row_stats_kernel launch");
}

void CudaRowStatsKernel::compute(const LogitsView& view, std::span<const TokenId> end_think_ids,
                                 std::span<RowStats> out, void* stream) {
  // launch() validates the view; only the host output is checked here.
  if (out.size() < view.rows) {
    throw KernelError("logits: output holds " + std::to_string(out.size()) + " rows, need " +
                      std::to_string(view.rows));
  }
  if (view.rows == 0) return;
  impl_->out.reserve(view.rows * sizeof(RowStats), false);
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
