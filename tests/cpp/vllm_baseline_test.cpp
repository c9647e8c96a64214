// Trace tables for the vLLM baseline policies of the replay (src/sim/vllm_policy.cpp):
// who is scheduled, who is preempted, and in which order, step by step.
#include <vector>

#include <gtest/gtest.h>

#include "sim/policy.h"

namespace meridian::sim::detail {
namespace {

struct Row {
  std::vector<RequestId> scheduled;
  std::vector<RequestId> preempted;
};

class VllmTrace {
 public:
  VllmTrace(bool priority, std::uint32_t blocks, std::uint32_t block_tokens = 4, std::uint32_t budget = 64)
      : VllmTrace(VllmPolicyOptions{priority, budget, 16}, blocks, block_tokens) {}
  VllmTrace(const VllmPolicyOptions& o, std::uint32_t blocks, std::uint32_t block_tokens = 4)
      : kv_(options(blocks)),
        pool_(kv_, block_tokens, [](RequestId id, std::uint32_t index) { return id * 1000 + index; }),
        policy_(make_vllm_policy(o, pool_)) {}

  // Each scheduled request's tokens in the next step.
  std::vector<std::uint32_t> step_tokens() {
    const EngineStep& s = policy_->plan(0);
    std::vector<std::uint32_t> out;
    for (const StepItem& w : s.items) out.push_back(w.tokens);
    policy_->complete(1.0, 0);
    return out;
  }

  void add(RequestId id, std::uint32_t prompt, std::int32_t priority = 0) {
    policy_->add({id, Phase::kThinkDecode, prompt, 0, static_cast<std::int64_t>(id)}, priority);
  }

  Row step() { return step_at(0, 1.0, 0); }
  // A step planned at `now_ns` that takes `ms` (and ends at now_ns + ms, or `end_ns` when given).
  Row step_at(std::int64_t now_ns, double ms, std::int64_t end_ns = -1) {
    const EngineStep& s = policy_->plan(now_ns);
    Row row;
    for (const StepItem& w : s.items) row.scheduled.push_back(w.id);
    for (const Preemption& p : s.preempted) row.preempted.push_back(p.id);
    policy_->complete(ms, end_ns >= 0 ? end_ns : now_ns + static_cast<std::int64_t>(ms * 1e6));
    return row;
  }

  KvBlockManager& kv() { return kv_; }
  KvPool& pool() { return pool_; }
  SchedulingPolicy& policy() { return *policy_; }

 private:
  static KvBlockManagerOptions options(std::uint32_t blocks) {
    KvBlockManagerOptions o;
    o.num_blocks = blocks;
    return o;
  }
  KvBlockManager kv_;
  KvPool pool_;
  std::unique_ptr<SchedulingPolicy> policy_;
};

TEST(VllmFcfsTrace, PreemptsTheTailOfTheRunningList) {
  // 5 blocks of 4 tokens; three 4-token prompts take one block each.
  VllmTrace t(false, 5);
  t.add(1, 4);
  t.add(2, 4);
  t.add(3, 4);
  const std::vector<Row> expected = {
      {{1, 2, 3}, {}},  // admit all three in arrival order (prefill, one block each)
      {{1, 2}, {3}},  // decodes need a 2nd block each: 1 and 2 get the last two; 3 (the tail) preempts itself
      {{1, 2}, {}},   // nothing preempted, but 3 cannot be re-admitted: its block is cached, no free block
  };
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const Row row = t.step();
    EXPECT_EQ(row.scheduled, expected[i].scheduled) << "step " << i + 1;
    EXPECT_EQ(row.preempted, expected[i].preempted) << "step " << i + 1;
  }
  // Request 3 waits at the front of the queue; when 1 finishes it comes back
  // and reuses its cached prompt block (prefix hit after recompute preemption).
  t.policy().finish(1);
  t.kv().release(1, ReleaseKind::kFinished);
  const Row row = t.step();
  EXPECT_EQ(row.scheduled, (std::vector<RequestId>{2, 3}));
  EXPECT_TRUE(row.preempted.empty());
}

TEST(VllmFcfsTrace, VictimsComeFromTheTailUntilTheHeadFits) {
  // 3 blocks: request 1 runs with a 7-token prompt (2 blocks), 2 has 1 block.
  VllmTrace t(false, 3);
  t.add(1, 7);
  t.add(2, 4);
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1, 2}));
  // 1 is at 8 tokens (2 blocks hold it), 2 at 5 tokens needs a 2nd block: none free,
  // 2 is the tail and preempts itself.
  const Row r2 = t.step();
  EXPECT_EQ(r2.scheduled, (std::vector<RequestId>{1}));
  EXPECT_EQ(r2.preempted, (std::vector<RequestId>{2}));
  // 1 needs its 3rd block at token 9: the cached block of 2 is reused; 2 keeps waiting.
  const Row r3 = t.step();
  EXPECT_EQ(r3.scheduled, (std::vector<RequestId>{1}));
  EXPECT_TRUE(r3.preempted.empty());
}

