// Row-statistics arithmetic shared by the CPU and CUDA kernels, so the two
// backends merge partial results and finish a row with the same formulas.
//
// A partial state over some logits x_i holds, relative to its own max m:
//   s = sum e^(x_i - m),  d = sum e^(x_i - m) (x_i - m)
// An empty state has m = -inf and s = d = 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "meridian/row_stats.h"

#if defined(__CUDACC__)
#define MERIDIAN_HD __host__ __device__ __forceinline__
#else
#define MERIDIAN_HD inline
#endif

namespace meridian::kernels {

struct PartialRow {
  float m;
  double s;
  double d;
};

MERIDIAN_HD PartialRow empty_partial() { return {-std::numeric_limits<float>::infinity(), 0.0, 0.0}; }

/// Re-expresses `p` relative to a new max `m` >= p.m: each term e^(x-p.m)
/// becomes e^(x-m) = e^(x-p.m) e^delta with delta = p.m - m <= 0, and each
/// (x - p.m) becomes (x - m) = (x - p.m) + delta.
MERIDIAN_HD PartialRow rebase(const PartialRow& p, float m) {
  if (p.s == 0.0) return {m, 0.0, 0.0};  // empty (or all -inf): nothing to rescale
  const double delta = static_cast<double>(p.m) - static_cast<double>(m);
  const double scale = exp(delta);
  return {m, p.s * scale, (p.d + delta * p.s) * scale};
}

MERIDIAN_HD PartialRow merge(const PartialRow& a, const PartialRow& b) {
  const float m = a.m > b.m ? a.m : b.m;
  if (m == -std::numeric_limits<float>::infinity()) return empty_partial();
  const PartialRow ra = rebase(a, m);
  const PartialRow rb = rebase(b, m);
  return {m, ra.s + rb.s, ra.d + rb.d};
}

/// Turns a whole row's state into RowStats. `end_mass_terms` is
/// sum e^(x_id - m) over the end-of-think ids (same m). NaN/+inf rows keep
/// their flags and get NaN statistics.
MERIDIAN_HD RowStats finish_row(const PartialRow& p, double end_mass_terms, std::int32_t argmax,
                                std::uint32_t flags) {
  RowStats out{};
  out.flags = flags;
  out.argmax = argmax;
  if ((flags & (kRowHasNaN | kRowHasPosInf)) != 0U) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    out.max_logit = nan;
    out.log_sum_exp = nan;
    out.entropy = nan;
    out.end_think_mass = nan;
    return out;
  }
  if (p.s == 0.0) {  // every logit -inf: there is no distribution
    out.flags |= kRowAllNegInf;
    out.max_logit = -std::numeric_limits<float>::infinity();
    out.log_sum_exp = -std::numeric_limits<float>::infinity();
    out.entropy = 0.0F;
    out.end_think_mass = 0.0F;
    out.argmax = -1;
    return out;
  }
  const double log_s = log(p.s);
  double entropy = log_s - p.d / p.s;
  // Rounding can leave a one-hot row a hair below zero.
  if (entropy < 0.0) entropy = 0.0;
  out.max_logit = p.m;
  out.log_sum_exp = static_cast<float>(static_cast<double>(p.m) + log_s);
  out.entropy = static_cast<float>(entropy);
  out.end_think_mass = static_cast<float>(end_mass_terms / p.s);
  return out;
}

}  // namespace meridian::kernels
