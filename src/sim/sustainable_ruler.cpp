// The sustainable ruler (sustainable_ruler.h, ADR-0038).
#include "meridian/sustainable_ruler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace meridian::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Counts compared with a share of a count: a hair of slack so that 90 of 100 meets 90 %.
constexpr double kCountSlack = 1e-9;

// Tokens `t` has still to generate at time `at`: its natural think length and answer, less
// what it emitted by then, each phase's tokens taken as emitted evenly over the phase (what
// the timeline knows); all of them before it arrived.
double remaining_tokens(const RequestTimeline& t, double at) {
  const double answer = t.natural_answer_tokens > 0 ? t.natural_answer_tokens : t.answer_tokens;
  const double think = t.reasoning ? t.natural_think_tokens + 1.0 : 0.0;  // with </think>
  if (!t.arrived || at < t.arrival_s) return think + answer;
  auto emitted = [at](double from, double to, double tokens) {
    if (tokens <= 0 || from < 0 || at < from) return 0.0;
    if (to <= from || at >= to) return tokens;
    return tokens * (at - from) / (to - from);
  };
  double think_left = 0;
  if (t.reasoning && (t.think_end_s < 0 || at < t.think_end_s)) {
    const double thought_until = t.think_end_s >= 0 ? t.think_end_s : t.last_token_s;
    think_left = std::max(0.0, think - emitted(t.first_token_s, thought_until, t.think_tokens));
  }
  const double answered = emitted(t.first_visible_s, t.last_token_s, t.answer_tokens);
  return think_left + std::max(0.0, answer - answered);
}

// A conversation in the system: from its first turn's arrival until its last turn finished.
// Turns not sent yet (a user between turns, or a turn waiting for the last one to finish) are
// work to come, so a server that delays conversations' next turns does not look emptier.
struct Conversation {
  double arrival = 0;
  double leave = kInf;
  std::vector<const RequestTimeline*> turns;
};

std::vector<Conversation> conversations(const std::vector<RequestTimeline>& requests, double window_end_s) {
  std::vector<Conversation> out;
  std::vector<std::size_t> slot(requests.size() + 1, SIZE_MAX);  // by first-turn id
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RequestTimeline& t = requests[i];
    const std::uint64_t key =
        t.conversation_id > 0 && t.conversation_id <= requests.size() ? t.conversation_id : i + 1;
    if (slot[key] == SIZE_MAX) {
      slot[key] = out.size();
      out.push_back({kInf, 0, {}});  // arrival: the earliest turn's; leave: the latest finish
    }
    Conversation& c = out[slot[key]];
    c.turns.push_back(&t);
    if (t.arrived) {
      c.arrival = std::min(c.arrival, t.conversation_arrival_s >= 0 ? t.conversation_arrival_s : t.arrival_s);
    }
    // Not finished (or never going to: aborted, turned away, never sent) keeps it in the system.
    if (t.completed && t.finish_s >= 0 && c.leave < kInf) {
      c.leave = std::max(c.leave, t.finish_s);
    } else {
      c.leave = kInf;
    }
  }
  // Only conversations that started within the window.
  std::erase_if(out, [&](const Conversation& c) { return !(c.arrival <= window_end_s); });
  return out;
}

struct BandMeans {
  double conversations = 0;  // mean count in the system
  double work = 0;           // mean tokens to generate
  double work_squares = 0;   // mean sum of squared tokens to generate (the work's noise scale)
};

// Means over [from, to]: the count exactly, the tokens on a grid of kWorkSamples points.
BandMeans band_means(const std::vector<Conversation>& all, double from, double to) {
  constexpr int kWorkSamples = 256;
  BandMeans m;
  if (!(to > from)) return m;
  const double dt = (to - from) / kWorkSamples;
  for (const Conversation& c : all) {
    const double lo = std::max(c.arrival, from);
    const double hi = std::min(c.leave, to);
    if (hi <= lo) continue;
    m.conversations += hi - lo;
    for (int k = 0; k < kWorkSamples; ++k) {
      const double at = from + (k + 0.5) * dt;
      if (at < lo || at >= hi) continue;
      double r = 0;
      for (const RequestTimeline* t : c.turns) r += remaining_tokens(*t, at);
      m.work += r;
      m.work_squares += r * r;
    }
  }
  m.conversations /= to - from;
  m.work /= kWorkSamples;
  m.work_squares /= kWorkSamples;
  return m;
}

