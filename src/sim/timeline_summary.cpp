// Metrics of a run measured outside the simulator's engine (the engine-in-the-
// loop replay), under the definitions Engine::summarize() uses.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meridian/replay_timeline.h"
#include "meridian/sustainable_ruler.h"
#include "sim/metrics.h"

namespace meridian::sim {
namespace {

float ms(double from_s, double to_s) { return static_cast<float>((to_s - from_s) * 1000.0); }

}  // namespace

std::uint8_t slo_misses(const RequestOutcome& r, const SloParams& slo) noexcept {
  std::uint8_t missed = 0;
  if (!r.completed) missed |= kSloMissIncomplete;
  if (r.ttft_ms < 0 ? r.completed : r.ttft_ms > slo.ttft_ms) missed |= kSloMissTtft;
  if (slo.ttfv_ms > 0 && r.reasoning && (r.ttfv_ms < 0 ? r.completed : r.ttfv_ms > slo.ttfv_ms)) {
    missed |= kSloMissTtfv;
  }
  if (r.think_tpot_ms >= 0 && r.think_tpot_ms > slo.think_tpot_ms) missed |= kSloMissThinkTpot;
  if (r.output_tpot_ms >= 0 && r.output_tpot_ms > slo.output_tpot_ms) missed |= kSloMissOutputTpot;
  return missed;
}

RequestOutcome timeline_outcome(const RequestTimeline& t, const SloParams& slo) {
  RequestOutcome o;
  o.reasoning = t.reasoning;
  o.arrived = t.arrived;
  if (!t.arrived) return o;
  o.completed = t.completed;
  if (t.first_token_s >= 0) o.ttft_ms = ms(t.arrival_s, t.first_token_s);
  if (t.first_visible_s >= 0) o.ttfv_ms = ms(t.arrival_s, t.first_visible_s);
  if (t.answer_tokens >= 2 && t.first_visible_s >= 0) {
    o.output_tpot_ms = ms(t.first_visible_s, t.last_token_s) / static_cast<float>(t.answer_tokens - 1);
  }
  if (t.reasoning && t.think_tokens > 1 && t.think_end_s >= 0 && t.first_token_s >= 0) {
    o.think_tpot_ms = ms(t.first_token_s, t.think_end_s) / static_cast<float>(t.think_tokens);
  }
  o.think_tokens = t.think_tokens;
  o.slo_misses = slo_misses(o, slo);
  o.slo_met = o.slo_misses == 0;
  return o;
}

ReplayResult summarize_timelines(const std::vector<RequestTimeline>& requests,
                                 std::vector<float> output_itl_ms, std::vector<float> think_itl_ms,
                                 const RunTotals& totals, const SloParams& slo, Ruler ruler) {
  using detail::mean;
  using detail::percentile;
  ReplayResult out;
  out.policy = PolicyKind::kVllmFcfs;  // not a simulator policy; the caller names the arm
  auto& m = out.metrics;
  auto put = [&](std::string_view name, double v) { m.emplace_back(std::string(name), v); };
  std::vector<float> ttft;
  std::vector<float> ttfv;
  std::vector<float> ttot;
  std::vector<float> e2e;
  std::vector<float> output_tpot;
  std::vector<float> think_tpot;
  std::vector<float> think_counts;
  std::vector<float> ttfv_class[2];
  std::uint64_t met[2] = {};
  std::uint64_t total[2] = {};
  std::uint64_t arrived = 0;
  std::uint64_t completed = 0;
  std::uint64_t misses[kSloMissBounds] = {};  // by SloMiss bit
  std::uint64_t think_total = 0;
  std::uint64_t answer_total = 0;
  std::uint64_t natural_think = 0;
  double emitted_by_done = 0;
  for (const RequestTimeline& t : requests) {
    const RequestOutcome oc = timeline_outcome(t, slo);
    const std::size_t cls = t.reasoning ? 1 : 0;
    ++total[cls];
    if (oc.slo_met) ++met[cls];
    for (std::uint8_t bit = 0; bit < kSloMissBounds; ++bit) misses[bit] += (oc.slo_misses >> bit) & 1U;
    think_total += t.think_tokens;
    answer_total += t.answer_tokens;
    if (t.arrived) ++arrived;
    if (oc.ttft_ms >= 0) ttft.push_back(oc.ttft_ms);
    if (oc.ttfv_ms >= 0) {
      ttfv.push_back(oc.ttfv_ms);
      ttfv_class[cls].push_back(oc.ttfv_ms);
      if (t.think_end_s >= 0) ttot.push_back(ms(t.think_end_s, t.first_visible_s));
    }
    if (oc.output_tpot_ms >= 0) output_tpot.push_back(oc.output_tpot_ms);
    if (oc.think_tpot_ms >= 0) think_tpot.push_back(oc.think_tpot_ms);
    if (t.completed) {
      ++completed;
      e2e.push_back(ms(t.arrival_s, t.finish_s));
      if (t.reasoning) {
        think_counts.push_back(static_cast<float>(t.think_tokens));
        emitted_by_done += t.think_tokens;
        natural_think += t.natural_think_tokens;
      }
    }
    out.outcomes.push_back(oc);
  }
  auto pct = [](std::uint64_t part, std::uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  };
  const std::uint64_t all = total[0] + total[1];
  const double makespan_s = totals.makespan_s;
  put("requests", static_cast<double>(requests.size()));
  put("arrived", static_cast<double>(arrived));
  put("completed", static_cast<double>(completed));
  put("aborted", 0);
  put("rejected", static_cast<double>(totals.rejected));
  put("unfinished", static_cast<double>(totals.unfinished));
  put("never_arrived", static_cast<double>(requests.size() - arrived));
  put("stopped_early", totals.stopped_early ? 1 : 0);
  put("slo_attainment_pct", pct(met[0] + met[1], all));
  put("slo_attainment_chat_pct", pct(met[0], total[0]));
  put("slo_attainment_reasoning_pct", pct(met[1], total[1]));
  out.verdict = judge_run(requests, totals.arrival_window_end_s, slo, ruler);
  const RunVerdict& v = out.verdict;
  put("meets_ruler", v.meets ? 1 : 0);
  put("sustainable", v.sustainable() ? 1 : 0);
  put("late_attainment_chat_pct", v.chat.late_pct());
  put("late_attainment_reasoning_pct", v.reasoning.late_pct());
  put("backlog_mid", v.backlog.mid);
  put("backlog_end", v.backlog.end);
  put("backlog_growth_pct", v.backlog.growth_pct());
  put("backlog_work_mid", v.backlog.work_mid);
  put("backlog_work_end", v.backlog.work_end);
  put("backlog_work_growth_pct", v.backlog.work_growth_pct());
  put("drain_s", makespan_s > totals.arrival_window_end_s ? makespan_s - totals.arrival_window_end_s : 0);
  put("slo_miss_ttft_pct", pct(misses[1], all));
  put("slo_miss_ttfv_pct", pct(misses[2], all));
  put("slo_miss_output_tpot_pct", pct(misses[4], all));
  put("slo_miss_think_tpot_pct", pct(misses[3], all));
  put("slo_miss_incomplete_pct", pct(misses[0], all));
  put("ttft_p50_ms", percentile(ttft, 50));
  put("ttft_p90_ms", percentile(ttft, 90));
  put("ttft_p95_ms", percentile(ttft, 95));
  put("ttft_p99_ms", percentile(ttft, 99));
  put("ttfv_p50_ms", percentile(ttfv, 50));
  put("ttfv_p95_ms", percentile(ttfv, 95));
  put("ttfv_chat_p50_ms", percentile(ttfv_class[0], 50));
  put("ttfv_chat_p95_ms", percentile(ttfv_class[0], 95));
  put("ttfv_reasoning_p50_ms", percentile(ttfv_class[1], 50));
  put("ttfv_reasoning_p95_ms", percentile(ttfv_class[1], 95));
  put("ttot_p50_ms", percentile(ttot, 50));
  put("ttot_p95_ms", percentile(ttot, 95));
  put("ttot_p99_ms", percentile(ttot, 99));
  put("output_tpot_p50_ms", percentile(output_tpot, 50));
  put("output_tpot_p90_ms", percentile(output_tpot, 90));
  put("output_tpot_p95_ms", percentile(output_tpot, 95));
  put("output_itl_p50_ms", percentile(output_itl_ms, 50));
  put("output_itl_p95_ms", percentile(output_itl_ms, 95));
  put("output_itl_p99_ms", percentile(output_itl_ms, 99));
  put("output_itl_max_ms", detail::max_of(output_itl_ms));
  put("think_tpot_p50_ms", percentile(think_tpot, 50));
  put("think_tpot_p90_ms", percentile(think_tpot, 90));
  put("think_tpot_p99_ms", percentile(think_tpot, 99));
  put("think_itl_p99_ms", percentile(think_itl_ms, 99));
  put("think_itl_max_ms", detail::max_of(think_itl_ms));
  put("e2e_p50_ms", percentile(e2e, 50));
  put("e2e_p95_ms", percentile(e2e, 95));
  put("think_tokens_avg", mean(think_counts));
  put("think_tokens_p95", percentile(think_counts, 95));
  put("think_tokens_total", static_cast<double>(think_total));
  put("think_tokens_saved_pct",
      natural_think > 0 ? 100.0 * (1.0 - emitted_by_done / static_cast<double>(natural_think)) : 0);
  put("output_tokens_total", static_cast<double>(answer_total));
  for (const char* name :
       {"forced_pct", "forced_converged_pct", "forced_overthinking_pct", "forced_hard_cap_pct",
        "forced_before_answer_pct", "evictions_think_complete", "evictions_think_active",
        "evictions_output_critical", "output_critical_eviction_events"}) {
    put(name, 0);
  }
  const auto preempted = static_cast<double>(totals.preemptions);
  put("preemptions", preempted);
  put("preemptions_recompute", preempted);
  put("preemptions_swap", 0);
  put("preempted_answer_phase", static_cast<double>(totals.preempted_answer_phase));
  put("answer_phase_evicted_blocks", 0);
  put("preemptions_per_completed", completed > 0 ? preempted / static_cast<double>(completed) : preempted);
  const auto lookups = static_cast<double>(totals.prefix_lookup_blocks);
  put("prefix_hit_rate", lookups > 0 ? static_cast<double>(totals.prefix_hit_blocks) / lookups : 0);
  const auto generated = static_cast<double>(think_total + answer_total);
  put("throughput_tokens_per_s", makespan_s > 0 ? generated / makespan_s : 0);
  put("think_throughput_tokens_per_s", makespan_s > 0 ? static_cast<double>(think_total) / makespan_s : 0);
  put("arrival_window_throughput_tokens_per_s",
      totals.arrival_window_end_s > 0
          ? static_cast<double>(totals.arrival_window_tokens) / totals.arrival_window_end_s
          : 0);
  put("probe_passes", 0);
  put("prefill_tokens", static_cast<double>(totals.prefill_tokens));
  put("simulated_tokens", static_cast<double>(totals.simulated_tokens));
  put("steps", static_cast<double>(totals.steps));
  put("makespan_s", makespan_s);
  put("gpu_busy_pct", makespan_s > 0 ? 100.0 * totals.busy_s / makespan_s : 0);
  put("sim_wall_s", totals.wall_s);
  put("sim_tokens_per_s",
      totals.wall_s > 0 ? static_cast<double>(totals.simulated_tokens) / totals.wall_s : 0);
  out.ttft_ms = std::move(ttft);
  out.ttot_ms = std::move(ttot);
  out.ttfv_ms = std::move(ttfv);
  out.output_itl_ms = std::move(output_itl_ms);
  out.think_tpot_ms = std::move(think_tpot);
  out.e2e_ms = std::move(e2e);
  out.stopped_early = totals.stopped_early;
  out.think_tokens.reserve(requests.size());
  for (const RequestTimeline& t : requests) out.think_tokens.push_back(t.think_tokens);
  return out;
}

}  // namespace meridian::sim
