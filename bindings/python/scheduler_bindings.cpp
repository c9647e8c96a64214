// Python view of the dual-queue scheduler, its step-cost model and the
// phase-aware KV block manager: what an engine adapter (meridian.vllm) calls
// once per step. Plans are returned by value, so a Python reference stays
// valid after the next schedule() call.
#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/error.h"
#include "meridian/kv_block_manager.h"
#include "meridian/phase_router.h"
#include "meridian/request_clock.h"
#include "meridian/scheduler.h"
#include "meridian/step_cost_model.h"
#include "meridian/step_driver.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

// The Meridian id of vLLM request id `rid` in the adapter's `mid_of` dict
// (str -> int). A dict lookup by the very str object vLLM keys its own maps
// with: the hash is cached in the object and the key matches by identity, so
// a cold lookup costs two cache misses, where RequestIdMap hashes the bytes and
// takes a shard lock (most of the per-step cost at 1,024 running).
std::optional<RequestId> mid_of_rid(nb::handle mid_of, nb::handle rid) {
  PyObject* mid = PyDict_GetItemWithError(mid_of.ptr(), rid.ptr());  // borrowed
  if (mid == nullptr) {
    if (PyErr_Occurred() != nullptr) throw nb::python_error();
    return std::nullopt;
  }
  return nb::cast<RequestId>(nb::handle(mid));
}

// One engine step's sampled tokens (vLLM: ModelRunnerOutput.req_ids and
// .sampled_token_ids, req_ids[i] sampled the list sampled[i]), read once:
// take() times each request's tokens in the RequestClock (before vLLM's
// update, which releases finished requests) and stages the tokens of the
// requests that sampled a boundary id (think start/end, EOS, tool-call
// markers); feed() gives those to the router in one batch (after the update,
// where phase changes apply). Ordinary tokens change no phase, so the
// router's token counts are not maintained; only its phases are. One native
// pass instead of a Python loop per request was most of the adapter's
// per-step cost (docs/benchmarks.md). Binding-only: it reads Python objects.
class EngineStepTokens {
 public:
  void take(telemetry::RequestClock& clock, nb::dict mid_of, nb::handle req_ids, nb::handle sampled,
            const std::vector<TokenId>& boundary_ids, double now_s) {
    staged_ids_.clear();
    staged_tokens_.clear();
    // vLLM hands lists; PySequence_Fast takes any sequence without a copy of a list.
    const nb::object rid_seq = nb::steal(PySequence_Fast(req_ids.ptr(), "req_ids must be a sequence"));
    if (!rid_seq.is_valid()) throw nb::python_error();
    const nb::object tok_seq = nb::steal(PySequence_Fast(sampled.ptr(), "sampled must be a sequence"));
    if (!tok_seq.is_valid()) throw nb::python_error();
    const Py_ssize_t rows =
        std::min(PySequence_Fast_GET_SIZE(rid_seq.ptr()), PySequence_Fast_GET_SIZE(tok_seq.ptr()));
    PyObject** rid_items = PySequence_Fast_ITEMS(rid_seq.ptr());
    PyObject** tok_items = PySequence_Fast_ITEMS(tok_seq.ptr());
    for (Py_ssize_t row = 0; row < rows; ++row) {
      const nb::handle tokens(tok_items[row]);
      const Py_ssize_t n = PySequence_Size(tokens.ptr());
      if (n < 0) throw nb::python_error();
      if (n == 0) continue;
      const auto id = mid_of_rid(mid_of, nb::handle(rid_items[row]));
      if (!id) continue;
      request_tokens_.clear();
      bool boundary = false;
      for (Py_ssize_t i = 0; i < n; ++i) {
        const TokenId t = token_at(tokens, i);
        request_tokens_.push_back(t);
        boundary = boundary || std::find(boundary_ids.begin(), boundary_ids.end(), t) != boundary_ids.end();
      }
      clock.sampled(*id, request_tokens_.front(), now_s);
      if (!boundary) continue;
      for (const TokenId t : request_tokens_) {
        staged_ids_.push_back(*id);
        staged_tokens_.push_back(t);
      }
    }
  }

  // The staged boundary tokens into `router`; returns its events.
  std::vector<PhaseEvent> feed(PhaseRouter& router) {
    std::size_t n_events = 0;
    if (!staged_ids_.empty()) {
      nb::gil_scoped_release release;
      events_.resize(staged_ids_.size());
      n_events = router.on_tokens(staged_ids_, staged_tokens_, events_);
    }
    staged_ids_.clear();
    staged_tokens_.clear();
    return {events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(n_events)};
  }

  [[nodiscard]] std::size_t staged() const noexcept { return staged_ids_.size(); }

 private:
  static TokenId token_at(nb::handle tokens, Py_ssize_t i) {
    if (PyList_Check(tokens.ptr())) return nb::cast<TokenId>(nb::handle(PyList_GET_ITEM(tokens.ptr(), i)));
    return nb::cast<TokenId>(nb::steal(PySequence_GetItem(tokens.ptr(), i)));
  }

