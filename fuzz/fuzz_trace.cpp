// JSONL trace reader: read_trace() may only throw TraceError; a trace it
// accepts is written by write_trace() as a trace that reads back to the same
// requests (compared after one write, since fields a request does not use -
// a first turn's delay_s - are not written), and a conversation is a chain:
// each turn has at most one follow-up, in the same conversation.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "meridian/sim_workload.h"

namespace meridian::fuzz {
namespace {

std::string written(const sim::Workload& w) {
  std::ostringstream out;
  sim::write_trace(w, out);
  return out.str();
}

sim::Workload reread(const std::string& text) {
  std::istringstream in(text);
  try {
    return sim::read_trace(in, "<write_trace>");
  } catch (const sim::TraceError& e) {
    finding(std::string("write_trace() output does not read back: ") + e.what() + "\n--- trace ---\n" + text);
  }
}

void run(std::string_view text) {
  std::istringstream in{std::string(text)};
  sim::Workload w;
  try {
    w = sim::read_trace(in, "<fuzz>");
  } catch (const sim::TraceError&) {
    return;
  }
  check(!w.requests.empty(), "an accepted trace holds requests");
  std::vector<bool> has_follow_up(w.requests.size() + 1, false);
  for (std::size_t i = 0; i < w.requests.size(); ++i) {
    const sim::RequestSpec& r = w.requests[i];
    check(r.id == i + 1, "request ids are 1..N in line order");
    check(r.prompt_tokens >= 1 && r.answer_tokens >= 1, "prompt and answer hold a token");
    check(r.answer_at <= r.think_tokens, "answer_at <= think_tokens");
    check(r.after < r.id, "a follow-up names an earlier request");
    if (r.after > 0) {
      check(!has_follow_up[r.after], "a turn has at most one follow-up (a second would never arrive)");
      has_follow_up[r.after] = true;
      const std::uint64_t parent = w.requests[r.after - 1].conversation;
      check(parent == 0 || parent == r.conversation, "a follow-up is in its parent's conversation");
    }
  }
  const std::string once = written(w);
  const sim::Workload back = reread(once);
  check(back.requests.size() == w.requests.size(), "write_trace() keeps every request");
  check(written(back) == once, "write_trace() output reads back to different requests:\n" + once);
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(meridian::fuzz::as_text(data, size)); });
}