bool class_meets(const ClassAttainment& c, double target_pct) {
  return c.requests - c.met <= allowed_misses(c.requests, target_pct);
}

bool late_meets(const ClassAttainment& c) { return c.late_requests - c.late_met <= c.late_allowed_misses; }

}  // namespace

double conversation_start(const RequestTimeline& t) noexcept {
  if (t.conversation_arrival_s >= 0) return t.conversation_arrival_s;
  // A request that never arrived has no time of its own: it counts as in the judged window.
  if (!t.arrived) return kInf;
  return t.arrival_s;
}

namespace {}  // namespace

std::string_view to_string(Ruler ruler) noexcept {
  switch (ruler) {
    case Ruler::kSustainable: return "sustainable";
    case Ruler::kPooledWindow: return "pooled-window";
  }
  return "?";
}

std::optional<Ruler> parse_ruler(std::string_view name) noexcept {
  for (Ruler r : {Ruler::kSustainable, Ruler::kPooledWindow}) {
    if (to_string(r) == name) return r;
  }
  return std::nullopt;
}

std::string_view to_string(VerdictReason reason) noexcept {
  switch (reason) {
    case VerdictReason::kMet: return "met";
    case VerdictReason::kIncomplete: return "incomplete";
    case VerdictReason::kChatBelow: return "chat below target";
    case VerdictReason::kReasoningBelow: return "reasoning below target";
    case VerdictReason::kPooledBelow: return "pooled below target";
    case VerdictReason::kLateChat: return "late chat below target";
    case VerdictReason::kLateReasoning: return "late reasoning below target";
    case VerdictReason::kBacklogGrowing: return "backlog growing";
  }
  return "?";
}

double BacklogStats::growth_pct() const noexcept {
  if (mid <= 0) return end <= 0 ? 0.0 : kInf;
  return 100.0 * (end - mid) / mid;
}

double BacklogStats::work_growth_pct() const noexcept {
  if (work_mid <= 0) return work_end <= 0 ? 0.0 : kInf;
  return 100.0 * (work_end - work_mid) / work_mid;
}

double ClassAttainment::pct() const noexcept {
  return requests == 0 ? 100.0 : 100.0 * static_cast<double>(met) / static_cast<double>(requests);
}

double ClassAttainment::late_pct() const noexcept {
  return late_requests == 0 ? 100.0
                            : 100.0 * static_cast<double>(late_met) / static_cast<double>(late_requests);
}

std::uint64_t allowed_misses(std::uint64_t requests, double target_pct) noexcept {
  const double share = std::clamp(1.0 - target_pct / 100.0, 0.0, 1.0);
  return static_cast<std::uint64_t>(std::floor(static_cast<double>(requests) * share + kCountSlack));
}

BacklogStats backlog_stats(const std::vector<RequestTimeline>& requests, double window_end_s,
                           const SustainabilityRule& rule) {
  BacklogStats b;
  b.window_end_s = window_end_s;
  const double half = 0.5 * window_end_s;
  for (const RequestTimeline& t : requests) {
    if (t.arrived && t.arrival_s > half && t.arrival_s <= window_end_s) b.arrivals += 1;
  }
  const std::vector<Conversation> all = conversations(requests, window_end_s);
  const double band = rule.backlog_band_share * window_end_s;
  const BandMeans mid = band_means(all, half - band, half);
  const BandMeans end = band_means(all, window_end_s - band, window_end_s);
  b.mid = mid.conversations;
  b.end = end.conversations;
  b.allowed_end = b.mid + rule.backlog_noise_z * std::sqrt(b.mid);
  b.work_mid = mid.work;
  b.work_end = end.work;
  b.work_allowed_end = mid.work + rule.backlog_noise_z * std::sqrt(mid.work_squares);
  return b;
}

bool RunVerdict::sustainable() const noexcept {
  return incomplete == 0 && late_meets(chat) && late_meets(reasoning) && !backlog.growing();
}

