// The scheduler's per-request state: a dense slot array, an id -> slot index,
// and intrusive queues over slot indices. Each live slot is in exactly one
// queue, so moving a request between queues (ExitThink, preemption, admission)
// is O(1) and a step walks only the queues it needs.
//
// Thread-safety: none (owned by DualQueueScheduler::Impl).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "meridian/phase.h"

namespace meridian::sched_detail {

inline constexpr std::uint32_t kNil = std::numeric_limits<std::uint32_t>::max();

/// Queues, each ordered front (oldest) to back (most recent).
enum Queue : std::uint8_t {
  kOutputQueue = 0,  ///< running, answer phase; ordered by last token
  kThinkQueue = 1,   ///< running, think phase; ordered by last token (round robin)
  kResumeQueue = 2,  ///< recompute victims waiting for re-prefill, the latest first (ADR-0035)
  kWaitQueue = 3,    ///< new arrivals waiting for (chunked) prefill, FCFS
  kSwapQueue = 4,    ///< answer-phase victims whose KV is on the host
  kQueueCount = 5,
  kNoQueue = 0xff,
};

// A request's state is split in two arrays indexed by slot: Slot holds what
// the per-step queue walks and decodes touch, one cache line each, so a walk
// over 1,024 running requests stays within 64 KiB; SlotCold holds what
// admission, preemption and step completion read.
struct alignas(64) Slot {
  RequestId id = 0;
  /// When the next token must land. Think phase: the think guarantee's
  /// deadline (ADR-0015). Answer phase: the latest time that keeps the mean
  /// answer gap within output_tpot_budget_ms (ADR-0026); max until the first
  /// answer token.
  std::int64_t deadline_ns = 0;
  std::uint64_t batch_step = std::numeric_limits<std::uint64_t>::max();  ///< step it was planned in
  std::uint64_t stalled_step = 0;  ///< last step it was runnable but got no KV block
  std::uint32_t prompt = 0;
  std::uint32_t generated = 0;
  std::uint32_t computed = 0;      ///< tokens in KV
  std::uint32_t think_blocks = 0;  ///< live ThinkActive blocks (a swap-in reallocates them in that tier)
  std::uint32_t generation = 0;    ///< bumped when the slot is reused
  std::uint32_t prev = kNil;
  std::uint32_t next = kNil;
  Phase phase = Phase::kThinkDecode;
  std::uint8_t queue = kNoQueue;
};
static_assert(sizeof(Slot) == 64, "a Slot must stay one cache line");

struct SlotCold {
  std::int64_t last_token_ns = 0;
  std::int64_t first_token_ns = 0;  ///< when its first token came (0: none yet); kept across preemption
  std::int64_t arrival_ns = 0;
  std::uint64_t guard_until_step = 0;  ///< not a preemption victim before this step
  std::uint32_t target = 0;            ///< prefill target (prompt, or prompt + generated on recompute)
  std::uint32_t shared_blocks = 0;     ///< prefix-cache blocks that preemption would not free
  std::uint32_t preemptions = 0;
  std::int64_t first_answer_ns = 0;  ///< when its first answer token came (0: none yet)
  std::uint32_t answer_base = 0;     ///< `generated` when it entered the answer phase
  std::uint64_t deferred_step = 0;   ///< TTFT triage deferred it in this step (ADR-0028)
  bool ever_deferred = false;        ///< counted in SchedulerCounters::ttft_deferred
  bool admitted = false;          ///< its (re)prefill has started: the admission watermark no longer applies
  std::int64_t preempted_ns = 0;  ///< when it was preempted, until its first token after (0: not waiting)
};

class RequestTable {
 public:
  [[nodiscard]] Slot& at(std::uint32_t s) { return slots_[s]; }
  [[nodiscard]] const Slot& at(std::uint32_t s) const { return slots_[s]; }
  [[nodiscard]] SlotCold& cold(std::uint32_t s) { return cold_[s]; }
  [[nodiscard]] const SlotCold& cold(std::uint32_t s) const { return cold_[s]; }
  /// The cold half of a Slot of this table.
  [[nodiscard]] SlotCold& cold(const Slot& r) { return cold_[index_of(r)]; }
  [[nodiscard]] const SlotCold& cold(const Slot& r) const { return cold_[index_of(r)]; }
  [[nodiscard]] std::uint32_t find(RequestId id) const {
    auto it = index_.find(id);
    return it == index_.end() ? kNil : it->second;
  }
  [[nodiscard]] std::size_t size() const noexcept { return index_.size(); }
  /// Slots ever made (live or free): every slot index is below it.
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  [[nodiscard]] std::uint32_t front(std::uint8_t q) const { return heads_[q].head; }
  [[nodiscard]] std::uint32_t depth(std::uint8_t q) const { return heads_[q].size; }

