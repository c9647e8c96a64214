// The SIMD row-statistics kernel, compiled once per Highway target and
// dispatched at run time to the best one the CPU supports.
//
// One pass over memory: each row is walked in chunks small enough to stay in
// L1. Per chunk, a first sweep finds the chunk max (and, for bf16/fp16,
// widens the chunk into a float buffer); the running max is raised once per
// chunk and the running sums rescaled then (online log-sum-exp); a second
// sweep, from L1, adds e^(x-m) and e^(x-m)(x-m). Chunk sums are float (short
// sums, small error); the running sums across chunks are double, so a
// 152k-entry row keeps ~1e-7 relative error (docs/architecture.md).
// NaN/+inf are not tested per element: they poison the sums, which is
// checked once per row, and only then is the row rescanned to classify them.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/row_stats_simd.cpp"  // NOLINT(bugprone-macro-parentheses)
#include <hwy/foreach_target.h>                      // IWYU pragma: keep
// foreach_target.h must come first: it re-includes this file per target.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/row_stats_math.h"
#include "cpu/row_stats_internal.h"
#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace meridian::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 1,024 floats (4 KiB): fits L1 beside the source chunk, and long enough
// that the per-chunk scalar work is noise.
constexpr std::size_t kChunk = 1024;
// Exponents are clamped from below so -inf logits give a finite term, not
// -inf * 0 = NaN: 2^-125 (~2e-38) in the SIMD loop, where the result must
// stay a normal float, and e^-110 (0 in float) in the scalar tail. Either
// is below 1e-30 of the sum, which is at least 1.
constexpr float kMinExponent2 = -125.0F;
constexpr float kMinExponent = -110.0F;

using DF = hn::ScalableTag<float>;

// Highway's 16-bit float types for our storage types (same 2-byte layout).
template <typename T>
struct HwyLane;
template <>
struct HwyLane<Bf16> {
  using type = hwy::bfloat16_t;
};
template <>
struct HwyLane<F16> {
  using type = hwy::float16_t;
};

template <typename T>
HWY_INLINE hn::Vec<DF> load_widened(DF df, const T* HWY_RESTRICT p) {
  using Lane = typename HwyLane<T>::type;
  static_assert(sizeof(Lane) == sizeof(T));
  const hn::Rebind<Lane, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const Lane*>(p)));
}

// Max over [0, n) of a float chunk; n is a multiple of the vector length.
// Also reports NaN: SIMD max drops NaN operands, and the exponential maps NaN
// to 0, so the sums alone would hide it. One compare per vector, from L1.
HWY_INLINE float chunk_max(DF df, const float* HWY_RESTRICT x, std::size_t n, bool& has_nan) {
  const std::size_t lanes = hn::Lanes(df);
  auto m0 = hn::Set(df, -std::numeric_limits<float>::infinity());
  auto m1 = m0;
  auto nan = hn::Zero(df);
  std::size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto v0 = hn::LoadU(df, x + i);
    const auto v1 = hn::LoadU(df, x + i + lanes);
    m0 = hn::Max(m0, v0);
    m1 = hn::Max(m1, v1);
    nan = hn::Or(nan, hn::Or(hn::VecFromMask(df, hn::IsNaN(v0)), hn::VecFromMask(df, hn::IsNaN(v1))));
  }
  for (; i < n; i += lanes) {
    const auto v0 = hn::LoadU(df, x + i);
    m0 = hn::Max(m0, v0);
    nan = hn::Or(nan, hn::VecFromMask(df, hn::IsNaN(v0)));
  }
  has_nan = !hn::AllFalse(df, hn::MaskFromVec(nan));
  return hn::GetLane(hn::MaxOfLanes(df, hn::Max(m0, m1)));
}

