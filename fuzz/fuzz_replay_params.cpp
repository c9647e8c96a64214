// Replay parameters reader: parse_replay_params() may only throw ConfigError;
// parameters it accepts print with to_toml() as a document that reads back to
// the same parameters.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "meridian/replay.h"

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
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(meridian::fuzz::as_text(data, size)); });
}
