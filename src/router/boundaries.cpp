#include "router/boundaries.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <limits>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian::router_detail {

TokenRoles::TokenRoles(const ModelConfig& model, std::span<const TokenId> extra_eos) {
  const auto add = [&](std::span<const TokenId> ids, TokenRole role) {
    for (TokenId id : ids) {
      // The first role registered for an id wins; config validation already
      // rejects ids with two roles, and extra EOS ids never override a boundary.
      const auto end = ids_.begin() + static_cast<std::ptrdiff_t>(count_);
      if (std::find(ids_.begin(), end, id) != end) continue;
      if (count_ == kCapacity) {
        throw InvalidArgument(
            fmt::format("model.{} has more than {} boundary/EOS token ids", model.name, kCapacity));
      }
      ids_[count_] = id;
      roles_[count_] = role;
      ++count_;
      min_id_ = count_ == 1 ? id : std::min(min_id_, id);
      max_id_ = count_ == 1 ? id : std::max(max_id_, id);
    }
  };
  add(model.think_start_token_ids, TokenRole::kThinkStart);
  add(model.think_end_token_ids, TokenRole::kThinkEnd);
  add(model.eos_token_ids, TokenRole::kEos);
  add(extra_eos, TokenRole::kEos);
  add(model.tool_call_start_token_ids, TokenRole::kToolStart);
  add(model.tool_call_end_token_ids, TokenRole::kToolEnd);
}

MarkerSearch::MarkerSearch(const std::vector<std::string>& markers) {
  if (markers.empty()) return;
  // Trie of the markers, then breadth-first failure links folded into a
  // dense transition table (classic Aho-Corasick construction).
  std::vector<std::array<int, 256>> go(1);
  go[0].fill(-1);
  std::vector<std::uint8_t> accept(1, 0);
  for (const std::string& marker : markers) {
    std::size_t state = 0;
    for (char c : marker) {
      const auto byte = static_cast<unsigned char>(c);
      if (go[state][byte] < 0) {
        go[state][byte] = static_cast<int>(go.size());
        go.emplace_back().fill(-1);
        accept.push_back(0);
      }
      state = static_cast<std::size_t>(go[state][byte]);
    }
    accept[state] = 1;
  }
  if (go.size() > std::numeric_limits<std::uint16_t>::max()) {
    throw InvalidArgument("prose markers are too long for the marker automaton");
  }
  std::vector<std::size_t> fail(go.size(), 0);
  std::deque<std::size_t> queue;
  for (std::size_t b = 0; b < 256; ++b) {
    if (go[0][b] < 0) {
      go[0][b] = 0;
    } else {
      fail[static_cast<std::size_t>(go[0][b])] = 0;
      queue.push_back(static_cast<std::size_t>(go[0][b]));
    }
  }
  while (!queue.empty()) {
    const std::size_t state = queue.front();
    queue.pop_front();
    accept[state] = static_cast<std::uint8_t>(accept[state] | accept[fail[state]]);
    for (std::size_t b = 0; b < 256; ++b) {
      const int next = go[state][b];
      if (next < 0) {
        go[state][b] = go[fail[state]][b];
      } else {
        fail[static_cast<std::size_t>(next)] = static_cast<std::size_t>(go[fail[state]][b]);
        queue.push_back(static_cast<std::size_t>(next));
      }
    }
  }
  table_.resize(go.size() * 256U);
  for (std::size_t s = 0; s < go.size(); ++s) {
    for (std::size_t b = 0; b < 256; ++b) table_[s * 256U + b] = static_cast<std::uint16_t>(go[s][b]);
  }
  accepting_ = std::move(accept);
}

MarkerPrefix::MarkerPrefix(std::vector<std::string> markers) : markers_(std::move(markers)) {
  if (markers_.size() > 8) throw InvalidArgument("at most 8 prose start markers are supported");
}

MarkerPrefix::Verdict MarkerPrefix::step(State& state, unsigned char byte) const noexcept {
  if (!state.started) {
    if (std::isspace(byte) != 0) return Verdict::kUndecided;
    state.started = true;
  }
  const std::size_t pos = state.matched;
  bool any_alive = false;
  for (std::size_t i = 0; i < markers_.size(); ++i) {
    const auto bit = static_cast<std::uint8_t>(1U << i);
    if ((state.alive & bit) == 0) continue;
    const std::string& marker = markers_[i];
    if (pos < marker.size() && static_cast<unsigned char>(marker[pos]) == byte) {
      if (pos + 1 == marker.size()) return Verdict::kMatched;
      any_alive = true;
    } else {
      state.alive = static_cast<std::uint8_t>(state.alive & ~bit);
    }
  }
  if (!any_alive) return Verdict::kDiverged;
  state.matched = static_cast<std::uint16_t>(pos + 1);
  return Verdict::kUndecided;
}

}  // namespace meridian::router_detail
