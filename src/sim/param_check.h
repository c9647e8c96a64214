// Internal: the one rule check the simulator's parameter validators share
// (cost model, fabric link): a failed check adds one ConfigIssue whose path is
// "<section>.<field>" and whose message reads "<path> must be <rule>; got <value>".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian::sim::detail {

inline void require(std::vector<ConfigIssue>& issues, bool ok, std::string_view section,
                    std::string_view field, std::string_view rule, double got) {
  if (ok) return;
  const std::string path = fmt::format("{}.{}", section, field);
  issues.push_back({path, fmt::format("{} must be {}; got {}", path, rule, got), "", 0, 0});
}

}  // namespace meridian::sim::detail
