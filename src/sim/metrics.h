// Internal: per-run measurement of the replay engine and its summary.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace meridian::sim::detail {

/// Nearest-rank percentile (q in [0, 100]) of already sorted values; 0 if empty.
inline double sorted_percentile(const std::vector<float>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(q / 100.0 * static_cast<double>(sorted.size()));
  const std::size_t idx = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
  return sorted[std::min(idx, sorted.size() - 1)];
}

/// The same, of `values`, which it reorders: a selection, not a sort (a run's think gaps number
/// in the tens of millions, and sorting them was a fifth of the replay's time).
inline double percentile(std::vector<float>& values, double q) {
  if (values.empty()) return 0;
  const double rank = std::ceil(q / 100.0 * static_cast<double>(values.size()));
  const std::size_t idx = std::min(rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1, values.size() - 1);
  const auto nth = values.begin() + static_cast<std::ptrdiff_t>(idx);
  std::nth_element(values.begin(), nth, values.end());
  return *nth;
}

/// The largest of `values`; 0 if empty.
inline double max_of(const std::vector<float>& values) {
  return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end());
}

inline double mean(const std::vector<float>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace meridian::sim::detail
