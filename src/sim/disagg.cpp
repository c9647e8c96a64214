// The replay engine's disaggregated mode (sim/disagg.h).
#include "sim/disagg.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian::sim::detail {
namespace {

constexpr double kNsPerMs = 1e6;
constexpr double kNsPerS = 1e9;
// Any transfer ends within the events' range (kMaxEventTimeS, 1e9 s), so
// adding it to a clock reading cannot overflow.
constexpr double kMaxTransferNs = 1e18;

}  // namespace

DisaggLink::DisaggLink(const DisaggSimParams& params, std::uint64_t block_bytes, std::uint32_t block_tokens,
                       std::size_t requests)
    : model_(params, block_bytes),
      block_tokens_(std::max(block_tokens, 1U)),
      state_(requests + 1, State::kNone) {}

std::int64_t DisaggLink::transfer(std::uint64_t blocks, std::int64_t now_ns) {
  // The link serialises one transfer at a time; latency overlaps the next.
  const std::int64_t start = std::max(now_ns, link_free_ns_);
  // Each block is within an hour (FabricLinkModel), but a batch of many is
  // checked where it becomes nanoseconds: never a wrapped, negative hold.
  const double hold_ms = model_.occupancy_ms(blocks);
  if (!(hold_ms * kNsPerMs < kMaxTransferNs)) {
    throw InvalidArgument(
        fmt::format("disagg: a transfer of {} blocks takes {:g} ms at disagg.bandwidth_gbps = "
                    "{:g} and disagg.hash_gbps = {:g}, beyond the simulator's clock",
                    blocks, hold_ms, model_.params().bandwidth_gbps, model_.params().hash_gbps));
  }
  const auto hold = static_cast<std::int64_t>(std::llround(hold_ms * kNsPerMs));
  link_free_ns_ = start + hold;
  busy_ns_ += hold;
  transfer_bytes_ += model_.wire_bytes(blocks);
  return link_free_ns_ + static_cast<std::int64_t>(std::llround(model_.params().latency_us * 1e3));
}

std::size_t DisaggLink::in_flight(std::int64_t now_ns) const {
  return static_cast<std::size_t>(
      std::count_if(pushes_.begin(), pushes_.end(), [now_ns](const Batch& b) { return b.done_ns > now_ns; }));
}

void DisaggLink::exit_think(RequestId id, std::uint32_t think_blocks, std::int64_t now_ns) {
  if (think_blocks == 0) return;
  queued_.emplace_back(id, think_blocks);
  state_[id] = State::kQueued;
  queued_blocks_ += think_blocks;
  if (queued_blocks_ < model_.params().offload_threshold_blocks) return;
  Batch batch;
  for (const auto& [rid, n] : queued_) batch.requests.push_back(rid);
  const std::uint64_t blocks = queued_blocks_;
  queued_.clear();
  queued_blocks_ = 0;
  if (in_flight(now_ns) >= model_.params().max_inflight_batches) {
    // The link is full: the batch stays local, as it would without a fabric.
    ++fallbacks_;
    fallback_blocks_ += blocks;
    for (RequestId rid : batch.requests) state_[rid] = State::kNone;
    return;
  }
  batch.done_ns = transfer(blocks, now_ns);
  for (RequestId rid : batch.requests) state_[rid] = State::kPushed;
  offloaded_blocks_ += blocks;
  ++exit_think_batches_;
  pushes_.push_back(std::move(batch));
}

void DisaggLink::complete_until(std::int64_t now_ns, const std::function<void(RequestId)>& demote) {
  while (!pushes_.empty() && pushes_.front().done_ns <= now_ns) {
    for (RequestId id : pushes_.front().requests) {
      if (state_[id] != State::kPushed) continue;  // preempted or ended meanwhile
      state_[id] = State::kNone;
      demote(id);
    }
    pushes_.pop_front();
  }
}

std::optional<std::int64_t> DisaggLink::next_completion() const {
  if (pushes_.empty()) return std::nullopt;
  return pushes_.front().done_ns;
}

std::optional<std::int64_t> DisaggLink::preempt(RequestId id, std::uint32_t blocks, std::int64_t now_ns) {
  forget(id);  // queued ExitThink blocks leave with the rest of its KV
  if (in_flight(now_ns) >= model_.params().max_inflight_batches) {
    ++fallbacks_;
    fallback_blocks_ += blocks;
    state_[id] = State::kRecompute;
    return std::nullopt;
  }
  const std::int64_t done = transfer(blocks, now_ns);
  pushes_.push_back({done, {}});
  offloaded_blocks_ += blocks;
  ++preemption_offloads_;
  state_[id] = State::kOffloaded;
  return done;
}

DisaggLink::Resume DisaggLink::resume(RequestId id, std::uint32_t context_tokens, std::int64_t now_ns,
                                      std::int64_t& ready_ns) {
  const State s = state_[id];
  if (s == State::kRecompute) {
    state_[id] = State::kNone;
    return Resume::kRecompute;
  }
  if (s != State::kOffloaded) return Resume::kNotOffloaded;
  state_[id] = State::kNone;
  // Everything it holds comes back: its preemption push and any reasoning
  // blocks an ExitThink push already moved out.
  const std::uint64_t blocks = (std::uint64_t{context_tokens} + block_tokens_ - 1) / block_tokens_;
  ready_ns = transfer(blocks, now_ns);
  ++pulls_;
  pull_blocks_ += blocks;
  return Resume::kPull;
}

void DisaggLink::forget(RequestId id) {
  if (state_[id] == State::kQueued) {
    const auto it =
        std::find_if(queued_.begin(), queued_.end(), [id](const auto& q) { return q.first == id; });
    if (it != queued_.end()) {
      queued_blocks_ -= it->second;
      queued_.erase(it);
    }
  }
  state_[id] = State::kNone;
}

std::vector<std::pair<std::string_view, double>> DisaggLink::metrics(double makespan_s) const {
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  const double busy_s = static_cast<double>(busy_ns_) / kNsPerS;
  return {{"disagg_offloaded_blocks", d(offloaded_blocks_)},
          {"disagg_exit_think_batches", d(exit_think_batches_)},
          {"disagg_preemption_offloads", d(preemption_offloads_)},
          {"disagg_fallbacks", d(fallbacks_)},
          {"disagg_fallback_blocks", d(fallback_blocks_)},
          {"disagg_pulls", d(pulls_)},
          {"disagg_pull_blocks", d(pull_blocks_)},
          {"disagg_transfer_bytes", d(transfer_bytes_)},
          {"disagg_link_wait_ms", static_cast<double>(wait_ns_) / kNsPerMs},
          {"disagg_link_busy_pct", makespan_s > 0 ? std::min(100.0, 100.0 * busy_s / makespan_s) : 0}};
}

}  // namespace meridian::sim::detail