  /// New slot for `id` (caller checked it is absent); not in any queue yet.
  std::uint32_t create(RequestId id) {
    std::uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      s = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
      cold_.emplace_back();
    }
    const std::uint32_t generation = slots_[s].generation + 1;
    slots_[s] = Slot{};
    cold_[s] = SlotCold{};
    slots_[s].id = id;
    slots_[s].generation = generation;
    index_.emplace(id, s);
    return s;
  }

  void destroy(std::uint32_t s) {
    unlink(s);
    index_.erase(slots_[s].id);
    ++slots_[s].generation;
    free_.push_back(s);
  }

  void push_back(std::uint8_t q, std::uint32_t s) {
    unlink(s);
    link_after(q, heads_[q].tail, s);
  }

  void push_front(std::uint8_t q, std::uint32_t s) {
    unlink(s);
    link_after(q, kNil, s);
  }

  /// Moves the run from the front of `q` through `last` (a member of `q`) to
  /// the back, keeping its order. O(1).
  void rotate_prefix_to_back(std::uint8_t q, std::uint32_t last) {
    Head& h = heads_[q];
    if (last == h.tail) return;  // the whole queue: same order
    const std::uint32_t first = h.head;
    const std::uint32_t rest = slots_[last].next;
    slots_[rest].prev = kNil;
    slots_[h.tail].next = first;
    slots_[first].prev = h.tail;
    slots_[last].next = kNil;
    h.head = rest;
    h.tail = last;
  }

  /// Priority order: earlier arrival first, then lower id.
  [[nodiscard]] bool older(std::uint32_t a, std::uint32_t b) const {
    const std::int64_t x = cold_[a].arrival_ns;
    const std::int64_t y = cold_[b].arrival_ns;
    return x != y ? x < y : slots_[a].id < slots_[b].id;
  }

  void unlink(std::uint32_t s) {
    Slot& slot = slots_[s];
    if (slot.queue == kNoQueue) return;
    Head& h = heads_[slot.queue];
    (slot.prev == kNil ? h.head : slots_[slot.prev].next) = slot.next;
    (slot.next == kNil ? h.tail : slots_[slot.next].prev) = slot.prev;
    --h.size;
    slot.prev = slot.next = kNil;
    slot.queue = kNoQueue;
  }

 private:
  [[nodiscard]] std::size_t index_of(const Slot& r) const {
    return static_cast<std::size_t>(&r - slots_.data());
  }

  /// Links the unlinked slot `s` into `q` after `after` (kNil: at the front).
  void link_after(std::uint8_t q, std::uint32_t after, std::uint32_t s) {
    Head& h = heads_[q];
    Slot& slot = slots_[s];
    slot.prev = after;
    slot.next = after == kNil ? h.head : slots_[after].next;
    (after == kNil ? h.head : slots_[after].next) = s;
    (slot.next == kNil ? h.tail : slots_[slot.next].prev) = s;
    ++h.size;
    slot.queue = q;
  }

  struct Head {
    std::uint32_t head = kNil;
    std::uint32_t tail = kNil;
    std::uint32_t size = 0;
  };

  std::vector<Slot> slots_;
  std::vector<SlotCold> cold_;  // parallel to slots_
  std::vector<std::uint32_t> free_;
  absl::flat_hash_map<RequestId, std::uint32_t> index_;
  std::array<Head, kQueueCount> heads_{};
};

}  // namespace meridian::sched_detail
