// Replay parameters reader: parse_replay_params() may only throw ConfigError;
// parameters it accepts print with to_toml() as a document that reads back to
// the same parameters, and a fabric link it accepts either is refused by
// FabricLinkModel with a named field or moves a KV block within an hour.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "meridian/replay.h"
#include "meridian/sim_cost_model.h"

namespace meridian::fuzz {
namespace {

void run(std::string_view text) {
  sim::ReplayParams params;
  try {
    params = sim::parse_replay_params(text, "<fuzz>");
  } catch (const ConfigError& e) {
    check(!e.issues().empty(), "a ConfigError names at least one issue");
    return;
  }
  const std::string toml = sim::to_toml(params);
  sim::ReplayParams again;
  try {
    again = sim::parse_replay_params(toml, "<to_toml>");
  } catch (const ConfigError& e) {
    finding(std::string("to_toml() output does not parse back:\n") + e.what() + "\n--- document ---\n" +
            toml);
  }
  check(sim::to_toml(again) == toml, "to_toml() output parses back to different parameters:\n" + toml);
  // Derived quantities (issue 27): a fabric link the model accepts moves one KV
  // block within an hour, so its transfers stay finite nanosecond counts.
  if (params.disagg.fabric != "none") {
    for (const std::uint32_t block_tokens : {1U, 16U, 1024U}) {
      try {
        const sim::FabricLinkModel link(params.disagg, params.cost_model.kv_bytes_per_token() * block_tokens);
        const double ms = link.transfer_ms(1);
        check(std::isfinite(ms) && ms >= 0 && ms <= 3.6e6 + params.disagg.latency_us / 1e3,
              "an accepted link moves one block within an hour");
      } catch (const ConfigError& e) {
        check(!e.issues().empty(), "a refused link names its field");
      }
    }
  }
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(meridian::fuzz::as_text(data, size)); });
}
