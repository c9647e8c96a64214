// Internals shared by the CPU kernel's translation units: element types,
// scalar conversions and the per-row helpers outside the SIMD loop.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "meridian/row_stats.h"

namespace meridian::kernels {

/// Raw 16-bit storage of one bf16 / fp16 logit.
struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

inline float to_float(float x) noexcept { return x; }
inline float to_float(Bf16 x) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16U);
}
/// IEEE binary16 -> binary32, exact for every value (subnormals, inf, NaN).
inline float to_float(F16 x) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000U) << 16U;
  const std::uint32_t exponent = (x.bits >> 10U) & 0x1FU;
  const std::uint32_t mantissa = x.bits & 0x3FFU;
  if (exponent == 0x1FU) return std::bit_cast<float>(sign | 0x7F800000U | (mantissa << 13U));
  if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-24, exactly representable in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0U ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112U) << 23U) | (mantissa << 13U));
}

/// Calls fn(row pointer in its storage type, vocab) for row `r` of `view`
/// and returns what fn returns: the one place that maps dtype to a type.
template <typename Fn>
RowStats visit_row(const LogitsView& view, std::size_t r, Fn&& fn) {
  const std::size_t offset = r * view.stride();
  const std::size_t vocab = view.vocab_of(r);
  switch (view.dtype) {
    case LogitsDType::kBFloat16: return fn(static_cast<const Bf16*>(view.data) + offset, vocab);
    case LogitsDType::kFloat16: return fn(static_cast<const F16*>(view.data) + offset, vocab);
    case LogitsDType::kFloat32: break;
  }
  return fn(static_cast<const float*>(view.data) + offset, vocab);
}

/// One thread's share of a call: rows [first_row, end_row).
struct RowsTask {
  const LogitsView* view;
  std::span<const TokenId> end_ids;
  std::span<RowStats> out;
  std::size_t first_row;
  std::size_t end_row;
};

/// Flags for a row whose sums came out non-finite: which of NaN / +inf it has.
template <typename T>
std::uint32_t classify_non_finite(const T* row, std::size_t vocab) noexcept {
  std::uint32_t flags = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    const float x = to_float(row[i]);
    if (std::isnan(x)) flags |= kRowHasNaN;
    if (x == std::numeric_limits<float>::infinity()) flags |= kRowHasPosInf;
  }
  return flags;
}

/// First index in [begin, end) whose value equals `m` (the row max).
template <typename T>
std::int32_t first_index_of(const T* row, std::size_t begin, std::size_t end, float m) noexcept {
  for (std::size_t i = begin; i < end; ++i) {
    if (to_float(row[i]) == m) return static_cast<std::int32_t>(i);
  }
  return -1;
}

/// sum e^(x_id - m) over the end-of-think ids (validated to be in the row).
template <typename T>
double end_mass_terms(const T* row, std::span<const TokenId> end_ids, float m) noexcept {
  double sum = 0.0;
  for (const TokenId id : end_ids) sum += std::exp(static_cast<double>(to_float(row[id])) - m);
  return sum;
}

void dispatch_row_stats_rows(const RowsTask& task);
float dispatch_stream_sum(const float* x, std::size_t n);
const char* dispatch_target_name();

}  // namespace meridian::kernels