  std::vector<RequestId> staged_ids_;
  std::vector<TokenId> staged_tokens_;
  std::vector<TokenId> request_tokens_;
  std::vector<PhaseEvent> events_;
};

// What vLLM scheduled in one step (vLLM: SchedulerOutput.num_scheduled_tokens,
// keyed by request id), told to the core in one pass: every request the core
// knows that ran made a decode step (complete_engine_step).
void engine_step_ran(DualQueueScheduler& sched, nb::dict mid_of, std::int64_t end_ns, nb::handle scheduled) {
  thread_local std::vector<RequestId> ran;
  ran.clear();
  auto one = [&](nb::handle rid) {
    if (const auto id = mid_of_rid(mid_of, rid)) ran.push_back(*id);
  };
  if (PyDict_Check(scheduled.ptr())) {  // vLLM's num_scheduled_tokens: no iterator object
    Py_ssize_t pos = 0;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    while (PyDict_Next(scheduled.ptr(), &pos, &key, &value) != 0) one(nb::handle(key));
  } else {
    for (nb::handle rid : scheduled) one(rid);
  }
  nb::gil_scoped_release release;
  sched.complete_engine_step(end_ns, ran);
}

// [requests[m] for m in mids] (the adapter's Meridian id -> vLLM Request
// dict): one native pass; KeyError naming the id when one is missing.
nb::list engine_requests_of(nb::dict requests, nb::handle mids) {
  const nb::object seq = nb::steal(PySequence_Fast(mids.ptr(), "mids must be a sequence"));
  if (!seq.is_valid()) throw nb::python_error();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  nb::list out = nb::steal<nb::list>(PyList_New(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* request = PyDict_GetItemWithError(requests.ptr(), items[i]);  // borrowed
    if (request == nullptr) {
      if (PyErr_Occurred() == nullptr) PyErr_SetObject(PyExc_KeyError, items[i]);
      throw nb::python_error();
    }
    Py_INCREF(request);
    PyList_SET_ITEM(out.ptr(), i, request);  // steals the reference
  }
  return out;
}

// running[:] = ordered, when `ordered` holds as many requests as `running`
// and each one's status is `running_status` (vLLM keeps every RUNNING request
// in its list); returns false, changing nothing, otherwise.
bool engine_replace_running(nb::list running, nb::list ordered, nb::handle running_status) {
  const Py_ssize_t n = PyList_GET_SIZE(ordered.ptr());
  if (n != PyList_GET_SIZE(running.ptr())) return false;
  static PyObject* const status = PyUnicode_InternFromString(
      "status");  // never released: a static Python object must outlive finalization
  if (status == nullptr) throw nb::python_error();
  for (Py_ssize_t i = 0; i < n; ++i) {
    const nb::object s = nb::steal(PyObject_GetAttr(PyList_GET_ITEM(ordered.ptr(), i), status));
    if (!s.is_valid()) throw nb::python_error();
    if (!s.is(running_status)) return false;
  }
  if (PyList_SetSlice(running.ptr(), 0, n, ordered.ptr()) != 0) throw nb::python_error();
  return true;
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
             std::uint64_t free_kv_blocks, std::uint64_t free_think_kv_blocks,
             std::uint32_t engine_prefill_tokens, std::uint32_t engine_resume_tokens) {
            new (l) StepLimits{token_budget,         max_sequences,         free_kv_blocks,
                               free_think_kv_blocks, engine_prefill_tokens, engine_resume_tokens};
          },
          "token_budget"_a = StepLimits{}.token_budget, "max_sequences"_a = StepLimits{}.max_sequences,
          "free_kv_blocks"_a = StepLimits{}.free_kv_blocks,
          "free_think_kv_blocks"_a = StepLimits{}.free_think_kv_blocks, "engine_prefill_tokens"_a = 0U,
          "engine_resume_tokens"_a = 0U)
      .def_rw("token_budget", &StepLimits::token_budget)
      .def_rw("max_sequences", &StepLimits::max_sequences)
      .def_rw("free_kv_blocks", &StepLimits::free_kv_blocks)
      .def_rw("free_think_kv_blocks", &StepLimits::free_think_kv_blocks)
      .def_rw("engine_prefill_tokens", &StepLimits::engine_prefill_tokens)
      .def_rw("engine_resume_tokens", &StepLimits::engine_resume_tokens);

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
      .def_ro("engine_prefill_tokens", &StepStats::engine_prefill_tokens)
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
      .def_ro("admission_preemptions", &SchedulerCounters::admission_preemptions)
      .def_ro("ttft_deferred", &SchedulerCounters::ttft_deferred)
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
      .def_rw("ttft_slo_ms", &SchedulerOptions::ttft_slo_ms)
      .def_rw("ttfv_slo_ms", &SchedulerOptions::ttfv_slo_ms)
      .def_rw("ttft_triage", &SchedulerOptions::ttft_triage)
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
             std::uint32_t cached_prompt_tokens, std::int64_t arrival_ns, std::uint32_t preemptions,
             std::uint32_t computed_prompt_tokens, std::uint32_t generated_tokens,
             std::int64_t first_token_ns, std::int64_t victim_wait_ns) {
            s.add(NewRequest{id, phase, prompt_tokens, cached_prompt_tokens, arrival_ns, preemptions,
                             computed_prompt_tokens, generated_tokens, first_token_ns, victim_wait_ns});
          },
          "request_id"_a, "prompt_tokens"_a, "phase"_a = Phase::kThinkDecode, "cached_prompt_tokens"_a = 0,
          "arrival_ns"_a = 0, "preemptions"_a = 0, "computed_prompt_tokens"_a = 0, "generated_tokens"_a = 0,
          "first_token_ns"_a = 0, "victim_wait_ns"_a = 0)
      .def("set_phase", &DualQueueScheduler::set_phase, "request_id"_a, "phase"_a,
           "answer_decodes_in_flight"_a = 0U)
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
      .def("retime_tokens", &DualQueueScheduler::retime_tokens, "from_ns"_a, "delta_ns"_a)
      .def("admission_victims", &DualQueueScheduler::admission_victims, "arrival_ns"_a, "need_blocks"_a,
           "free_blocks"_a, "now_ns"_a, "max_victims"_a = std::numeric_limits<std::size_t>::max(),
           "Think requests to preempt so a new prompt near its TTFT can start (ADR-0027); see "
           "DualQueueScheduler::admission_victims in meridian/scheduler.h")
      .def("step_victim_share", &DualQueueScheduler::step_victim_share,
           "The per-step victim share admission_victims keeps (ADR-0027); see "
           "DualQueueScheduler::step_victim_share in meridian/scheduler.h")
      .def(
          "ttft_deferrals",
          [](DualQueueScheduler& s, const std::vector<std::int64_t>& arrival_ns,
             const std::vector<std::uint32_t>& remaining_tokens, const std::vector<bool>& deferred_before,
             std::int64_t now_ns) {
            // Parallel lists, not per-prompt objects: the adapter calls this every step.
            if (remaining_tokens.size() != arrival_ns.size() || deferred_before.size() != arrival_ns.size()) {
              throw InvalidArgument(fmt::format(
                  "ttft_deferrals: arrival_ns, remaining_tokens and deferred_before must have one "
                  "entry per prompt (got {}, {} and {})",
                  arrival_ns.size(), remaining_tokens.size(), deferred_before.size()));
            }
            std::vector<WaitingPrompt> queue(arrival_ns.size());
            for (std::size_t i = 0; i < queue.size(); ++i) {
              queue[i] = {arrival_ns[i], remaining_tokens[i], deferred_before[i]};
            }
            return s.ttft_deferrals(queue, now_ns);
          },
          "arrival_ns"_a, "remaining_tokens"_a, "deferred_before"_a, "now_ns"_a,
          "Indices of the waiting prompts (in queue order) that can no longer meet ttft_slo_ms and go behind "
          "the others (ADR-0028); see DualQueueScheduler::ttft_deferrals in meridian/scheduler.h")
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
      .def_prop_ro("victim_wait_ms", &DualQueueScheduler::victim_wait_ms)
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
  nb::class_<EngineStepTokens>(
      m, "EngineStepTokens",
      "One engine step's sampled tokens read once: take() times them in a "
      "RequestClock and stages the boundary tokens, feed() gives those to the router "
      "(one per engine loop; not thread-safe)")
      .def(nb::init<>())
      .def("take", &EngineStepTokens::take, "clock"_a, "mid_of"_a, "req_ids"_a, "sampled"_a, "boundary_ids"_a,
           "now_s"_a,
           "req_ids[i] sampled the list sampled[i] at now_s: time each request's tokens (those `mid_of` "
           "knows) "
           "in `clock` and stage "
           "the tokens of those that sampled a boundary id (replacing what was staged)")
      .def("feed", &EngineStepTokens::feed, "router"_a,
           "Feed the staged tokens to `router` in one batch (phases only; counts are not kept); returns the "
           "events and clears the stage")
      .def_prop_ro("staged", &EngineStepTokens::staged, "tokens staged for the router");
  m.def("engine_requests_of", &engine_requests_of, "requests"_a, "mids"_a,
        "[requests[m] for m in mids] in one native pass (KeyError for a missing id)");
  m.def("engine_replace_running", &engine_replace_running, "running"_a, "ordered"_a, "running_status"_a,
        "running[:] = ordered if both hold as many requests and each ordered one's status is running_status; "
        "returns whether it did");
  m.def("engine_step_ran", &engine_step_ran, "scheduler"_a, "mid_of"_a, "end_ns"_a, "scheduled"_a,
        "One engine step as vLLM scheduled it (scheduled: request id -> tokens): complete_engine_step() "
        "with the requests `mid_of` (vLLM request id -> Meridian id) knows");
  bind_cost_model(m);
  bind_plan_types(m);
  bind_scheduler_class(m);
  bind_block_manager(m);
  bind_step_driver(m);
}

}  // namespace meridian::python
