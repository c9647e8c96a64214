// Python view of the dual-queue scheduler, its step-cost model and the
// phase-aware KV block manager: what an engine adapter (meridian.vllm) calls
// once per step. Plans are returned by value, so a Python reference stays
// valid after the next schedule() call.
#include <algorithm>

#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/kv_block_manager.h"
#include "meridian/phase_router.h"
#include "meridian/request_id_map.h"
#include "meridian/scheduler.h"
#include "meridian/step_cost_model.h"
#include "meridian/step_driver.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

// A Python str's UTF-8 bytes without a copy (CPython caches them in the
// object; ASCII strings, like vLLM's request ids, hold them inline).
std::string_view utf8_view(nb::handle h) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
  if (data == nullptr) throw nb::python_error();
  return {data, static_cast<std::size_t>(size)};
}

// One engine step's sampled tokens (vLLM: ModelRunnerOutput.req_ids and
// .sampled_token_ids) into the router, for phase tracking only: a request's
// tokens are fed when one of them is in `boundary_ids` (think start/end,
// EOS, tool-call markers); ordinary tokens change no phase and are skipped
// without even looking the request up. That keeps the per-step cost to one
// pass over the token lists (a string lookup per request was most of the
// adapter's cost at 1,024 running). The router's token counts are therefore
// not maintained; only its phases are. Returns the events.
std::vector<PhaseEvent> engine_step_boundaries(PhaseRouter& router, const RequestIdMap& ids,
                                               nb::handle req_ids, nb::handle sampled,
                                               const std::vector<TokenId>& boundary_ids) {
  thread_local std::vector<RequestId> batch_ids;
  thread_local std::vector<TokenId> batch_tokens;
  thread_local std::vector<TokenId> request_tokens;
  thread_local std::vector<PhaseEvent> events;
  batch_ids.clear();
  batch_tokens.clear();
  auto token_at = [](nb::handle tokens, Py_ssize_t i) -> TokenId {
    if (PyList_Check(tokens.ptr())) return nb::cast<TokenId>(nb::handle(PyList_GET_ITEM(tokens.ptr(), i)));
    return nb::cast<TokenId>(nb::steal(PySequence_GetItem(tokens.ptr(), i)));
  };
  nb::iterator tokens_it = nb::iter(sampled);
  for (nb::handle rid : req_ids) {
    if (tokens_it == nb::iterator::sentinel()) break;
    nb::handle tokens = *tokens_it;
    ++tokens_it;
    const Py_ssize_t n = PySequence_Size(tokens.ptr());
    if (n < 0) throw nb::python_error();
    request_tokens.clear();
    bool boundary = false;
    for (Py_ssize_t i = 0; i < n; ++i) {
      const TokenId t = token_at(tokens, i);
      request_tokens.push_back(t);
      boundary = boundary || std::find(boundary_ids.begin(), boundary_ids.end(), t) != boundary_ids.end();
    }
    if (!boundary) continue;
    const auto id = ids.find(utf8_view(rid));
    if (!id) continue;
    for (const TokenId t : request_tokens) {
      batch_ids.push_back(*id);
      batch_tokens.push_back(t);
    }
  }
  std::size_t n_events = 0;
  if (!batch_ids.empty()) {
    nb::gil_scoped_release release;
    events.resize(batch_ids.size());
    n_events = router.on_tokens(batch_ids, batch_tokens, events);
  }
  return {events.begin(), events.begin() + static_cast<std::ptrdiff_t>(n_events)};
}

