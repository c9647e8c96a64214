// The verdict of one run under a goodput ruler (sustainable_ruler.h judges it):
// plain values, so that a replay result can carry one.
//
// Thread-safety: plain values; const members may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meridian::sim {

/// Which rule turns runs into a goodput.
enum class Ruler : std::uint8_t {
  kSustainable = 0,   ///< sustainable_ruler.h: the default, and of record
  kPooledWindow = 1,  ///< retired: pooled attainment >= target over the drained window, nothing else
};
/// "sustainable", "pooled-window".
[[nodiscard]] std::string_view to_string(Ruler ruler) noexcept;
[[nodiscard]] std::optional<Ruler> parse_ruler(std::string_view name) noexcept;

/// The constants of the sustainable rule (ADR-0038 records how each was chosen).
struct SustainabilityRule {
  /// Conversations that start in the first `warmup_share` of the window meet
  /// a server still filling up: rules 2 and 3 judge the rest (rules 1 and 4
  /// count every request). Without it a short window's empty start lifts its
  /// attainment, and goodput would depend on the window.
  double warmup_share = 0.25;
  /// Conversations that start in the last `late_share` of the window are
  /// "late" (rule 3); the backlog bands are the window's second and last
  /// `backlog_band_share` (rule 4).
  double late_share = 0.25;
  double backlog_band_share = 0.25;
  /// Rule 4 allows end <= mid + backlog_noise_z * sqrt(mid) (conversations), and for tokens
  /// work_end <= work_mid + backlog_noise_z * sqrt(the band's mean sum of squared tokens to
  /// generate per conversation): no growth beyond the noise of a sum over what is in the system
  /// (for a count, sqrt of the count). ADR-0038 has the measurements behind 4.
  double backlog_noise_z = 4.0;
  /// Rule 3 allows a class's late misses up to the target's share plus this
  /// many binomial standard deviations (a handful of late requests is noise).
  double late_noise_z = 2.0;
};

/// The work in the system, time-averaged over two bands of the window, counted two ways:
/// conversations (from their first turn's arrival until their last turn finished) and the
/// tokens they have still to generate (each turn's natural think length and answer, less what
/// it emitted; a turn not sent yet counts whole). Many short requests held back move the
/// count, a few long ones the tokens; a server that delays next turns does not look emptier.
struct BacklogStats {
  double window_end_s = 0;
  double mid = 0;          ///< conversations, over the second band: [T/2 - band, T/2]
  double end = 0;          ///< conversations, over the last band: [T - band, T]
  double arrivals = 0;     ///< requests that arrived over the window's second half
  double allowed_end = 0;  ///< the most `end` may be (rule 4)
  double work_mid = 0;     ///< tokens to generate, over the second band
  double work_end = 0;     ///< tokens to generate, over the last band
  double work_allowed_end = 0;
  [[nodiscard]] bool growing() const noexcept { return end > allowed_end || work_end > work_allowed_end; }
  /// (end - mid) / mid in percent (0 when mid is 0 and end is 0): conversations.
  [[nodiscard]] double growth_pct() const noexcept;
  /// The same of tokens to generate.
  [[nodiscard]] double work_growth_pct() const noexcept;
};

/// One class's share of requests within the SLO, over its judged requests
/// (past the warm-up) and over the late ones.
struct ClassAttainment {
  std::uint64_t requests = 0;  ///< judged: conversations started after the warm-up
  std::uint64_t met = 0;
  std::uint64_t late_requests = 0;
  std::uint64_t late_met = 0;
  std::uint64_t late_allowed_misses = 0;           ///< rule 3's allowance
  [[nodiscard]] double pct() const noexcept;       ///< 100 when the class is empty
  [[nodiscard]] double late_pct() const noexcept;  ///< 100 when no request of the class was late
};

/// Why a run does not meet the ruler (the first rule it breaks, in rule order).
enum class VerdictReason : std::uint8_t {
  kMet = 0,
  kIncomplete,      ///< rule 1
  kChatBelow,       ///< rule 2
  kReasoningBelow,  ///< rule 2
  kPooledBelow,     ///< the retired ruler's only rule
  kLateChat,        ///< rule 3
  kLateReasoning,   ///< rule 3
  kBacklogGrowing,  ///< rule 4
};
[[nodiscard]] std::string_view to_string(VerdictReason reason) noexcept;

struct RunVerdict {
  Ruler ruler = Ruler::kSustainable;
  bool meets = false;  ///< the rate counts toward goodput under `ruler`
  VerdictReason reason = VerdictReason::kMet;
  double attainment_pct = 0;  ///< pooled over every request (reported; judged only by the retired ruler)
  ClassAttainment chat;
  ClassAttainment reasoning;
  std::uint64_t incomplete = 0;  ///< arrived (or due to arrive) and not completed
  BacklogStats backlog;
  /// Rules 1, 3 and 4 (the server keeps up), whatever the SLO attainment.
  [[nodiscard]] bool sustainable() const noexcept;
  /// e.g. "backlog grew 98 -> 179 requests (allowed 153)"; "" when met.
  [[nodiscard]] std::string explain() const;
};

}  // namespace meridian::sim
