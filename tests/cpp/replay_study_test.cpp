// The fair ruler: SLO attainment by hand on a small trace, the goodput search
// on a load whose capacity is known by construction, intervals, the Pareto
// curve, workload presets and the [slo] parameters.
#include "meridian/replay_study.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "meridian/error.h"
#include "meridian/replay.h"

namespace meridian::sim {
namespace {

// One vLLM-model step: a prefill chunk of `tokens` after `context` cached tokens, or a decode (tokens = 1).
double step_ms(const RooflineCostModel& m, double tokens, double context) {
  StepShape s;
  s.tokens = static_cast<std::uint64_t>(tokens);
  s.kv_tokens_read = static_cast<std::uint64_t>(context + tokens);
  s.attended_pairs = tokens * context + tokens * (tokens + 1) / 2;
  return m.step_ms(s);
}

// A search probe: the run at `rate` meets the ruler or not.
AttainmentPoint probe(double rate, bool meets) {
  AttainmentPoint p;
  p.rate = rate;
  p.meets = meets;
  p.attainment_pct = meets ? 95.0 : 40.0;
  return p;
}

RequestSpec chat(std::uint64_t id, double arrival_s, std::uint32_t prompt, std::uint32_t answer) {
  RequestSpec r;
  r.id = id;
  r.arrival_s = arrival_s;
  r.prompt_tokens = prompt;
  r.answer_tokens = answer;
  return r;
}

TEST(SloAttainment, ComputedByHandOnASmallTrace) {
  // One sequence at a time: B waits for all of A. C reasons alone, much later.
  Workload w;
  w.name = "hand";
  w.requests.push_back(chat(1, 0.0, 16, 4));
  w.requests.push_back(chat(2, 0.0, 16, 4));
  RequestSpec c = chat(3, 10.0, 16, 3);
  c.think_tokens = 20;
  w.requests.push_back(c);
  ReplayOptions o;
  o.policy = PolicyKind::kVllmFcfs;
  o.params.engine.max_num_seqs = 1;
  o.params.slo.ttft_ms = 20;
  o.params.slo.output_tpot_ms = 20;
  o.params.slo.think_tpot_ms = 80;
  const RooflineCostModel m(o.params.cost_model);
  const double prefill = step_ms(m, 16, 0);
  // A: its prefill step samples token 1; three decodes over 16, 17, 18 tokens of context follow.
  const double a_decodes = step_ms(m, 1, 16) + step_ms(m, 1, 17) + step_ms(m, 1, 18);
  const ReplayResult r = run_replay(w, o);
  ASSERT_EQ(r.outcomes.size(), 3U);
  const RequestOutcome& a = r.outcomes[0];
  const RequestOutcome& b = r.outcomes[1];
  const RequestOutcome& cr = r.outcomes[2];
  EXPECT_NEAR(a.ttft_ms, prefill, 1e-3);
  EXPECT_NEAR(a.output_tpot_ms, a_decodes / 3, 1e-3);
  EXPECT_EQ(a.think_tpot_ms, -1);  // no reasoning: the bound does not apply
  EXPECT_TRUE(a.slo_met);
  // B is admitted in the step after A's last decode: it waited all of A, then its own prefill.
  EXPECT_NEAR(b.ttft_ms, prefill + a_decodes + prefill, 1e-3);
  EXPECT_GT(b.ttft_ms, 20);
  EXPECT_FALSE(b.slo_met);
  EXPECT_TRUE(cr.reasoning);
  EXPECT_GT(cr.think_tpot_ms, 0);
  EXPECT_TRUE(cr.slo_met);
  EXPECT_NEAR(r.metric("slo_attainment_pct"), 100.0 * 2 / 3, 1e-9);
  EXPECT_NEAR(r.metric("slo_attainment_chat_pct"), 50.0, 1e-9);
  EXPECT_NEAR(r.metric("slo_attainment_reasoning_pct"), 100.0, 1e-9);
  EXPECT_THROW((void)r.metric("no_such_metric"), NotFound);  // a lookup, not std::out_of_range

  // A think TPOT bound below C's decode step: C now misses on its reasoning alone.
  o.params.slo.think_tpot_ms = 0.5 * cr.think_tpot_ms;
  const ReplayResult strict = run_replay(w, o);
  EXPECT_FALSE(strict.outcomes[2].slo_met);
  EXPECT_NEAR(strict.metric("slo_attainment_pct"), 100.0 / 3, 1e-9);
  // The same for the answer: an output TPOT bound below A's mean gap.
  o.params.slo.think_tpot_ms = 80;
  o.params.slo.output_tpot_ms = 0.5 * a.output_tpot_ms;
  EXPECT_NEAR(run_replay(w, o).metric("slo_attainment_pct"), 0.0, 1e-9);
}

TEST(SloAttainment, RequestsThatNeverCompleteMissTheirSlo) {
  RequestOutcome r;
  r.arrived = true;
  r.ttft_ms = 1;
  r.output_tpot_ms = 1;
  const SloParams slo;
  EXPECT_FALSE(meets_slo(r, slo));  // not completed
  r.completed = true;
  EXPECT_TRUE(meets_slo(r, slo));
  r.think_tpot_ms = static_cast<float>(slo.think_tpot_ms) + 1;
  EXPECT_FALSE(meets_slo(r, slo));
  EXPECT_EQ(slo_misses(r, slo), kSloMissThinkTpot);
}

TEST(SloAttainment, EveryMissedBoundIsNamedAndTtfvBindsReasoningRequestsWhenSet) {
  RequestOutcome r;
  r.arrived = true;
  r.completed = true;
  r.reasoning = true;
  r.ttft_ms = 2000;
  r.ttfv_ms = 30000;
  r.output_tpot_ms = 50;
  r.think_tpot_ms = 10;
  SloParams slo;  // ttfv_ms 0: unbounded
  EXPECT_EQ(slo_misses(r, slo), kSloMissTtft | kSloMissOutputTpot);
  slo.ttfv_ms = 20000;
  EXPECT_EQ(slo_misses(r, slo), kSloMissTtft | kSloMissTtfv | kSloMissOutputTpot);
  r.reasoning = false;  // a chat request has no TTFV bound
  EXPECT_EQ(slo_misses(r, slo), kSloMissTtft | kSloMissOutputTpot);
  r.reasoning = true;
  r.ttfv_ms = -1;  // completed with no answer token: a set TTFV bound is missed
  r.output_tpot_ms = -1;
  r.ttft_ms = 10;
  EXPECT_EQ(slo_misses(r, slo), kSloMissTtfv);
  r.completed = false;  // never completed: incomplete, and TTFV is not judged
  EXPECT_EQ(slo_misses(r, slo), kSloMissIncomplete);
}

TEST(GoodputSearch, BisectsAStepFunctionToTheTolerance) {
  const GoodputOptions search;
  for (double capacity : {0.3, 1.0, 3.3, 7.9}) {
    std::vector<AttainmentPoint> points;
    bool at_least = true;
    const double g = search_goodput([&](double rate, bool) { return probe(rate, rate <= capacity); }, 2.0,
                                    search, points, &at_least);
    EXPECT_FALSE(at_least) << capacity;
    EXPECT_LE(g, capacity) << capacity;
    EXPECT_GE(g, capacity * (1 - search.rel_tolerance) - 1e-12) << capacity;
    EXPECT_FALSE(points.empty());
  }
  // Past the grid: doubling brackets the knee, then bisection as before.
  {
    std::vector<AttainmentPoint> points;
    bool at_least = true;
    const double g = search_goodput([](double rate, bool) { return probe(rate, rate <= 21.0); }, 2.0, search,
                                    points, &at_least);
    EXPECT_FALSE(at_least);
    EXPECT_LE(g, 21.0);
    EXPECT_GE(g, 21.0 * (1 - search.rel_tolerance) - 1e-12);
  }
  // Never failing: the highest rate tried (the grid's top doubled 5 times), flagged as a lower bound.
  std::vector<AttainmentPoint> points;
  bool at_least = false;
  const double g =
      search_goodput([](double rate, bool) { return probe(rate, true); }, 2.0, search, points, &at_least);
  EXPECT_TRUE(at_least);
  EXPECT_DOUBLE_EQ(g, 2.0 * search.grid.back() * 32);
}

TEST(GoodputSearch, ASeededSearchFindsTheKneeEitherSideOfItsStartInFewRuns) {
  const GoodputOptions search;
  for (double capacity : {0.15, 4.7, 5.0, 5.2, 6.1, 30.0}) {
    std::vector<AttainmentPoint> points;
    std::vector<double> tried;
    bool at_least = true;
    const double g = seeded_search(
        [&](double rate, bool) {
          tried.push_back(rate);
          return probe(rate, rate <= capacity);
        },
        5.0, search, points, &at_least);
    EXPECT_FALSE(at_least) << capacity;
    EXPECT_LE(g, capacity) << capacity;
    EXPECT_GE(g, capacity * (1 - search.rel_tolerance) - 1e-12) << capacity;
    std::vector<double> distinct = tried;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end())
        << "a rate ran twice: " << capacity;
    // Near its start (within 10 %), a handful of runs: no scan from a quarter of the rate up.
    if (capacity > 4.5 && capacity < 5.5) {
      EXPECT_LE(tried.size(), 5U) << capacity;
    }
  }
}

TEST(GoodputSearch, FindsTheCapacityOfALoadKnownByConstruction) {
  // Fixed-length single-turn chat at fixed gaps on an engine that serves one
  // sequence at a time: every request takes T, so below 1 / T none waits and
  // above it the queue grows without bound. The goodput is 1 / T.
  StudyOptions o;
  o.seeds = {1, 2};
  o.params.engine.max_num_seqs = 1;
  WorkloadParams& w = o.params.workload;
  w.arrival_process = "uniform";
  w.reasoning_ratio = 0;
  w.mean_turns = 1;
  w.duration_s = 120;
  w.arrival_rate = 1.0;
  w.chat_prompt = {16, 0, 16, 16};
  w.chat_output = {64, 0, 64, 64};
  o.params.slo.ttft_ms = 100;  // a few steps: more than one prefill, less than one whole request
  const RooflineCostModel m(o.params.cost_model);
  double service_ms = step_ms(m, 16, 0);
  for (int k = 0; k < 63; ++k) service_ms += step_ms(m, 1, 16 + k);
  const double capacity = 1000.0 / service_ms;
  const GoodputResult g = find_goodput({PolicyKind::kVllmFcfs}, o);
  ASSERT_EQ(g.policies.size(), 1U);
  const PolicyGoodput& p = g.policies[0];
  ASSERT_EQ(p.goodput_rps.per_seed.size(), 2U);
  for (double v : p.goodput_rps.per_seed) {
    EXPECT_LE(v, capacity * 1.001);
    EXPECT_GE(v, capacity * 0.97);
  }
  EXPECT_GT(g.runs, 4U);
}

TEST(GoodputSearch, TheRunAtASeedsGoodputIsTheOneThatMetTheRulerAtThatRate) {
  PolicyGoodput p;
  p.goodput_rps = seed_stat({2.0, 0.0, 1.5});
  AttainmentPoint missed_at_goodput = probe(1.5, false);  // a run at the same rate that missed
  p.points = {{probe(1.0, true), probe(3.0, false), probe(2.0, true)},
              {probe(0.5, false), probe(0.25, false)},
              {missed_at_goodput, probe(1.5, true)}};
  ASSERT_NE(p.at_goodput(0), nullptr);
  EXPECT_EQ(p.at_goodput(0), &p.points[0][2]);
  EXPECT_EQ(p.at_goodput(1), nullptr) << "no rate met the ruler on this seed";
  ASSERT_NE(p.at_goodput(2), nullptr);
  EXPECT_TRUE(p.at_goodput(2)->meets);
  EXPECT_EQ(p.at_goodput(3), nullptr) << "no such seed";
}

TEST(WindowCheck, JudgesTheMeansAndReportsThePairedRatioPerSeed) {
  auto result = [](double window_s, std::vector<double> fcfs, std::vector<double> meridian) {
    GoodputResult g;
    g.window_s = window_s;
    g.seeds = {42, 43, 44};
    for (auto [kind, per_seed] :
         {std::pair{PolicyKind::kVllmFcfs, fcfs}, std::pair{PolicyKind::kMeridian, meridian}}) {
      PolicyGoodput p;  // as the search leaves it: per seed a goodput, a flag and the runs
      p.policy = kind;
      p.at_least.assign(per_seed.size(), false);
      p.points.resize(per_seed.size());
      p.bounds.resize(per_seed.size());
      p.goodput_rps = seed_stat(std::move(per_seed));
      g.policies.push_back(std::move(p));
    }
    return g;
  };
  const GoodputResult w = result(3600, {1.0, 1.0, 1.0}, {2.0, 2.0, 2.0});
  const GoodputResult w2 = result(7200, {1.04, 0.98, 1.0}, {1.8, 1.8, 1.8});
  const std::vector<WindowAgreement> check = window_agreement(w, w2);
  ASSERT_EQ(check.size(), 2U);
  EXPECT_EQ(check[0].policy, PolicyKind::kVllmFcfs);
  EXPECT_NEAR(check[0].ratio, 1.0067, 1e-3);
  EXPECT_TRUE(check[0].agree());
  ASSERT_EQ(check[0].per_seed.per_seed.size(), 3U);
  EXPECT_NEAR(check[0].per_seed.per_seed[0], 1.04, 1e-12);
  EXPECT_LT(check[0].per_seed.ci_low, 1.0);
  EXPECT_GT(check[0].per_seed.ci_high, 1.0);
  EXPECT_NEAR(check[1].ratio, 0.9, 1e-12);
  EXPECT_FALSE(check[1].agree());
  const std::string md = goodput_markdown(w, &w2);
  EXPECT_NE(md.find("## Window check: 3600 s against 7200 s of arrivals"), std::string::npos) << md;
  EXPECT_NE(md.find("| meridian | 2 | 1.8 | 0.900 | 0.900 [0.900, 0.900] | **no** |"), std::string::npos)
      << md;
  const std::string json = goodput_json(w, ReportContext{}, &w2);
  EXPECT_NE(json.find("\"per_seed_ratio\""), std::string::npos);
  EXPECT_NE(json.find("\"all_agree\": false"), std::string::npos);
  // A policy that met no rate at W but some at 2W disagrees infinitely, not by a division by zero.
  const std::vector<WindowAgreement> none =
      window_agreement(result(3600, {0, 0, 0}, {1, 1, 1}), result(7200, {0.5, 0.5, 0.5}, {1, 1, 1}));
  EXPECT_TRUE(std::isinf(none[0].ratio));
  EXPECT_FALSE(none[0].agree());
  EXPECT_TRUE(none[0].per_seed.per_seed.empty());
}

TEST(GoodputSearch, EarlyStopDecidesOnlyWhatIsAlreadyDecided) {
  for (const Ruler ruler : {Ruler::kSustainable, Ruler::kPooledWindow}) {
    for (const double rate : {8.0, 2.6, 1.0}) {  // far above capacity, just above it (a backlog), below it
      ReplayParams params;
      params.workload.arrival_rate = rate;
      params.workload.duration_s = rate > 2 ? 300 : 120;
      const Workload w = generate_workload(params.workload, 3);
      ReplayOptions o;
      o.policy = PolicyKind::kMeridianNoForcing;
      o.params = params;
      o.ruler = ruler;
      o.stop_when_decided = true;
      const ReplayResult stopped = run_replay(w, o);
      o.stop_when_decided = false;
      const ReplayResult full = run_replay(w, o);
      EXPECT_FALSE(full.stopped_early);
      EXPECT_EQ(full.metric("completed") + full.metric("aborted") + full.metric("unfinished"),
                full.metric("arrived"));
      // A stop is only ever the verdict the full run reaches, for the rule the full run breaks.
      EXPECT_EQ(stopped.verdict.meets, full.verdict.meets) << to_string(ruler) << " at " << rate;
      if (stopped.stopped_early) {
        EXPECT_EQ(stopped.metric("stopped_early"), 1);
        EXPECT_FALSE(full.verdict.meets);
        EXPECT_EQ(stopped.metric("meets_ruler"), 0);
        EXPECT_LT(stopped.metric("makespan_s"), full.metric("makespan_s"));
        if (stopped.verdict.reason == VerdictReason::kBacklogGrowing) {
          EXPECT_TRUE(full.verdict.backlog.growing());
          EXPECT_DOUBLE_EQ(stopped.verdict.backlog.end, full.verdict.backlog.end);
        }
      } else {
        EXPECT_EQ(stopped.verdict.reason, full.verdict.reason);
      }
    }
  }
}

TEST(SeedStats, MeanAndStudentInterval) {
  const SeedStat s = seed_stat({1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(s.mean, 3);
  // sd = sqrt(2.5); t(4) = 2.776; half-width = 2.776 * 1.58114 / sqrt(5) = 1.96292.
  EXPECT_NEAR(s.ci_high - s.mean, 1.96292, 1e-4);
  EXPECT_NEAR(s.mean - s.ci_low, 1.96292, 1e-4);
  EXPECT_FALSE(s.crosses_zero());
  EXPECT_TRUE(seed_stat({-1, 1, 2}).crosses_zero());
  const SeedStat one = seed_stat({7});
  EXPECT_EQ(one.ci_low, 7);
  EXPECT_EQ(one.ci_high, 7);
  EXPECT_NEAR(t_quantile_95(1), 12.706, 1e-9);
  EXPECT_NEAR(t_quantile_95(1000), 1.96, 1e-9);
}

std::vector<std::pair<std::string, double>> stable(const ReplayResult& r) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& kv : r.metrics) {
    if (kv.first.rfind("sim_", 0) != 0) out.push_back(kv);
  }
  return out;
}

TEST(RunSeeds, ResultsDoNotDependOnTheThreadCount) {
  StudyOptions o;
  o.params.workload.duration_s = 30;
  o.seeds = {5, 6, 7};
  o.threads = 1;
  const auto one = run_seeds({PolicyKind::kVllmFcfs, PolicyKind::kMeridian}, o);
  o.threads = 3;
  const auto three = run_seeds({PolicyKind::kVllmFcfs, PolicyKind::kMeridian}, o);
  ASSERT_EQ(one.size(), 2U);
  for (std::size_t p = 0; p < one.size(); ++p) {
    ASSERT_EQ(one[p].seeds.size(), 3U);
    for (std::size_t s = 0; s < 3; ++s) EXPECT_EQ(stable(one[p].seeds[s]), stable(three[p].seeds[s]));
  }
  // Different seeds are different workloads.
  EXPECT_NE(stable(one[0].seeds[0]), stable(one[0].seeds[1]));
}

TEST(Baselines, TunedVllmIsVllmFcfsWithTheSmallerTokenBudget) {
  ReplayParams params;
  params.workload = workload_preset("long-prompt");
  params.workload.duration_s = 60;
  const Workload w = generate_workload(params.workload, 4);
  ReplayOptions tuned;
  tuned.policy = PolicyKind::kVllmFcfsTuned;
  tuned.params = params;
  ReplayOptions fcfs = tuned;
  fcfs.policy = PolicyKind::kVllmFcfs;
  fcfs.params.engine.max_num_batched_tokens = params.engine.tuned_max_num_batched_tokens;
  EXPECT_EQ(stable(run_replay(w, tuned)), stable(run_replay(w, fcfs)));
  // Long prompts: 2,048-token chunks bound the longest stall of a stream.
  fcfs.params.engine.max_num_batched_tokens = 8192;
  EXPECT_LT(run_replay(w, tuned).metric("output_itl_max_ms"),
            run_replay(w, fcfs).metric("output_itl_max_ms"));
}

TEST(VllmBest, TheGridIsTheOperatorsKnobsLessThresholdsThatCannotCut) {
  const std::vector<VllmSetting> grid = vllm_best_settings();
  EXPECT_EQ(grid.size(), 26U);  // 5 x 3 x 2, less (512, 1024) and (1024, 1024) under each policy
  for (const VllmSetting& v : grid) {
    EXPECT_TRUE(v.long_prefill_token_threshold < v.max_num_batched_tokens) << v.label();
  }
  EXPECT_EQ(grid.front().label(), "max_num_batched_tokens=512 long_prefill_token_threshold=0 fcfs");
  EXPECT_EQ(grid.back().label(), "max_num_batched_tokens=8192 long_prefill_token_threshold=1024 priority");
  EXPECT_EQ(grid.back().policy(), PolicyKind::kVllmPriority);
  const ReplayParams applied = grid.front().apply(ReplayParams{});
  EXPECT_EQ(applied.engine.max_num_batched_tokens, 512U);
  EXPECT_EQ(applied.engine.long_prefill_token_threshold, 0U);
}

TEST(VllmBest, IsTheSettingWithTheHighestGoodputAndRunsAsIt) {
  StudyOptions o;
  o.seeds = {42};
  o.params.workload = workload_preset("long-prompt");
  o.params.workload.duration_s = 40;
  const GoodputResult g = find_goodput({PolicyKind::kVllmFcfs, PolicyKind::kVllmBest}, o);
  ASSERT_EQ(g.policies.size(), 2U);
  ASSERT_TRUE(g.vllm_best.has_value());
  const VllmBestSweep& sweep = *g.vllm_best;
  ASSERT_EQ(sweep.settings.size(), vllm_best_settings().size());
  const PolicyGoodput* best = g.find(PolicyKind::kVllmBest);
  ASSERT_NE(best, nullptr);
  double highest = 0;
  for (const VllmBestSweep::Entry& e : sweep.settings) {
    highest = std::max(highest, e.goodput.goodput_rps.mean);
    // vLLM's default setting is in the grid: its search is vllm-fcfs's, point for point.
    if (e.setting == VllmSetting{}) {
      EXPECT_EQ(e.goodput.goodput_rps.per_seed, g.find(PolicyKind::kVllmFcfs)->goodput_rps.per_seed);
    }
  }
  EXPECT_EQ(best->goodput_rps.mean, highest);
  EXPECT_EQ(best->goodput_rps.mean, sweep.settings[sweep.winner].goodput.goodput_rps.mean);
  EXPECT_GE(best->goodput_rps.mean, g.find(PolicyKind::kVllmFcfs)->goodput_rps.mean);
  EXPECT_NE(goodput_json(g, {}).find("\"vllm_best\""), std::string::npos);
  EXPECT_NE(goodput_markdown(g).find(sweep.best().label()), std::string::npos);

  // vllm-best runs as its setting: the same run as that policy with those [engine] values.
  EXPECT_THROW((void)run_seeds({PolicyKind::kVllmBest}, o), InvalidArgument);  // no setting yet
  o.vllm_best = sweep.best();
  o.params.workload.arrival_rate = best->goodput_rps.mean;
  const auto runs = run_seeds({PolicyKind::kVllmBest}, o);
  ASSERT_EQ(runs.size(), 1U);
  EXPECT_EQ(runs[0].seeds[0].policy, PolicyKind::kVllmBest);
  ReplayOptions direct;
  direct.policy = sweep.best().policy();
  direct.params = sweep.best().apply(o.params);
  direct.seed = 42;
  EXPECT_EQ(stable(runs[0].seeds[0]), stable(run_replay(generate_workload(o.params.workload, 42), direct)));
  direct.policy = PolicyKind::kVllmBest;  // one run cannot pick a setting
  EXPECT_THROW((void)run_replay(generate_workload(o.params.workload, 42), direct), InvalidArgument);
}

TEST(Pareto, StaticCurveIsInterpolatedBetweenBudgets) {
  ParetoResult r;
  auto point = [](PolicyKind p, double saved, double fba) {
    ParetoPoint q;
    q.setting.policy = p;
    q.think_tokens_saved_pct = seed_stat({saved});
    q.forced_before_answer_pct = seed_stat({fba});
    return q;
  };
  r.points.push_back(point(PolicyKind::kStaticBudget, 40, 30));
  r.points.push_back(point(PolicyKind::kStaticBudget, 10, 2));
  r.points.push_back(point(PolicyKind::kMeridian, 20, 1));
  ASSERT_TRUE(r.static_curve_at(20).has_value());
  EXPECT_NEAR(*r.static_curve_at(20), 2 + (30 - 2) * (20 - 10) / 30.0, 1e-12);
  EXPECT_FALSE(r.static_curve_at(5).has_value());
  EXPECT_FALSE(r.static_curve_at(50).has_value());
}

TEST(Pareto, SweepMeasuresSavingsAndProxyForEverySetting) {
  StudyOptions o;
  o.params.workload.duration_s = 60;
  o.params.workload.arrival_rate = 1.0;
  o.seeds = {2, 3};
  const auto settings = default_pareto_settings(o.config);
  const ParetoResult r = run_pareto(settings, o);
  ASSERT_EQ(r.points.size(), settings.size());
  double previous = 101;
  for (const ParetoPoint& p : r.points) {
    if (p.setting.policy != PolicyKind::kStaticBudget) continue;
    // A larger budget saves less.
    EXPECT_LE(p.think_tokens_saved_pct.mean, previous) << p.setting.label;
    previous = p.think_tokens_saved_pct.mean;
  }
  EXPECT_GT(r.points.front().think_tokens_saved_pct.mean, 30);  // 1,024 cuts a lot
  for (const ParetoPoint& p : r.points) {
    if (p.setting.policy == PolicyKind::kMeridian) {
      EXPECT_GT(p.think_tokens_saved_pct.mean, 0) << p.setting.label;
    }
  }
  const std::string md = pareto_markdown(r);
  EXPECT_NE(md.find("proxy"), std::string::npos);
}

TEST(Workloads, PresetsHaveTheirLengths) {
  const WorkloadParams think = workload_preset("long-think");
  EXPECT_DOUBLE_EQ(think.think.median, 8000);
  EXPECT_EQ(think.think.max, 32768U);
  WorkloadParams p = think;
  p.arrival_rate = 1.0;
  p.duration_s = 400;
  const Workload w = generate_workload(p, 9);
  std::vector<double> lengths;
  for (const RequestSpec& r : w.requests) {
    if (r.reasoning()) lengths.push_back(r.think_tokens);
  }
  ASSERT_GT(lengths.size(), 100U);
  std::sort(lengths.begin(), lengths.end());
  EXPECT_NEAR(lengths[lengths.size() / 2], 8000, 1200);
  const Workload prompts = generate_workload(
      [] {
        WorkloadParams q = workload_preset("long-prompt");
        q.duration_s = 400;
        return q;
      }(),
      9);
  std::vector<double> first_turns;
  for (const RequestSpec& r : prompts.requests) {
    if (r.turn == 0) first_turns.push_back(r.prompt_tokens);
  }
  std::sort(first_turns.begin(), first_turns.end());
  EXPECT_NEAR(first_turns[first_turns.size() / 2], 8000, 1200);
  EXPECT_THROW((void)workload_preset("chatty"), ConfigError);
}

TEST(ReplayParamsFile, KindPicksTheDefaultsAndSloIsChecked) {
  const ReplayParams p = parse_replay_params("[workload]\nkind = \"long-think\"\narrival_rate = 0.3\n");
  EXPECT_DOUBLE_EQ(p.workload.think.median, 8000);
  EXPECT_DOUBLE_EQ(p.workload.arrival_rate, 0.3);
  const ReplayParams q = parse_replay_params("[slo]\nttft_ms = 500\n", "x.toml", "long-prompt");
  EXPECT_EQ(q.workload.kind, "long-prompt");
  EXPECT_DOUBLE_EQ(q.workload.chat_prompt.median, 8000);
  EXPECT_DOUBLE_EQ(q.slo.ttft_ms, 500);
  // to_toml round-trips the kind and the SLO.
  const ReplayParams back = parse_replay_params(to_toml(q));
  EXPECT_EQ(back.workload.kind, "long-prompt");
  EXPECT_DOUBLE_EQ(back.slo.ttft_ms, 500);
  auto error_of = [](std::string_view text) {
    try {
      (void)parse_replay_params(text, "r.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("[slo]\nattainment_pct = 0\n").find("slo.attainment_pct must be in (0, 100]"),
            std::string::npos);
  EXPECT_NE(error_of("[slo]\noutput_tpot_ms = -1\n").find("slo.output_tpot_ms must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of("[cost_model]\ngpu_memory_gb = 80\n").find("was renamed to cost_model.gpu_memory_gib"),
            std::string::npos);
  EXPECT_NE(error_of("[workload]\narrival_process = \"bursty\"\n").find("workload.arrival_process"),
            std::string::npos);
}

}  // namespace
}  // namespace meridian::sim

namespace meridian::sim {
namespace {

TEST(SeedStats, ADeltaFromZeroIsUndefinedNotZero) {
  auto runs = [](PolicyKind p, std::vector<double> values) {
    PolicyRuns r{p, {}};
    for (double v : values) {
      ReplayResult res;
      res.metrics = {{"preemptions", v}};
      r.seeds.push_back(res);
    }
    return r;
  };
  const PolicyRuns base = runs(PolicyKind::kVllmFcfs, {0, 0, 10});
  const PolicyRuns cand = runs(PolicyKind::kMeridianNoForcing, {0, 300, 20});
  const SeedStat d = delta_stat(cand, base, "preemptions");
  ASSERT_EQ(d.per_seed.size(), 3U);
  EXPECT_EQ(d.per_seed[0], 0);
  EXPECT_TRUE(std::isinf(d.per_seed[1]));
  EXPECT_EQ(d.per_seed[2], 100);
  EXPECT_FALSE(std::isfinite(d.mean));
  EXPECT_EQ(delta_flag(d.mean, Better::kLower), "LOSS");
}

}  // namespace
}  // namespace meridian::sim