// What vLLM scheduled in one step (vLLM: SchedulerOutput.num_scheduled_tokens,
// keyed by request id; `requests`: Scheduler.requests), told to the core in one
// pass: every request the core knows that ran made a decode step
// (complete_engine_step). Returns the step's context tokens (each scheduled
// request's num_computed_tokens after scheduling), a step-cost feature.
std::uint64_t engine_step_ran(DualQueueScheduler& sched, const RequestIdMap& ids, std::int64_t end_ns,
                              nb::handle scheduled, nb::handle requests) {
  thread_local std::vector<RequestId> ran;
  ran.clear();
  std::uint64_t kv = 0;
  nb::str computed("num_computed_tokens");
  for (nb::handle rid : scheduled) {
    PyObject* request = PyDict_GetItemWithError(requests.ptr(), rid.ptr());  // borrowed
    if (request == nullptr) {
      if (PyErr_Occurred() != nullptr) throw nb::python_error();
      continue;
    }
    kv += nb::cast<std::uint64_t>(nb::steal(PyObject_GetAttr(request, computed.ptr())));
    if (const auto id = ids.find(utf8_view(rid))) ran.push_back(*id);
  }
  {
    nb::gil_scoped_release release;
    sched.complete_engine_step(end_ns, ran);
  }
  return kv;
}

template <typename T, std::size_t N>
std::vector<T> to_list(const T (&values)[N]) {
  return std::vector<T>(values, values + N);
}

void bind_cost_model(nb::module_& m) {
  nb::class_<StepCostCoefficients>(m, "StepCostCoefficients")
      .def(nb::init<>())
      .def(
          "__init__",
          [](StepCostCoefficients* c, double base_ms, double per_token_ms, double per_kv_token_us) {
            new (c) StepCostCoefficients{base_ms, per_token_ms, per_kv_token_us};
          },
          "base_ms"_a, "per_token_ms"_a, "per_kv_token_us"_a)
      .def_rw("base_ms", &StepCostCoefficients::base_ms)
      .def_rw("per_token_ms", &StepCostCoefficients::per_token_ms)
      .def_rw("per_kv_token_us", &StepCostCoefficients::per_kv_token_us)
      .def(nb::self == nb::self);

  nb::class_<StepCostModel>(m, "StepCostModel")
      .def(nb::init<StepCostCoefficients, bool, double>(), "initial"_a, "online"_a = true,
           "forgetting_factor"_a = 0.98)
      .def_static("from_config", &StepCostModel::from_config, "config"_a)
      .def("predict_ms", &StepCostModel::predict_ms, "tokens"_a, "kv_tokens"_a)
      .def("observe", &StepCostModel::observe, "tokens"_a, "kv_tokens"_a, "observed_ms"_a)
      .def_prop_ro("coefficients", &StepCostModel::coefficients)
      .def_prop_ro("online", &StepCostModel::online)
      .def_prop_ro("observations", &StepCostModel::observations)
      .def_prop_ro("rejected", &StepCostModel::rejected)
      .def_prop_ro("clamped", &StepCostModel::clamped);
}