// 2^u for u in [-125, 0], to ~1e-7 relative: 2^u = 2^n * 2^f with n =
// round(u), f in [-0.5, 0.5], 2^f by a degree-6 minimax polynomial (Cephes'
// exp2f coefficients), and 2^n added straight into the exponent bits. Half
// the instructions of a general exp, which is what bounds this kernel.
HWY_INLINE hn::Vec<DF> exp2_nonpositive(DF df, hn::Vec<DF> u) {
  const hn::RebindToSigned<DF> di;
  const auto n = hn::Round(u);
  const auto f = hn::Sub(u, n);
  auto p = hn::Set(df, 1.535336188319500e-4F);
  p = hn::MulAdd(p, f, hn::Set(df, 1.339887440266574e-3F));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618437357674640e-3F));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550332471162809e-2F));
  p = hn::MulAdd(p, f, hn::Set(df, 2.402264791363012e-1F));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931472028550421e-1F));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0F));
  return hn::BitCast(df, hn::Add(hn::BitCast(di, p), hn::ShiftLeft<23>(hn::ConvertTo(di, n))));
}

// Adds e^(x-m) and e^(x-m)(x-m) over a float chunk (n a multiple of lanes).
// Works in base 2: u = (x-m) log2(e), e^(x-m) = 2^u, and the second sum is
// kept as sum 2^u * u and scaled by ln 2 once per chunk.
// `next` (may be null) is the next chunk's memory: one cache line of it is
// prefetched per 64 bytes summed here, so memory and arithmetic overlap.
HWY_INLINE void chunk_sums(DF df, const float* HWY_RESTRICT x, std::size_t n, float m, double& s, double& d,
                           const char* next, std::size_t next_bytes) {
  const std::size_t lanes = hn::Lanes(df);
  const auto vm = hn::Set(df, m);
  const auto log2e = hn::Set(df, 1.44269504088896341F);
  const auto floor = hn::Set(df, kMinExponent2);
  auto s0 = hn::Zero(df);
  auto s1 = hn::Zero(df);
  auto d0 = hn::Zero(df);
  auto d1 = hn::Zero(df);
  std::size_t i = 0;
  std::size_t fetched = 0;  // bytes of `next` prefetched, kept in step with i
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    for (const std::size_t due = (i + 2 * lanes) * next_bytes / n; fetched < due; fetched += 64) {
      hwy::Prefetch(next + fetched);
    }
    const auto u0 = hn::Max(hn::Mul(hn::Sub(hn::LoadU(df, x + i), vm), log2e), floor);
    const auto u1 = hn::Max(hn::Mul(hn::Sub(hn::LoadU(df, x + i + lanes), vm), log2e), floor);
    const auto e0 = exp2_nonpositive(df, u0);
    const auto e1 = exp2_nonpositive(df, u1);
    s0 = hn::Add(s0, e0);
    s1 = hn::Add(s1, e1);
    d0 = hn::MulAdd(e0, u0, d0);
    d1 = hn::MulAdd(e1, u1, d1);
  }
  for (; i < n; i += lanes) {
    const auto u0 = hn::Max(hn::Mul(hn::Sub(hn::LoadU(df, x + i), vm), log2e), floor);
    const auto e0 = exp2_nonpositive(df, u0);
    s0 = hn::Add(s0, e0);
    d0 = hn::MulAdd(e0, u0, d0);
  }
  for (; fetched < next_bytes; fetched += 64) hwy::Prefetch(next + fetched);
  constexpr double kLn2 = 0.69314718055994530942;
  s += static_cast<double>(hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1))));
  d += kLn2 * static_cast<double>(hn::GetLane(hn::SumOfLanes(df, hn::Add(d0, d1))));
}

