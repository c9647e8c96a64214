// Python view of the phase router and the request-id map. Batch calls take
// any sequence of ints (lists, numpy arrays via the buffer protocol are
// converted by nanobind's std::vector caster).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/error.h"
#include "meridian/phase_router.h"
#include "meridian/request_id_map.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

// A Python idle time (s) as nanoseconds: NaN and negatives are argument
// errors; a time too long for nanoseconds saturates ("never").
std::chrono::nanoseconds idle_seconds_to_ns(double seconds) {
  if (!(seconds >= 0)) {
    throw InvalidArgument(fmt::format("PhaseRouter.reap_idle: max_idle_s must be >= 0; got {}", seconds));
  }
  constexpr auto kMax = std::chrono::nanoseconds::max();
  const double ns = seconds * 1e9;
  if (ns >= static_cast<double>(kMax.count())) return kMax;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

}  // namespace

void bind_router(nb::module_& m) {
  nb::enum_<Phase>(m, "Phase")
      .value("PREFILL", Phase::kPrefill)
      .value("THINK_DECODE", Phase::kThinkDecode)
      .value("OUTPUT_DECODE", Phase::kOutputDecode)
      .value("COMPLETE", Phase::kComplete);
  nb::enum_<ForceReason>(m, "ForceReason")
      .value("CONVERGED", ForceReason::kConverged)
      .value("OVERTHINKING", ForceReason::kOverthinking)
      .value("HARD_CAP", ForceReason::kHardCap);
  nb::enum_<PhaseEventKind>(m, "PhaseEventKind")
      .value("ENTER_THINK", PhaseEventKind::kEnterThink)
      .value("EXIT_THINK", PhaseEventKind::kExitThink)
      .value("FORCE_BUDGET", PhaseEventKind::kForceBudget)
      .value("COMPLETE", PhaseEventKind::kComplete);
  nb::enum_<ForceResult>(m, "ForceResult")
      .value("ISSUED", ForceResult::kIssued)
      .value("ALREADY_PENDING", ForceResult::kAlreadyPending)
      .value("TOO_EARLY", ForceResult::kTooEarly)
      .value("DEFERRED_TOOL_CALL", ForceResult::kDeferredToolCall)
      .value("NOT_THINKING", ForceResult::kNotThinking)
      .value("UNKNOWN_REQUEST", ForceResult::kUnknownRequest);

  nb::class_<PhaseEvent>(m, "PhaseEvent")
      .def_ro("request_id", &PhaseEvent::request_id)
      .def_ro("kind", &PhaseEvent::kind)
      .def_ro("reason", &PhaseEvent::reason)
      .def_ro("reissue", &PhaseEvent::reissue)
      .def_ro("forced", &PhaseEvent::forced)
      .def_ro("think_tokens", &PhaseEvent::think_tokens)
      .def("__repr__", [](const PhaseEvent& e) {
        return "PhaseEvent(request_id=" + std::to_string(e.request_id) +
               ", kind=" + std::string(to_string(e.kind)) +
               ", think_tokens=" + std::to_string(e.think_tokens) + ")";
      });

  nb::class_<RequestSnapshot>(m, "RequestSnapshot")
      .def_ro("phase", &RequestSnapshot::phase)
      .def_ro("think_tokens", &RequestSnapshot::think_tokens)
      .def_ro("output_tokens", &RequestSnapshot::output_tokens)
      .def_ro("end_think_pending", &RequestSnapshot::end_think_pending)
      .def_ro("force_pending", &RequestSnapshot::force_pending)
      .def_ro("pending_reason", &RequestSnapshot::pending_reason)
      .def_ro("tool_call_open", &RequestSnapshot::tool_call_open)
      .def_ro("thinking_disabled", &RequestSnapshot::thinking_disabled)
      .def_ro("last_active_ns", &RequestSnapshot::last_active_ns);

  nb::class_<RouterCounters>(m, "RouterCounters")
      .def_ro("begun", &RouterCounters::begun)
      .def_ro("duplicate_begins", &RouterCounters::duplicate_begins)
      .def_ro("think_disable_ignored", &RouterCounters::think_disable_ignored)
      .def_ro("enter_think", &RouterCounters::enter_think)
      .def_ro("exit_think", &RouterCounters::exit_think)
      .def_ro("forced_exits", &RouterCounters::forced_exits)
      .def_prop_ro("forces_issued",
                   [](const RouterCounters& c) {
                     return std::vector<std::uint64_t>(c.forces_issued.begin(), c.forces_issued.end());
                   })
      .def_ro("forces_reissued", &RouterCounters::forces_reissued)
      .def_ro("completed", &RouterCounters::completed)
      .def_ro("ended", &RouterCounters::ended)
      .def_ro("reaped", &RouterCounters::reaped)
      .def_ro("unknown_request_tokens", &RouterCounters::unknown_request_tokens);

  // The GIL is released around calls that may wait on a shard lock held by
  // another thread, so Python threads cannot deadlock against C++ threads.
  nb::class_<PhaseRouter>(m, "PhaseRouter")
      .def(nb::init<const MeridianConfig&, std::string_view, std::vector<TokenId>>(), "config"_a, "model"_a,
           "extra_eos"_a = std::vector<TokenId>{})
      .def(
          "begin",
          [](PhaseRouter& r, RequestId id, const std::vector<TokenId>& prompt, bool thinking_disabled) {
            nb::gil_scoped_release release;
            return r.begin(id, prompt, RequestOptions{thinking_disabled});
          },
          "request_id"_a, "prompt_token_ids"_a = std::vector<TokenId>{}, "thinking_disabled"_a = false)
      .def(
          "on_token",
          [](PhaseRouter& r, RequestId id, TokenId token, std::string_view text) {
            nb::gil_scoped_release release;
            return r.on_token(id, token, text);
          },
          "request_id"_a, "token"_a, "text"_a = "")
      .def(
          "on_tokens",
          [](PhaseRouter& r, const std::vector<RequestId>& ids, const std::vector<TokenId>& tokens,
             const std::optional<std::vector<std::string>>& texts) {
            // Prose-marker models (granite) change phase on decoded text, so
            // the batch path takes it as the single-token path does.
            std::vector<std::string_view> text_views;
            if (texts) text_views.assign(texts->begin(), texts->end());
            std::vector<PhaseEvent> events(ids.size());
            std::size_t n = 0;
            {
              nb::gil_scoped_release release;
              n = r.on_tokens(ids, tokens, events, text_views);
            }
            events.resize(n);
            return events;
          },
          "request_ids"_a, "tokens"_a, "texts"_a = nb::none(),
          "One engine step (texts[i]: the decoded text of tokens[i], needed by prose-marker models); "
          "returns the events it caused")
      .def(
          "request_force",
          [](PhaseRouter& r, RequestId id, ForceReason reason) {
            nb::gil_scoped_release release;
            return r.request_force(id, reason);
          },
          "request_id"_a, "reason"_a)
      .def("end_think_pending", &PhaseRouter::end_think_pending, "request_id"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("snapshot", &PhaseRouter::snapshot, "request_id"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("end", &PhaseRouter::end, "request_id"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("advance_clock", &PhaseRouter::advance_clock, "now_ns"_a)
      .def("tick", &PhaseRouter::tick, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "reap_idle",
          [](PhaseRouter& r, std::optional<double> max_idle_s) {
            if (!max_idle_s) {
              nb::gil_scoped_release release;
              return r.reap_idle();
            }
            const std::chrono::nanoseconds max_idle = idle_seconds_to_ns(*max_idle_s);
            nb::gil_scoped_release release;
            return r.reap_idle(max_idle);
          },
          "max_idle_s"_a = nb::none())
      .def_prop_ro("tracked", &PhaseRouter::tracked)
      .def_prop_ro("now_ns", &PhaseRouter::now_ns)
      .def("counters", &PhaseRouter::counters);

  nb::class_<RequestIdMap>(m, "RequestIdMap")
      .def(nb::init<>())
      .def("intern", &RequestIdMap::intern, "external_id"_a)
      .def("find", &RequestIdMap::find, "external_id"_a)
      .def("release", &RequestIdMap::release, "external_id"_a)
      .def("__len__", &RequestIdMap::size);
}

}  // namespace meridian::python