void bind_plan_types(nb::module_& m) {
  nb::enum_<WorkKind>(m, "WorkKind")
      .value("DECODE", WorkKind::kDecode)
      .value("PREFILL", WorkKind::kPrefill)
      .value("SWAP_IN", WorkKind::kSwapIn);
  nb::enum_<ReclaimMode>(m, "ReclaimMode")
      .value("RECOMPUTE", ReclaimMode::kRecompute)
      .value("SWAP", ReclaimMode::kSwap)
      .value("OFFLOAD", ReclaimMode::kOffload);

  nb::class_<StepLimits>(m, "StepLimits")
      .def(nb::init<>())
      .def(
          "__init__",
          [](StepLimits* l, std::uint32_t token_budget, std::uint32_t max_sequences,
             std::uint64_t free_kv_blocks, std::uint64_t free_think_kv_blocks) {
            new (l) StepLimits{token_budget, max_sequences, free_kv_blocks, free_think_kv_blocks};
          },
          "token_budget"_a = StepLimits{}.token_budget, "max_sequences"_a = StepLimits{}.max_sequences,
          "free_kv_blocks"_a = StepLimits{}.free_kv_blocks,
          "free_think_kv_blocks"_a = StepLimits{}.free_think_kv_blocks)
      .def_rw("token_budget", &StepLimits::token_budget)
      .def_rw("max_sequences", &StepLimits::max_sequences)
      .def_rw("free_kv_blocks", &StepLimits::free_kv_blocks)
      .def_rw("free_think_kv_blocks", &StepLimits::free_think_kv_blocks);

  nb::class_<ScheduledWork>(m, "ScheduledWork")
      .def_ro("request_id", &ScheduledWork::id)
      .def_ro("kind", &ScheduledWork::kind)
      .def_ro("phase", &ScheduledWork::phase)
      .def_ro("tokens", &ScheduledWork::tokens)
      .def_ro("context_tokens", &ScheduledWork::context_tokens)
      .def_ro("new_blocks", &ScheduledWork::new_blocks)
      .def_ro("new_think_blocks", &ScheduledWork::new_think_blocks)
      .def_ro("due", &ScheduledWork::due)
      .def_ro("completes_prefill", &ScheduledWork::completes_prefill)
      .def("__repr__", [](const ScheduledWork& w) {
        return "ScheduledWork(request_id=" + std::to_string(w.id) +
               ", kind=" + std::string(to_string(w.kind)) + ", phase=" + std::string(to_string(w.phase)) +
               ", tokens=" + std::to_string(w.tokens) + ")";
      });

  nb::class_<Preemption>(m, "Preemption")
      .def_ro("request_id", &Preemption::id)
      .def_ro("phase", &Preemption::phase)
      .def_ro("mode", &Preemption::mode)
      .def_ro("blocks", &Preemption::blocks)
      .def_ro("preemptions", &Preemption::preemptions)
      .def("__repr__", [](const Preemption& p) {
        return "Preemption(request_id=" + std::to_string(p.id) + ", mode=" + std::string(to_string(p.mode)) +
               ", blocks=" + std::to_string(p.blocks) + ")";
      });

  nb::class_<StepStats>(m, "StepStats")
      .def_ro("output_queue_depth", &StepStats::output_queue_depth)
      .def_ro("think_queue_depth", &StepStats::think_queue_depth)
      .def_ro("waiting_depth", &StepStats::waiting_depth)
      .def_ro("swapped_depth", &StepStats::swapped_depth)
      .def_ro("output_batch", &StepStats::output_batch)
      .def_ro("think_batch", &StepStats::think_batch)
      .def_ro("due_think", &StepStats::due_think)
      .def_ro("prefill_requests", &StepStats::prefill_requests)
      .def_ro("prefill_tokens", &StepStats::prefill_tokens)
      .def_ro("prefill_budget_tokens", &StepStats::prefill_budget_tokens)
      .def_ro("stalled", &StepStats::stalled)
      .def_ro("output_batch_budget", &StepStats::output_batch_budget)
      .def_ro("think_batch_cap", &StepStats::think_batch_cap)
      .def_ro("output_slo_bound", &StepStats::output_slo_bound)
      .def_ro("step_ceiling_ms", &StepStats::step_ceiling_ms)
      .def_ro("predicted_step_ms", &StepStats::predicted_step_ms)
      .def_ro("total_tokens", &StepStats::total_tokens)
      .def_ro("kv_tokens", &StepStats::kv_tokens);

  nb::class_<StepPlan>(m, "StepPlan")
      .def_ro("step", &StepPlan::step)
      .def_ro("work", &StepPlan::work)
      .def_ro("preemptions", &StepPlan::preemptions)
      .def_ro("aborted", &StepPlan::aborted)
      .def_ro("unattached", &StepPlan::unattached)
      .def_ro("stats", &StepPlan::stats);

  nb::class_<SchedulerCounters>(m, "SchedulerCounters")
      .def_ro("steps", &SchedulerCounters::steps)
      .def_ro("scheduled_tokens", &SchedulerCounters::scheduled_tokens)
      .def_prop_ro("preemptions", [](const SchedulerCounters& c) { return to_list(c.preemptions); })
      .def_ro("preempted_output", &SchedulerCounters::preempted_output)
      .def_ro("preempted_think", &SchedulerCounters::preempted_think)
      .def_prop_ro("preemptions_by_phase",
                   [](const SchedulerCounters& c) {
                     // [output, think] x ReclaimMode
                     return std::vector<std::vector<std::uint64_t>>{to_list(c.preemptions_by_phase[0]),
                                                                    to_list(c.preemptions_by_phase[1])};
                   })
      .def_ro("stalls", &SchedulerCounters::stalls)
      .def_ro("aborted", &SchedulerCounters::aborted)
      .def_ro("livelock_releases", &SchedulerCounters::livelock_releases)
      .def_ro("due_think_decodes", &SchedulerCounters::due_think_decodes)
      .def_ro("output_slo_overruns", &SchedulerCounters::output_slo_overruns)
      .def_ro("rejected_step_times", &SchedulerCounters::rejected_step_times)
      .def_ro("admission_cached_tokens", &SchedulerCounters::admission_cached_tokens);
}

