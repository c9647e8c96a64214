// Test logits: generators for the row shapes the probe must handle and
// float -> bf16/fp16 encoders (round to nearest even) for 16-bit inputs.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "meridian/row_stats.h"

namespace meridian::testing {

inline std::uint16_t to_bf16_bits(float f) {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((bits >> 16U) | 0x40U);
  const std::uint32_t rounding = 0x7FFFU + ((bits >> 16U) & 1U);
  return static_cast<std::uint16_t>((bits + rounding) >> 16U);
}

inline std::uint16_t to_fp16_bits(float f) {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16U) & 0x8000U);
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | 0x7E00U);
  const float a = std::fabs(f);
  if (a >= 65520.0F) return static_cast<std::uint16_t>(sign | 0x7C00U);  // rounds to inf
  if (a < 6.103515625e-05F) {                                            // subnormal half: multiples of 2^-24
    const auto m = static_cast<std::uint16_t>(std::nearbyint(a * 16777216.0F));
    return static_cast<std::uint16_t>(sign | m);
  }
  int exponent = 0;
  const float mantissa = std::frexp(a, &exponent);  // a = mantissa * 2^exponent, mantissa in [0.5, 1)
  auto m = static_cast<std::uint32_t>(std::nearbyint((mantissa * 2.0F - 1.0F) * 1024.0F));
  auto e = static_cast<std::uint32_t>(exponent - 1 + 15);
  if (m == 1024U) {
    m = 0;
    ++e;
  }
  return static_cast<std::uint16_t>(sign | (e << 10U) | m);
}

enum class RowShape { kRandom, kPeaked, kUniform, kWithNegInf, kLargeMagnitude };

/// One row of logits of the given shape.
inline std::vector<float> make_row(RowShape shape, std::size_t vocab, std::mt19937_64& rng) {
  std::vector<float> row(vocab);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  std::uniform_int_distribution<std::size_t> pick(0, vocab - 1);
  switch (shape) {
    case RowShape::kRandom:
      for (auto& x : row) x = normal(rng);
      break;
    case RowShape::kPeaked:
      for (auto& x : row) x = normal(rng) - 20.0F;
      row[pick(rng)] = 25.0F;
      break;
    case RowShape::kUniform:
      for (auto& x : row) x = 1.25F;
      break;
    case RowShape::kWithNegInf:
      for (auto& x : row) x = normal(rng);
      for (std::size_t i = 0; i < vocab / 3; ++i) row[pick(rng)] = -std::numeric_limits<float>::infinity();
      break;
    case RowShape::kLargeMagnitude:
      for (auto& x : row) x = normal(rng) * 10.0F + 80.0F;
      break;
  }
  return row;
}

/// A [rows, stride] logits matrix stored in `dtype`.
struct EncodedLogits {
  LogitsDType dtype = LogitsDType::kFloat32;
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;

  EncodedLogits(const std::vector<float>& floats, LogitsDType type) : dtype(type) {
    if (dtype == LogitsDType::kFloat32) {
      f32 = floats;
      return;
    }
    h16.resize(floats.size());
    for (std::size_t i = 0; i < floats.size(); ++i) {
      h16[i] = dtype == LogitsDType::kBFloat16 ? to_bf16_bits(floats[i]) : to_fp16_bits(floats[i]);
    }
  }
  [[nodiscard]] const void* data() const {
    return dtype == LogitsDType::kFloat32 ? static_cast<const void*>(f32.data()) : h16.data();
  }
  [[nodiscard]] LogitsView view(std::size_t rows, std::size_t vocab, std::size_t stride = 0) const {
    LogitsView v;
    v.data = data();
    v.dtype = dtype;
    v.rows = rows;
    v.vocab = vocab;
    v.row_stride = stride;
    return v;
  }
};

}  // namespace meridian::testing
