// JSONL workload traces: one request per line, checked field by field so a
// bad line is reported with its file, line and field.
#include <array>
#include <cmath>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/input_file.h"
#include "config/input_shape.h"
#include "config/toml_fields.h"
#include "meridian/sim_workload.h"

namespace meridian::sim {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 10> kFields = {
    "arrival_s", "prompt_tokens", "think_tokens", "answer_tokens", "answer_at",
    "priority",  "conversation",  "turn",         "after",         "delay_s"};

class LineReader {
 public:
  LineReader(const json& obj, std::string_view source, std::size_t line)
      : obj_(obj), source_(source), line_(line) {}

  [[noreturn]] void fail(std::string_view field, const std::string& message) const {
    throw TraceError(fmt::format("{}:{}: {}: {}", source_, line_, field, message));
  }

  template <class T>
  T integer(std::string_view field, T fallback, bool required, T min = 0) const {
    const auto it = obj_.find(field);
    if (it == obj_.end()) {
      if (required) fail(field, "is required");
      return fallback;
    }
    if (!it->is_number_integer()) {
      fail(field, fmt::format("must be an integer; got {}", toml_fields::shown(it->dump())));
    }
    const auto out_of_range = [&](auto got) {
      fail(field, fmt::format("must be in [{}, {}]; got {}", min, std::numeric_limits<T>::max(), got));
    };
    // Non-negative values are read unsigned: as int64 those above 2^63 - 1 would wrap negative.
    if (it->is_number_unsigned()) {
      const auto u = it->template get<std::uint64_t>();
      const bool below = min > 0 && u < static_cast<std::uint64_t>(min);
      if (below || u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) out_of_range(u);
      return static_cast<T>(u);
    }
    const auto v = it->template get<std::int64_t>();
    if (v < static_cast<std::int64_t>(min)) out_of_range(v);
    return static_cast<T>(v);
  }

  // A time in seconds: finite, in [0, kMaxEventTimeS] (it becomes an int64 nanosecond count).
  double seconds(std::string_view field, bool required) const {
    const auto it = obj_.find(field);
    if (it == obj_.end()) {
      if (required) fail(field, "is required");
      return 0;
    }
    if (!it->is_number()) {
      fail(field, fmt::format("must be a number; got {}", toml_fields::shown(it->dump())));
    }
    const auto v = it->get<double>();
    if (!std::isfinite(v) || v < 0 || v > kMaxEventTimeS) {
      fail(field, fmt::format("must be a finite number of seconds in [0, {:g}]; got {}", kMaxEventTimeS,
                              toml_fields::shown(it->dump())));
    }
    return v;
  }

 private:
  const json& obj_;
  std::string_view source_;
  std::size_t line_;
};

}  // namespace