TEST(VllmPriorityTrace, PreemptsTheLowestPriorityNotTheTail) {
  VllmTrace t(true, 5);
  t.add(1, 4, /*priority=*/1);  // low priority, arrives first
  t.add(2, 4, 0);
  t.add(3, 4, 0);
  // Admission order is (priority, arrival): 2, 3, then 1.
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{2, 3, 1}));
  // Decodes need a block each; two are free. 2 and 3 get them; 1 is the
  // max (priority, arrival) victim and is preempted.
  const Row row = t.step();
  EXPECT_EQ(row.scheduled, (std::vector<RequestId>{2, 3}));
  EXPECT_EQ(row.preempted, (std::vector<RequestId>{1}));
}

TEST(VllmFcfsTrace, ChunksPrefillToTheTokenBudgetAndAdmitsInOrder) {
  VllmTrace t(false, 64, 4, /*budget=*/10);
  t.add(1, 16);
  t.add(2, 3);
  // 10 tokens: request 1's first chunk takes all of them; 2 waits (FCFS).
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
  // 6 tokens finish 1's prompt, 3 prefill 2, 1 token of budget is left over.
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1, 2}));  // both decode
}

TEST(VllmFcfsTrace, ReserveFullIslAdmitsOnlyWhenTheWholePromptFits) {
  // 6 blocks of 4 tokens, a budget of 8 tokens. Request 1 holds one block; request 2's
  // 24-token prompt needs 6 blocks, and its first 8-token chunk only 2.
  for (const bool reserve : {true, false}) {
    VllmPolicyOptions o{false, 8, 16};
    o.reserve_full_isl = reserve;
    VllmTrace t(o, 6);
    t.add(1, 4);
    EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
    t.add(2, 24);
    // vLLM 0.32's scheduler_reserve_full_isl (on by default): 5 free blocks cannot hold the
    // whole prompt, so 2 waits; without it, its first chunk is admitted.
    EXPECT_EQ(t.step().scheduled, reserve ? (std::vector<RequestId>{1}) : (std::vector<RequestId>{1, 2}))
        << "reserve_full_isl " << reserve;
  }
}

TEST(VllmFcfsTrace, AWaitingRequestThatDoesNotFitTouchesNothing) {
  // As allocate_slots(): the check comes first. Request 2 waits at the head of the queue for
  // steps; its failed admissions neither attach its prefix (which would refresh its cached
  // blocks in the LRU) nor count as prefix lookups. 3 blocks of 4 tokens.
  VllmTrace t(false, 3);
  t.add(1, 8);  // 2 blocks
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
  const std::uint64_t lookups = t.pool().prompt_lookup_blocks();
  t.add(2, 9);  // 3 blocks: does not fit beside 1
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
  EXPECT_EQ(t.pool().prompt_lookup_blocks(), lookups);
  EXPECT_FALSE(t.kv().holds_blocks(2));
  t.policy().finish(1);
  t.kv().release(1, ReleaseKind::kFinished);
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{2}));
  EXPECT_EQ(t.pool().prompt_lookup_blocks(), lookups + 2);  // counted once, when admitted
}

TEST(VllmFcfsTrace, LongPrefillThresholdCutsChunksOnlyWhenOthersAreEligible) {
  VllmPolicyOptions o{false, 64, 16};
  o.long_prefill_token_threshold = 4;
  {
    VllmTrace t(o, 64);
    t.add(1, 16);
    EXPECT_EQ(t.step_tokens(), (std::vector<std::uint32_t>{16}));  // alone: nobody to starve, no cut
  }
  VllmTrace t(o, 64);
  t.add(1, 16);
  t.add(2, 16);
  EXPECT_EQ(t.step_tokens(), (std::vector<std::uint32_t>{4, 4}));
  EXPECT_EQ(t.step_tokens(), (std::vector<std::uint32_t>{4, 4}));
  o.long_prefill_token_threshold = 0;
  VllmTrace off(o, 64);
  off.add(1, 16);
  off.add(2, 16);
  EXPECT_EQ(off.step_tokens(), (std::vector<std::uint32_t>{16, 16}));
}

