// Boundary detection used by the phase router: which role a token id has,
// and byte-level matchers for prose markers (Granite). Built once per router;
// immutable and shareable across threads afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/config.h"
#include "meridian/phase.h"

namespace meridian::router_detail {

enum class TokenRole : std::uint8_t { kOrdinary, kThinkStart, kThinkEnd, kEos, kToolStart, kToolEnd };

/// Maps token ids to roles. A range check rejects almost every token before
/// the (tiny) lists are scanned.
class TokenRoles {
 public:
  TokenRoles(const ModelConfig& model, std::span<const TokenId> extra_eos);

  [[nodiscard]] TokenRole role(TokenId token) const noexcept {
    if (token < min_id_ || token > max_id_) return TokenRole::kOrdinary;
    for (std::size_t i = 0; i < count_; ++i) {
      if (ids_[i] == token) return roles_[i];
    }
    return TokenRole::kOrdinary;
  }

 private:
  static constexpr std::size_t kCapacity = 48;
  std::array<TokenId, kCapacity> ids_{};
  std::array<TokenRole, kCapacity> roles_{};
  std::size_t count_ = 0;
  TokenId min_id_ = 1;
  TokenId max_id_ = 0;
};

/// Deterministic automaton that finds any of up to 4 markers anywhere in a
/// byte stream (Aho-Corasick over the markers' bytes; the marker sets are
/// small, so a dense 256-way table is cheap and each byte is O(1)).
class MarkerSearch {
 public:
  explicit MarkerSearch(const std::vector<std::string>& markers);

  [[nodiscard]] bool empty() const noexcept { return accepting_.empty(); }
  [[nodiscard]] static constexpr std::uint16_t start_state() noexcept { return 0; }

  /// Next state after `byte`.
  [[nodiscard]] std::uint16_t step(std::uint16_t state, unsigned char byte) const noexcept {
    return table_[static_cast<std::size_t>(state) * 256U + byte];
  }
  /// Whether a marker ends at this state.
  [[nodiscard]] bool accepts(std::uint16_t state) const noexcept { return accepting_[state] != 0; }

 private:
  std::vector<std::uint16_t> table_;
  std::vector<std::uint8_t> accepting_;
};

/// Prefix matcher for the start of a response: the generated text (after
/// leading whitespace) either is a prefix of some marker (undecided), equals
/// one (matched), or has diverged from all of them.
class MarkerPrefix {
 public:
  explicit MarkerPrefix(std::vector<std::string> markers);

  enum class Verdict : std::uint8_t { kUndecided, kMatched, kDiverged };

  /// Per-request state: bytes matched so far and which markers still match.
  struct State {
    std::uint16_t matched = 0;
    std::uint8_t alive = 0xFF;
    bool started = false;  ///< a non-whitespace byte has been seen
  };

  [[nodiscard]] bool empty() const noexcept { return markers_.empty(); }

  /// Consume one byte.
  Verdict step(State& state, unsigned char byte) const noexcept;

 private:
  std::vector<std::string> markers_;
};

}  // namespace meridian::router_detail