Workload read_trace(std::istream& in, std::string_view source_name) {
  Workload w;
  w.name = "trace";
  std::string text;
  std::size_t line = 0;
  // Per request (index id - 1): its line, and the line of its follow-up (0: none).
  std::vector<std::size_t> line_of;
  std::vector<std::size_t> follow_up_line;
  while (std::getline(in, text)) {
    ++line;
    const auto first = text.find_first_not_of(" \t\r");
    if (first == std::string::npos || text[first] == '#') continue;
    if (static_cast<double>(w.requests.size()) >= kMaxWorkloadRequests) {
      throw TraceError(fmt::format("{}:{}: a trace holds at most {:.0f} requests", source_name, line,
                                   kMaxWorkloadRequests));
    }
    json obj;
    // Bounded before anything recurses into it (config/input_shape.h); a trace line is flat.
    if (const auto deep = input_shape::json_too_deep(text)) {
      throw TraceError(fmt::format("{}:{}: {} (byte {})", source_name, line, deep->what, deep->byte));
    }
    try {
      obj = json::parse(text);
    } catch (const json::parse_error& e) {
      throw TraceError(fmt::format("{}:{}: not valid JSON (byte {}): {}", source_name, line, e.byte,
                                   toml_fields::shown(e.what())));
    } catch (const json::exception& e) {
      // A number too large for a double (out_of_range.406) is not a parse_error.
      throw TraceError(
          fmt::format("{}:{}: not valid JSON: {}", source_name, line, toml_fields::shown(e.what())));
    }
    if (!obj.is_object()) {
      throw TraceError(
          fmt::format("{}:{}: must be a JSON object; got {}", source_name, line, obj.type_name()));
    }
    for (const auto& [key, value] : obj.items()) {
      if (std::find(kFields.begin(), kFields.end(), key) == kFields.end()) {
        throw TraceError(fmt::format("{}:{}: {}: is not a trace field (known: {})", source_name, line, key,
                                     fmt::join(kFields, ", ")));
      }
    }
    const LineReader r(obj, source_name, line);
    RequestSpec s;
    s.id = w.requests.size() + 1;
    s.prompt_tokens = r.integer<std::uint32_t>("prompt_tokens", 0, true, 1);
    s.think_tokens = r.integer<std::uint32_t>("think_tokens", 0, false);
    s.answer_tokens = r.integer<std::uint32_t>("answer_tokens", 0, true, 1);
    s.answer_at = r.integer<std::uint32_t>("answer_at", 0, false);
    s.priority = r.integer<std::int32_t>("priority", 0, false, std::numeric_limits<std::int32_t>::min());
    s.conversation = r.integer<std::uint64_t>("conversation", 0, false);
    s.turn = r.integer<std::uint32_t>("turn", 0, false);
    s.after = r.integer<std::uint64_t>("after", 0, false);
    s.delay_s = r.seconds("delay_s", false);
    if (s.after == 0) {
      s.arrival_s = r.seconds("arrival_s", true);
    } else if (s.after >= s.id) {
      r.fail("after", fmt::format("must name an earlier line's request (1..{}); got {}", s.id - 1, s.after));
    }
    if (s.answer_at > s.think_tokens) {
      r.fail("answer_at", fmt::format("must be <= think_tokens ({}); got {}", s.think_tokens, s.answer_at));
    }
    if (s.after > 0 && s.conversation == 0) r.fail("conversation", "is required (> 0) for a follow-up turn");
    if (s.after > 0) {
      // A turn has one next turn: the engines replay a conversation as a chain,
      // and a second follow-up of one parent would never arrive.
      const std::size_t parent = s.after - 1;
      if (follow_up_line[parent] != 0) {
        r.fail("after", fmt::format("request {} (line {}) already has a follow-up on line {}; a turn has one "
                                    "next turn (start a new conversation for a branch)",
                                    s.after, line_of[parent], follow_up_line[parent]));
      }
      const std::uint64_t parent_conversation = w.requests[parent].conversation;
      if (parent_conversation != 0 && parent_conversation != s.conversation) {
        r.fail("conversation",
               fmt::format("must be the conversation of the turn it follows (request {} on line "
                           "{}: {}); got {}",
                           s.after, line_of[parent], parent_conversation, s.conversation));
      }
      follow_up_line[parent] = line;
    }
    w.requests.push_back(s);
    line_of.push_back(line);
    follow_up_line.push_back(0);
  }
  // A failed read ends getline() like the end of the file would; without this
  // a trace that cannot be read (a directory, EIO) was cut short silently.
  if (in.bad()) {
    throw TraceError(fmt::format("{}: reading the trace failed after line {}", source_name, line));
  }
  if (w.requests.empty()) throw TraceError(fmt::format("{}: the trace holds no requests", source_name));
  return w;
}

Workload load_trace(const std::filesystem::path& path) {
  std::string why;
  const std::optional<std::string> text = input_file::read_all(path, why);
  if (!text) {
    throw TraceError(
        fmt::format("{}: cannot read the trace file: {}", toml_fields::shown(path.string(), 256), why));
  }
  std::istringstream in(*text);
  return read_trace(in, path.string());
}

void write_trace(const Workload& workload, std::ostream& out) {
  for (const RequestSpec& r : workload.requests) {
    json obj;
    if (r.after == 0) {
      obj["arrival_s"] = r.arrival_s;
    } else {
      obj["after"] = r.after;
      obj["delay_s"] = r.delay_s;
    }
    obj["prompt_tokens"] = r.prompt_tokens;
    if (r.think_tokens > 0) obj["think_tokens"] = r.think_tokens;
    obj["answer_tokens"] = r.answer_tokens;
    if (r.answer_at > 0) obj["answer_at"] = r.answer_at;
    if (r.priority != 0) obj["priority"] = r.priority;
    if (r.conversation > 0) {
      obj["conversation"] = r.conversation;
      obj["turn"] = r.turn;
    }
    out << obj.dump() << '\n';
  }
}

}  // namespace meridian::sim