void bind_scheduler_class(nb::module_& m) {
  nb::class_<SchedulerOptions>(m, "SchedulerOptions")
      .def(nb::init<>())
      .def_static("from_config", &SchedulerOptions::from_config, "config"_a, "total_kv_blocks"_a)
      .def_rw("think_tpot_budget_ms", &SchedulerOptions::think_tpot_budget_ms)
      .def_rw("output_tpot_budget_ms", &SchedulerOptions::output_tpot_budget_ms)
      .def_rw("think_batch_multiplier", &SchedulerOptions::think_batch_multiplier)
      .def_rw("min_prefill_tokens_per_step", &SchedulerOptions::min_prefill_tokens_per_step)
      .def_rw("preemption_enabled", &SchedulerOptions::preemption_enabled)
      .def_rw("preempt_max_fraction", &SchedulerOptions::preempt_max_fraction)
      .def_rw("preempt_readmit_guard_steps", &SchedulerOptions::preempt_readmit_guard_steps)
      .def_rw("fabric_offload", &SchedulerOptions::fabric_offload)
      .def_rw("block_tokens", &SchedulerOptions::block_tokens)
      .def_rw("total_kv_blocks", &SchedulerOptions::total_kv_blocks);

  nb::class_<RequestView> view(m, "RequestView");
  nb::enum_<RequestView::State>(view, "State")
      .value("WAITING", RequestView::State::kWaiting)
      .value("RUNNING", RequestView::State::kRunning)
      .value("SWAPPED", RequestView::State::kSwapped);
  view.def_ro("request_id", &RequestView::id)
      .def_ro("phase", &RequestView::phase)
      .def_ro("state", &RequestView::state)
      .def_ro("prompt_tokens", &RequestView::prompt_tokens)
      .def_ro("generated_tokens", &RequestView::generated_tokens)
      .def_ro("context_tokens", &RequestView::context_tokens)
      .def_ro("preemptions", &RequestView::preemptions)
      .def_ro("last_token_ns", &RequestView::last_token_ns);

  nb::class_<DualQueueScheduler>(m, "DualQueueScheduler")
      .def(nb::init<const SchedulerOptions&, StepCostModel>(), "options"_a, "cost_model"_a)
      .def(
          "add",
          [](DualQueueScheduler& s, RequestId id, std::uint32_t prompt_tokens, Phase phase,
             std::uint32_t cached_prompt_tokens, std::int64_t arrival_ns) {
            s.add(NewRequest{id, phase, prompt_tokens, cached_prompt_tokens, arrival_ns});
          },
          "request_id"_a, "prompt_tokens"_a, "phase"_a = Phase::kThinkDecode, "cached_prompt_tokens"_a = 0,
          "arrival_ns"_a = 0)
      .def("set_phase", &DualQueueScheduler::set_phase, "request_id"_a, "phase"_a)
      .def("finish", &DualQueueScheduler::finish, "request_id"_a)
      .def(
          "schedule",
          [](DualQueueScheduler& s, const StepLimits& limits, std::int64_t now_ns) {
            return StepPlan(s.schedule(limits, now_ns));
          },
          "limits"_a, "now_ns"_a)
      .def(
          "complete_step",
          [](DualQueueScheduler& s, double observed_ms, std::int64_t end_ns,
             const std::vector<RequestId>& not_run) { s.complete_step(observed_ms, end_ns, not_run); },
          "observed_ms"_a, "end_ns"_a, "not_run"_a = std::vector<RequestId>{})
      .def(
          "complete_engine_step",
          [](DualQueueScheduler& s, std::int64_t end_ns, const std::vector<RequestId>& ran) {
            s.complete_engine_step(end_ns, ran);
          },
          "end_ns"_a, "ran"_a)
      .def("observe_step", &DualQueueScheduler::observe_step, "tokens"_a, "kv_tokens"_a, "observed_ms"_a)
      .def("view", &DualQueueScheduler::view, "request_id"_a)
      .def(
          "plan_for_engine",
          [](DualQueueScheduler& s, const StepLimits& limits, std::int64_t now_ns) {
            // The engine adapter's per-step call (meridian.vllm): plan, then
            // only what the adapter acts on, as plain lists (no per-item
            // Python objects).
            EngineView view;
            const StepPlan* plan = nullptr;
            {
              nb::gil_scoped_release release;
              plan = &s.schedule(limits, now_ns);
              s.engine_view(view);
            }
            return nb::make_tuple(std::move(view.unplanned_think), std::move(view.running_order),
                                  plan->stats.prefill_budget_tokens, plan->stats.output_slo_bound,
                                  plan->stats.predicted_step_ms);
          },
          "limits"_a, "now_ns"_a,
          "schedule(), then (unplanned_think, running_order, prefill_budget_tokens, output_slo_bound, "
          "predicted_step_ms): see DualQueueScheduler::engine_view in meridian/scheduler.h")

      .def("__len__", &DualQueueScheduler::size)
      // Snapshots (copies taken at the call), like every counter the
      // bindings return: a value read before a step keeps its value after it.
      .def_prop_ro("counters", [](const DualQueueScheduler& s) { return s.counters(); })
      // The last plan's stats (a copy): what the vLLM adapter's metrics read
      // after plan_for_engine, which returns only what the adapter acts on.
      .def_prop_ro("last_stats", [](const DualQueueScheduler& s) { return s.last_plan().stats; })
      .def_prop_ro("cost_model", [](const DualQueueScheduler& s) { return s.cost_model(); })
      .def_prop_ro("options", [](const DualQueueScheduler& s) { return s.options(); });
}