std::string RunVerdict::explain() const {
  switch (reason) {
    case VerdictReason::kMet: return "";
    case VerdictReason::kIncomplete:
      return fmt::format("{} request{} did not complete (aborted, turned away or unfinished)", incomplete,
                         incomplete == 1 ? "" : "s");
    case VerdictReason::kChatBelow:
      return fmt::format("chat attainment {:.2f}% ({} of {})", chat.pct(), chat.met, chat.requests);
    case VerdictReason::kReasoningBelow:
      return fmt::format("reasoning attainment {:.2f}% ({} of {})", reasoning.pct(), reasoning.met,
                         reasoning.requests);
    case VerdictReason::kPooledBelow: return fmt::format("pooled attainment {:.2f}%", attainment_pct);
    case VerdictReason::kLateChat:
      return fmt::format("late chat requests: {} of {} missed (allowed {})",
                         chat.late_requests - chat.late_met, chat.late_requests, chat.late_allowed_misses);
    case VerdictReason::kLateReasoning:
      return fmt::format("late reasoning requests: {} of {} missed (allowed {})",
                         reasoning.late_requests - reasoning.late_met, reasoning.late_requests,
                         reasoning.late_allowed_misses);
    case VerdictReason::kBacklogGrowing:
      return fmt::format(
          "backlog grew {:.1f} -> {:.1f} conversations (allowed {:.1f}), {:.0f} -> {:.0f} tokens to generate "
          "(allowed "
          "{:.0f})",
          backlog.mid, backlog.end, backlog.allowed_end, backlog.work_mid, backlog.work_end,
          backlog.work_allowed_end);
  }
  return "?";
}

RunVerdict judge_run(const std::vector<RequestTimeline>& requests, double window_end_s, const SloParams& slo,
                     Ruler ruler, const SustainabilityRule& rule) {
  RunVerdict v;
  v.ruler = ruler;
  const double judged_from = window_end_s * rule.warmup_share;
  const double late_from = window_end_s * (1.0 - rule.late_share);
  const double target = slo.attainment_pct / 100.0;
  std::uint64_t met = 0;
  for (const RequestTimeline& t : requests) {
    const RequestOutcome o = timeline_outcome(t, slo);
    met += o.slo_met ? 1U : 0U;
    if (!o.completed) ++v.incomplete;
    const double start = conversation_start(t);
    if (start < judged_from) continue;  // warm-up (a request never sent is judged: it missed)
    ClassAttainment& c = t.reasoning ? v.reasoning : v.chat;
    ++c.requests;
    c.met += o.slo_met ? 1U : 0U;
    if (start >= late_from) {
      ++c.late_requests;
      c.late_met += o.slo_met ? 1U : 0U;
    }
  }
  for (ClassAttainment* c : {&v.chat, &v.reasoning}) {
    const auto n = static_cast<double>(c->late_requests);
    c->late_allowed_misses = static_cast<std::uint64_t>(std::floor(
        n * (1.0 - target) + rule.late_noise_z * std::sqrt(n * target * (1.0 - target)) + kCountSlack));
  }
  const auto all = static_cast<std::uint64_t>(requests.size());
  v.attainment_pct = all == 0 ? 100.0 : 100.0 * static_cast<double>(met) / static_cast<double>(all);
  v.backlog = backlog_stats(requests, window_end_s, rule);
  if (ruler == Ruler::kPooledWindow) {
    v.meets = all - met <= allowed_misses(all, slo.attainment_pct);
    v.reason = v.meets ? VerdictReason::kMet : VerdictReason::kPooledBelow;
    return v;
  }
  if (v.incomplete > 0) {
    v.reason = VerdictReason::kIncomplete;
  } else if (!class_meets(v.chat, slo.attainment_pct)) {
    v.reason = VerdictReason::kChatBelow;
  } else if (!class_meets(v.reasoning, slo.attainment_pct)) {
    v.reason = VerdictReason::kReasoningBelow;
  } else if (!late_meets(v.chat)) {
    v.reason = VerdictReason::kLateChat;
  } else if (!late_meets(v.reasoning)) {
    v.reason = VerdictReason::kLateReasoning;
  } else if (v.backlog.growing()) {
    v.reason = VerdictReason::kBacklogGrowing;
  }
  v.meets = v.reason == VerdictReason::kMet;
  return v;
}

}  // namespace meridian::sim