template <typename T>
RowStats row_stats_typed(const T* HWY_RESTRICT row, std::size_t vocab, std::span<const TokenId> end_ids) {
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  HWY_ALIGN float widened[kChunk];
  PartialRow acc = empty_partial();
  std::size_t best_chunk = 0;
  const std::size_t vector_end = vocab - vocab % lanes;
  for (std::size_t start = 0; start < vector_end; start += kChunk) {
    const std::size_t n = std::min(kChunk, vector_end - start);
    const float* chunk = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      chunk = row + start;
    } else {
      for (std::size_t i = 0; i < n; i += lanes) {
        hn::Store(load_widened(df, row + start + i), df, widened + i);
      }
      chunk = widened;
    }
    bool has_nan = false;
    const float cm = chunk_max(df, chunk, n, has_nan);
    if (has_nan) return finish_row(acc, 0.0, -1, classify_non_finite(row, vocab));
    if (cm > acc.m) {
      acc = rebase(acc, cm);
      best_chunk = start;
    }
    // The next chunk is prefetched while the sums below run from L1, so
    // memory and arithmetic overlap instead of taking turns.
    const char* next = nullptr;
    std::size_t next_bytes = 0;
    if (start + kChunk < vector_end) {
      next = reinterpret_cast<const char*>(row + start + kChunk);
      next_bytes = std::min(kChunk, vector_end - start - kChunk) * sizeof(T);
    }
    if (acc.m != -std::numeric_limits<float>::infinity()) {
      chunk_sums(df, chunk, n, acc.m, acc.s, acc.d, next, next_bytes);
    }
  }
  // Scalar tail (fewer than one vector), folded in with the same formulas.
  std::size_t best_tail = vocab;
  for (std::size_t i = vector_end; i < vocab; ++i) {
    const float x = to_float(row[i]);
    if (std::isnan(x)) return finish_row(acc, 0.0, -1, classify_non_finite(row, vocab));
    if (x > acc.m) {
      acc = rebase(acc, x);
      best_tail = i;
    }
    if (acc.m != -std::numeric_limits<float>::infinity()) {
      const double t = std::max(static_cast<double>(x) - acc.m, static_cast<double>(kMinExponent));
      const double e = std::exp(t);
      acc.s += e;
      acc.d += e * t;
    }
  }
  if (!std::isfinite(acc.s) || std::isnan(acc.d) || std::isnan(acc.m) ||
      acc.m == std::numeric_limits<float>::infinity()) {
    return finish_row(acc, 0.0, -1, classify_non_finite(row, vocab));
  }
  std::int32_t argmax = -1;
  if (acc.s > 0.0) {
    argmax = best_tail < vocab ? static_cast<std::int32_t>(best_tail)
                               : first_index_of(row, best_chunk, std::min(best_chunk + kChunk, vocab), acc.m);
  }
  return finish_row(acc, end_mass_terms(row, end_ids, acc.m), argmax, 0);
}

void row_stats_rows(const RowsTask& task) {
  for (std::size_t r = task.first_row; r < task.end_row; ++r) {
    task.out[r] = visit_row(*task.view, r, [&](const auto* row, std::size_t vocab) {
      return row_stats_typed(row, vocab, task.end_ids);
    });
  }
}

float stream_sum(const float* HWY_RESTRICT x, std::size_t n) {
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  auto a0 = hn::Zero(df);
  auto a1 = hn::Zero(df);
  auto a2 = hn::Zero(df);
  auto a3 = hn::Zero(df);
  std::size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(df, x + i));
    a1 = hn::Add(a1, hn::LoadU(df, x + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(df, x + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(df, x + i + 3 * lanes));
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) sum += x[i];
  return sum;
}

const char* target_name() { return hwy::TargetName(HWY_TARGET); }

}  // namespace meridian::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace meridian::kernels {

HWY_EXPORT(row_stats_rows);
HWY_EXPORT(stream_sum);
HWY_EXPORT(target_name);

void dispatch_row_stats_rows(const RowsTask& task) { HWY_DYNAMIC_DISPATCH(row_stats_rows)(task); }
float dispatch_stream_sum(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(stream_sum)(x, n); }
const char* dispatch_target_name() { return HWY_DYNAMIC_DISPATCH(target_name)(); }

}  // namespace meridian::kernels
#endif