void bind_block_manager(nb::module_& m) {
  nb::enum_<BlockTier>(m, "BlockTier")
      .value("THINK_COMPLETE", BlockTier::kThinkComplete)
      .value("THINK_ACTIVE", BlockTier::kThinkActive)
      .value("OUTPUT_CRITICAL", BlockTier::kOutputCritical);
  nb::enum_<ReclaimAction>(m, "ReclaimAction")
      .value("EVICT_CACHED", ReclaimAction::kEvictCached)
      .value("OFFLOAD", ReclaimAction::kOffload);
  nb::enum_<AllocStatus>(m, "AllocStatus")
      .value("OK", AllocStatus::kOk)
      .value("OUT_OF_BLOCKS", AllocStatus::kOutOfBlocks)
      .value("INVALID_TIER", AllocStatus::kInvalidTier)
      .value("NOT_FOUND", AllocStatus::kNotFound);
  nb::enum_<ReleaseKind>(m, "ReleaseKind")
      .value("FINISHED", ReleaseKind::kFinished)
      .value("RECOMPUTE", ReleaseKind::kRecompute)
      .value("SWAP", ReleaseKind::kSwap)
      .value("OFFLOAD", ReleaseKind::kOffload)
      .value("ABORT", ReleaseKind::kAbort);

  nb::class_<ReclaimedBlock>(m, "ReclaimedBlock")
      .def_ro("block", &ReclaimedBlock::block)
      .def_ro("owner", &ReclaimedBlock::owner)
      .def_ro("tier", &ReclaimedBlock::tier)
      .def_ro("action", &ReclaimedBlock::action);
  nb::class_<AllocResult>(m, "AllocResult")
      .def_ro("status", &AllocResult::status)
      .def_ro("blocks", &AllocResult::blocks)
      .def_ro("reclaimed", &AllocResult::reclaimed)
      .def_prop_ro("ok", &AllocResult::ok)
      .def("__bool__", &AllocResult::ok);

  nb::class_<KvBlockManagerOptions>(m, "KvBlockManagerOptions")
      .def(nb::init<>())
      .def_static("from_config", &KvBlockManagerOptions::from_config, "config"_a, "capacity_bytes"_a)
      .def_rw("num_blocks", &KvBlockManagerOptions::num_blocks)
      .def_rw("block_size_bytes", &KvBlockManagerOptions::block_size_bytes)
      .def_rw("think_phase_memory_fraction", &KvBlockManagerOptions::think_phase_memory_fraction)
      .def_rw("aggressive_think_eviction", &KvBlockManagerOptions::aggressive_think_eviction)
      .def_rw("fabric_offload", &KvBlockManagerOptions::fabric_offload);

  nb::class_<KvBlockCounters>(m, "KvBlockCounters")
      .def_ro("allocated_blocks", &KvBlockCounters::allocated_blocks)
      .def_ro("failed_allocations", &KvBlockCounters::failed_allocations)
      .def_prop_ro("evicted_cached", [](const KvBlockCounters& c) { return to_list(c.evicted_cached); })
      .def_prop_ro("offloaded_live", [](const KvBlockCounters& c) { return to_list(c.offloaded_live); })
      .def_prop_ro("released_live", [](const KvBlockCounters& c) { return to_list(c.released_live); })
      .def_ro("dropped_think_complete", &KvBlockCounters::dropped_think_complete)
      .def_ro("demoted_blocks", &KvBlockCounters::demoted_blocks)
      .def_ro("output_critical_eviction_events", &KvBlockCounters::output_critical_eviction_events)
      .def_ro("prefix_hit_blocks", &KvBlockCounters::prefix_hit_blocks)
      .def_ro("prefix_lookup_blocks", &KvBlockCounters::prefix_lookup_blocks)
      .def("evictions", &KvBlockCounters::evictions, "tier"_a);

  nb::class_<KvBlockUsage>(m, "KvBlockUsage")
      .def_ro("total_blocks", &KvBlockUsage::total_blocks)
      .def_ro("free_blocks", &KvBlockUsage::free_blocks)
      .def_prop_ro("live_blocks", [](const KvBlockUsage& u) { return to_list(u.live_blocks); })
      .def_prop_ro("cached_blocks", [](const KvBlockUsage& u) { return to_list(u.cached_blocks); })
      .def_ro("think_block_limit", &KvBlockUsage::think_block_limit)
      .def_ro("block_size_bytes", &KvBlockUsage::block_size_bytes)
      .def_ro("allocatable_blocks", &KvBlockUsage::allocatable_blocks)
      .def_prop_ro("used_blocks", &KvBlockUsage::used_blocks)
      .def_prop_ro("used_bytes", &KvBlockUsage::used_bytes)
      .def_prop_ro("think_headroom", &KvBlockUsage::think_headroom);

  nb::class_<KvBlockManager>(m, "KvBlockManager")
      .def(nb::init<const KvBlockManagerOptions&>(), "options"_a)
      .def(
          "allocate",
          [](KvBlockManager& k, RequestId request, BlockTier tier, std::uint32_t count,
             const std::vector<std::uint64_t>& hashes) { return k.allocate(request, tier, count, hashes); },
          "request_id"_a, "tier"_a, "count"_a, "hashes"_a = std::vector<std::uint64_t>{})
      .def(
          "attach_prefix",
          [](KvBlockManager& k, RequestId request, const std::vector<std::uint64_t>& hashes) {
            return k.attach_prefix(request, hashes);
          },
          "request_id"_a, "hashes"_a)
      .def(
          "match_prefix",
          [](const KvBlockManager& k, const std::vector<std::uint64_t>& hashes) {
            return k.match_prefix(hashes);
          },
          "hashes"_a)
      .def("demote_think_blocks", &KvBlockManager::demote_think_blocks, "request_id"_a)
      .def("release", &KvBlockManager::release, "request_id"_a, "kind"_a, "answer_phase"_a = false)
      .def("touch", &KvBlockManager::touch, "request_id"_a)
      .def(
          "blocks_of",
          [](const KvBlockManager& k, RequestId request) {
            const auto blocks = k.blocks_of(request);
            return std::vector<BlockId>(blocks.begin(), blocks.end());
          },
          "request_id"_a)
      .def("holds_blocks", &KvBlockManager::holds_blocks, "request_id"_a)
      .def("tier_of", &KvBlockManager::tier_of, "block"_a)
      .def("is_free", &KvBlockManager::is_free, "block"_a)
      .def_prop_ro("usage", &KvBlockManager::usage)
      .def_prop_ro("counters", [](const KvBlockManager& k) { return k.counters(); })  // a snapshot
      .def_prop_ro("options", [](const KvBlockManager& k) { return k.options(); })
      .def("check_invariants", &KvBlockManager::check_invariants);

  m.def("think_block_limit", &think_block_limit, "think_phase_memory_fraction"_a, "total_blocks"_a);
}