VllmPolicyOptions pascal_options(std::uint32_t quantum = 500, std::uint32_t demote = 5000) {
  VllmPolicyOptions o{false, 64, 16};
  o.pascal.enabled = true;
  o.pascal.pace_ms = 10;
  o.pascal.quantum_tokens = quantum;
  o.pascal.demote_think_tokens = demote;
  return o;
}

TEST(PascalTrace, AnsweringIsPreemptedBeforeReasoningWhateverItsArrival) {
  // As PreemptsTheTailOfTheRunningList, but the oldest request is answering:
  // PASCAL preempts it, where FCFS preempts the newest (3).
  VllmTrace t(pascal_options(), 5);
  t.add(1, 4);
  t.add(2, 4);
  t.add(3, 4);
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1, 2, 3}));
  t.policy().set_phase(1, Phase::kOutputDecode, 0);
  const Row row = t.step();
  EXPECT_EQ(row.scheduled, (std::vector<RequestId>{2, 3}));
  EXPECT_EQ(row.preempted, (std::vector<RequestId>{1}));
}

TEST(PascalTrace, LongReasoningIsDemotedAndRoundsRotateTheQueue) {
  {  // 1 thought 2 tokens = the demotion limit: it ranks with answering, below 2 and 3.
    VllmTrace t(pascal_options(500, 2), 4);
    t.add(1, 4);
    EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));  // prefill: its first think token
    EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));  // 2nd think token, a 2nd block
    t.add(2, 4);
    t.add(3, 4);
    EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1, 2, 3}));  // 4 blocks: all in use
    const Row row = t.step();  // 2 and 3 need a 2nd block: the demoted 1 goes
    EXPECT_EQ(row.preempted, (std::vector<RequestId>{1}));
    EXPECT_EQ(row.scheduled, (std::vector<RequestId>{2, 3}));
  }
  // A quantum of 2 tokens: 1 used its first round, so 2 and 3 (round 0) rank above it.
  VllmTrace t(pascal_options(2), 4);
  t.add(1, 4);
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
  t.add(2, 4);
  t.add(3, 4);
  EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1, 2, 3}));
  EXPECT_EQ(t.step().preempted, (std::vector<RequestId>{1}));
}

TEST(PascalTrace, ANewRequestPreemptsAnswersNotReasoningToBeAdmitted) {
  for (const bool answering : {true, false}) {
    // 4 blocks; request 1 (8-token prompt) comes to hold 3; request 2 needs 2.
    VllmTrace t(pascal_options(), 4);
    t.add(1, 8);
    EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));
    if (answering) t.policy().set_phase(1, Phase::kOutputDecode, 0);
    EXPECT_EQ(t.step().scheduled, (std::vector<RequestId>{1}));  // its 3rd block
    t.add(2, 8);
    const Row row = t.step();
    if (answering) {  // reasoning preempts answering
      EXPECT_EQ(row.scheduled, (std::vector<RequestId>{2}));
      EXPECT_EQ(row.preempted, (std::vector<RequestId>{1}));
    } else {  // two reasoning requests: 2 waits, as in vLLM
      EXPECT_EQ(row.scheduled, (std::vector<RequestId>{1}));
      EXPECT_TRUE(row.preempted.empty());
    }
  }
}

TEST(PascalTrace, ThePacerHoldsAnAnswerAheadOfPaceUnlessTheStepWouldBeEmpty) {
  constexpr std::int64_t kMs = 1'000'000;
  VllmTrace t(pascal_options(), 64);  // pace 10 ms per answer token
  t.add(1, 4);
  t.policy().set_phase(1, Phase::kOutputDecode, 0);                     // a chat request
  EXPECT_EQ(t.step_at(0, 1.0).scheduled, (std::vector<RequestId>{1}));  // its first answer token at 1 ms
  t.add(2, 4);
  // The 2nd answer token is due at 11 ms: not before the step after next (1 ms steps).
  EXPECT_EQ(t.step_at(1 * kMs, 1.0).scheduled, (std::vector<RequestId>{2}));
  EXPECT_EQ(t.step_at(2 * kMs, 1.0).scheduled, (std::vector<RequestId>{2}));
  EXPECT_EQ(t.step_at(8 * kMs, 1.0).scheduled, (std::vector<RequestId>{2}));     // 11 > 8 + 2
  EXPECT_EQ(t.step_at(9 * kMs, 1.0).scheduled, (std::vector<RequestId>{2, 1}));  // 11 <= 9 + 2
  // Alone, an answer ahead of pace still runs: the GPU would otherwise idle.
  t.policy().finish(2);
  t.kv().release(2, ReleaseKind::kFinished);
  EXPECT_EQ(t.step_at(10 * kMs, 1.0).scheduled, (std::vector<RequestId>{1}));
}

}  // namespace
}  // namespace meridian::sim::detail
