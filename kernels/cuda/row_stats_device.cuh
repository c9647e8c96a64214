// Device code of the fused CUDA row-statistics kernel (cuda_row_stats.h).
// Included by row_stats.cu only.
//
// grid = (splits, rows), kThreads threads per block. Each block reads its
// slice of one row once, with 16-byte loads where the slice is aligned,
// keeping a per-thread online state (running max m, s = sum e^(x-m), d = sum
// e^(x-m)(x-m), best value/index, flags). Warps merge by shuffle, then warps
// through shared memory. With one split the block finishes the row itself;
// otherwise each block writes its partial to the caller's workspace, and the
// last block of the row to arrive (an atomic counter, cleared by the launch
// with cudaMemsetAsync) merges them in double, one warp's lanes in parallel,
// and finishes the row. The rebase and finish formulas are the CPU kernel's
// (row_stats_math.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/row_stats_math.h"
#include "meridian/cuda_row_stats.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace meridian::cuda::detail {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// A split is only worth a block when it has this many elements to read.
constexpr std::size_t kMinElementsPerSplit = 8192;
// 16-byte loads each thread has in flight before it uses any (measured on an H100: 4 over 2 is
// 0.57 over 0.555 of copy bandwidth on [256, 151936] bf16; docs/benchmarks.md).
constexpr int kLoads = 4;

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
  const std::uint32_t* row_vocab;  // device (workspace); null when every row has `vocab`
  TokenId end_ids[kMaxEndIds];
  unsigned end_count;
  unsigned splits;
  RowStats* out;
  ThreadState* partials;  // [rows][splits] (workspace) when splits > 1
  unsigned* arrivals;     // [rows] (workspace), zeroed by the launch when splits > 1
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
__device__ inline ThreadState block_merge(ThreadState st) {
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

constexpr float kLog2e = 1.4426950408889634F;

// 2^x in one MUFU instruction (ex2.approx.ftz, relative error below 2^-22). Results under 2^-126
// flush to zero, which no sum here notices: the row's own max contributes e^0 = 1 to it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-byte vector of T: 4 floats or 8 halves. Logits are finite almost always, so the vector is
// first folded with no per-element flag, best or max test and with the one-instruction
// exponential (those tests and libm's expf made the kernel issue-bound at a third of the memory
// bandwidth on an H100). A NaN or -inf in the vector turns s or d into NaN (e^NaN; 0 * -inf) and
// +inf is the vector's max: then nothing is added and every element goes through observe().
template <typename T>
__device__ __forceinline__ void observe_vector(ThreadState& st, const uint4& raw, std::int32_t first) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  T values[kPer];
  memcpy(values, &raw, sizeof(raw));
  float x[kPer];
  float local_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    x[k] = widen(values[k]);
    local_max = fmaxf(local_max, x[k]);
  }
  const bool maybe_finite = local_max < INFINITY;
  if (maybe_finite) {
    if (local_max > st.best) {  // the first index of the vector's max, as observe()'s strict > keeps
      int at = 0;
#pragma unroll
      for (int k = kPer - 1; k >= 0; --k) at = x[k] == local_max ? k : at;
      st.best = local_max;
      st.best_index = first + at;
    }
    if (local_max > st.m) raise_max(st, local_max);
    float s = 0.0F;
    float d = 0.0F;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float t = x[k] - st.m;
      const float e = fast_exp2(t * kLog2e);
      s += e;
      d = fmaf(e, t, d);
    }
    if (!isnan(s + d)) {
      st.s += s;
      st.d += d;
      return;
    }
  }
  // Raise the max once for the whole vector: fewer rescales.
  if (local_max > st.m && local_max != INFINITY) raise_max(st, local_max);
#pragma unroll
  for (int k = 0; k < kPer; ++k) observe(st, x[k], first + k);
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

// The last block of a split row merges every split's partial (in double). Warp 0 does it: the
// row's max over the splits first, then each lane rebases its splits to that max and the lanes'
// sums are added. The rebases are independent, where folding the splits one by one into a running
// total chained a global load and a double exp per split (0.43 us each on an H100).
template <typename T>
__device__ void finish_split_row(const KernelParams& p, const T* row, std::size_t row_index) {
  constexpr unsigned kAll = 0xffffffffU;
  const unsigned lane = threadIdx.x;
  const volatile ThreadState* parts = p.partials + row_index * p.splits;
  float m = -INFINITY;
  for (unsigned k = lane; k < p.splits; k += 32) m = fmaxf(m, parts[k].m);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(kAll, m, offset));
  double s = 0.0;
  double d = 0.0;
  std::uint32_t flags = 0;
  float best = -INFINITY;
  std::int32_t best_index = -1;
  for (unsigned k = lane; k < p.splits; k += 32) {
    const kernels::PartialRow part = kernels::rebase(
        kernels::PartialRow{parts[k].m, static_cast<double>(parts[k].s), static_cast<double>(parts[k].d)}, m);
    s += part.s;
    d += part.d;
    flags |= parts[k].flags;
    // A lane's splits rise in index, so a strict > keeps the first index of the max.
    const std::int32_t index = parts[k].best_index;
    const float value = parts[k].best;
    if (index >= 0 && (best_index < 0 || value > best)) {
      best = value;
      best_index = index;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    s += __shfl_down_sync(kAll, s, offset);
    d += __shfl_down_sync(kAll, d, offset);
    flags |= __shfl_down_sync(kAll, flags, offset);
    const float other = __shfl_down_sync(kAll, best, offset);
    const std::int32_t other_index = __shfl_down_sync(kAll, best_index, offset);
    if (other_index >= 0 &&
        (best_index < 0 || other > best || (other == best && other_index < best_index))) {
      best = other;
      best_index = other_index;
    }
  }
  if (lane != 0) return;
  const kernels::PartialRow total = m == -INFINITY ? kernels::empty_partial() : kernels::PartialRow{m, s, d};
  write_row(p, row, row_index, total, best_index, flags);
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
    // kLoads loads in flight per thread before any is used (indices still rise per thread).
    std::size_t v = threadIdx.x;
    for (; v + (kLoads - 1) * kThreads < vectors; v += kLoads * kThreads) {
      uint4 raw[kLoads];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) raw[j] = __ldg(vec + v + j * kThreads);
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        observe_vector<T>(st, raw[j], static_cast<std::int32_t>(begin + (v + j * kThreads) * kPer));
      }
    }
    for (; v < vectors; v += kThreads) {
      observe_vector<T>(st, __ldg(vec + v), static_cast<std::int32_t>(begin + v * kPer));
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
    if (!is_last || threadIdx.x >= 32) return;
    __threadfence();
    finish_split_row(p, row, row_index);
    return;
  }
  if (threadIdx.x == 0) {
    write_row(p, row, row_index, {st.m, static_cast<double>(st.s), static_cast<double>(st.d)}, st.best_index,
              st.flags);
  }
}

}  // namespace meridian::cuda::detail