// The scheduler and the block manager must outlive the driver: keep_alive ties them to it.
void bind_step_driver(nb::module_& m) {
  m.def("release_kind", &release_kind, "mode"_a);
  nb::class_<StepDriver>(m, "StepDriver")
      .def(nb::init<DualQueueScheduler&, KvBlockManager&>(), "scheduler"_a, "kv"_a, nb::keep_alive<1, 2>(),
           nb::keep_alive<1, 3>())
      .def(
          "plan",
          [](StepDriver& d, const StepLimits& limits, std::int64_t now_ns) {
            return StepPlan(d.plan(limits, now_ns));
          },
          "limits"_a, "now_ns"_a)
      .def_prop_ro("not_run", &StepDriver::not_run)
      .def_prop_ro("released_blocks", &StepDriver::released_blocks)
      .def("complete", &StepDriver::complete, "observed_ms"_a, "end_ns"_a);
}

}  // namespace

void bind_scheduler(nb::module_& m) {
  m.def(
      "engine_step_boundaries", &engine_step_boundaries, "router"_a, "ids"_a, "req_ids"_a, "sampled"_a,
      "boundary_ids"_a,
      "One engine step's tokens (req_ids[i] sampled the list sampled[i]): the requests that sampled a "
      "boundary id are fed to `router` in one batch (phases only; counts are not kept); returns the events");
  m.def(
      "engine_step_ran", &engine_step_ran, "scheduler"_a, "ids"_a, "end_ns"_a, "scheduled"_a, "requests"_a,
      "One engine step as vLLM scheduled it (scheduled: request id -> tokens; requests: id -> vLLM Request): "
      "complete_engine_step() with the requests `ids` knows; returns the step's context tokens");
  bind_cost_model(m);
  bind_plan_types(m);
  bind_scheduler_class(m);
  bind_block_manager(m);
  bind_step_driver(m);
}

}  // namespace meridian::python
