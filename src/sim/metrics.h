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

/// The same, of `values`, which it sorts (callers then read the max at back()).
inline double percentile(std::vector<float>& values, double q) {
  std::sort(values.begin(), values.end());
  return sorted_percentile(values, q);
}

inline double mean(const std::vector<float>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace meridian::sim::detail
