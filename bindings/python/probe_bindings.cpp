// Python view of the entropy probe: meridian.KernelError,
// meridian.EntropySignal and meridian._meridian._EntropyProbeCore, the C++
// half of meridian.EntropyProbe (python/meridian/probe.py picks the CUDA
// stream and documents the API; docs/api-python.md#entropy-probe).
//
// Logits arrive through DLPack (nb::ndarray takes NumPy, torch, CuPy, ...)
// and are read in place: the CPU kernel for host memory, the CUDA kernel
// (engine-grade launch, workspace owned here per device) for device memory.
// The GIL is released while a kernel runs. Bad tensors are ValueError (not a
// tensor at all: TypeError); CUDA failures are meridian.KernelError.
//
// Thread-safety: one _EntropyProbeCore is used from one thread at a time;
// a second thread entering a compute method while one runs gets
// RuntimeError instead of a data race. Ownership: it owns the per-request
// EntropyProbe states and the CUDA workspaces; it borrows each tensor only
// for the duration of a call.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/dlpack_view.h"
#include "meridian/entropy_probe.h"
#include "meridian/row_stats.h"
#if MERIDIAN_HAVE_CUDA
#include "meridian/cuda_row_stats.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

enum class Backend : std::uint8_t { kAuto, kCpu, kCuda };

/// Why CUDA logits cannot be probed here, or "" when they can.
std::string cuda_unavailable_reason() {
#if MERIDIAN_HAVE_CUDA
  return cuda::unavailable_reason();
#else
  return "this build of meridian has no CUDA kernel (it was built without nvcc, or with "
         "MERIDIAN_ENABLE_CUDA=OFF)";
#endif
}

/// "float64", "int32", "bfloat16", ... for a DLPack dtype.
std::string dtype_name(const nb::dlpack::dtype& t) {
  const char* kind = nullptr;
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: return fmt::format("dtype code {} ({} bits)", t.code, t.bits);
  }
  std::string name = fmt::format("{}{}", kind, t.bits);
  if (t.lanes != 1) name += fmt::format("x{}", t.lanes);
  return name;
}

std::string device_name(int device_type, int device_id) {
  switch (device_type) {
    case 1: return "cpu";
    case 2: return fmt::format("cuda:{}", device_id);
    case 3: return "cuda_host";
    case 13: return fmt::format("cuda_managed:{}", device_id);
    default: return fmt::format("DLPack device type {}", device_type);
  }
}

/// Why `obj`, which nanobind could not import, failed to export itself:
/// ", whose __dlpack__() raised ..." (e.g. torch's "Can't export tensors that
/// require gradient"), or "" when it has no __dlpack__ or it worked.
std::string dlpack_failure(nb::handle obj) {
  if (!nb::hasattr(obj, "__dlpack__")) return "";
  try {
    obj.attr("__dlpack__")();  // the unconsumed capsule frees the export
  } catch (const nb::python_error& e) {
    return fmt::format(", whose __dlpack__() raised {}", e.what());
  }
  return "";
}

/// A logits tensor imported through DLPack and its view. `array` keeps the
/// producer's memory alive for the call.
struct Logits {
  nb::ndarray<nb::ro> array;
  LogitsView view;
  ProbeDevice device = ProbeDevice::kCpu;
  int device_id = 0;
};

/// Marks a probe busy for the duration of a compute call.
class BusyGuard {
 public:
  BusyGuard(std::atomic<bool>& busy, const char* method) : busy_(busy) {
    if (busy_.exchange(true, std::memory_order_acquire)) {
      throw Error(fmt::format(
          "EntropyProbe.{}: this probe is already in use by another thread; use one EntropyProbe from "
          "one thread at a time",
          method));
    }
  }
  ~BusyGuard() { busy_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;
  BusyGuard(BusyGuard&&) = delete;
  BusyGuard& operator=(BusyGuard&&) = delete;

 private:
  std::atomic<bool>& busy_;
};

struct RequestState {
  EntropyProbe probe;
  std::uint64_t think_tokens = 0;
};

class ProbeCore {
 public:
  /// `ema_alpha`, when given, replaces the config's entropy.ema_alpha for
  /// this probe only (the seeds' EntropyProbe(ema_alpha=...)).
  ProbeCore(MeridianConfig config, std::vector<TokenId> end_ids, const std::string& backend,
            std::optional<double> ema_alpha)
      : end_ids_(std::move(end_ids)) {
    if (ema_alpha) config.entropy.ema_alpha = *ema_alpha;
    validate_or_throw(config);
    settings_ = ProbeSettings::from(config);
    if (backend == "auto") {
      backend_ = Backend::kAuto;
    } else if (backend == "cpu") {
      backend_ = Backend::kCpu;
    } else if (backend == "cuda") {
      backend_ = Backend::kCuda;
      if (const std::string& why = cuda_reason(); !why.empty()) {
        throw KernelError("EntropyProbe(backend='cuda'): " + why +
                          "; backend='auto' runs host tensors on the CPU kernel and CUDA tensors on CUDA");
      }
    } else {
      throw nb::value_error(
          fmt::format("EntropyProbe: backend must be 'auto', 'cpu' or 'cuda'; got '{}'", backend).c_str());
    }
    if (end_ids_.empty()) throw nb::value_error("EntropyProbe: think_end_token_ids is empty");
    if (end_ids_.size() > kMaxEndIds) {
      throw nb::value_error(
          fmt::format("EntropyProbe: at most {} think_end_token_ids; got {}", kMaxEndIds, end_ids_.size())
              .c_str());
    }
  }

  EntropySignal compute(RequestId id, nb::handle obj, std::optional<std::int64_t> think_tokens,
                        bool tool_call_open, std::uintptr_t stream) {
    const BusyGuard busy(busy_, "compute");
    const Logits logits = import(obj, "compute");
    if (logits.array.ndim() == 2 && logits.view.rows != 1) {
      throw nb::value_error(
          fmt::format("EntropyProbe.compute: logits has {} rows; expected [vocab] or [1, vocab] "
                      "(use compute_batch for a batch)",
                      logits.view.rows)
              .c_str());
    }
    const std::uint64_t t = next_think_tokens(id, think_tokens, "compute", "think_tokens");
    const std::vector<std::size_t> rows{0};
    std::vector<RowStats> stats(1);
    compute_rows(logits, rows, stats, stream);
    return observe(id, t, tool_call_open, stats[0]);
  }

  std::vector<EntropySignal> compute_batch(const std::vector<RequestId>& ids, nb::handle obj,
                                           const std::optional<std::vector<std::int64_t>>& rows,
                                           const std::optional<std::vector<std::int64_t>>& think_tokens,
                                           const std::optional<std::vector<bool>>& tool_call_open,
                                           std::uintptr_t stream) {
    const BusyGuard busy(busy_, "compute_batch");
    const std::size_t n = ids.size();
    check_length(rows, n, "rows");
    check_length(think_tokens, n, "think_tokens");
    check_length(tool_call_open, n, "tool_call_open");
    const Logits logits = import(obj, "compute_batch");
    if (logits.array.ndim() != 2) {
      throw nb::value_error(
          "EntropyProbe.compute_batch: logits must be 2-D [batch, vocab]; got 1-D (use compute)");
    }
    if (!rows && n != logits.view.rows) {
      throw nb::value_error(
          fmt::format("EntropyProbe.compute_batch: {} req_ids for logits of {} rows; pass rows= "
                      "to pick the row of each request",
                      n, logits.view.rows)
              .c_str());
    }
    const std::vector<std::size_t> selected = select_rows(logits.view, rows, n, "compute_batch");
    std::vector<std::uint64_t> counts(n);
    std::unordered_set<RequestId> seen;
    seen.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!seen.insert(ids[i]).second) {
        throw nb::value_error(
            fmt::format("EntropyProbe.compute_batch: req_ids[{}] = {} appears more than once", i, ids[i])
                .c_str());
      }
      const std::optional<std::int64_t> given =
          think_tokens ? std::optional<std::int64_t>((*think_tokens)[i]) : std::nullopt;
      counts[i] = next_think_tokens(ids[i], given, "compute_batch", fmt::format("think_tokens[{}]", i));
    }
    std::vector<RowStats> stats(n);
    compute_rows(logits, selected, stats, stream);
    std::vector<EntropySignal> signals;
    signals.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      signals.push_back(observe(ids[i], counts[i], tool_call_open ? (*tool_call_open)[i] : false, stats[i]));
    }
    return signals;
  }

  nb::dict row_stats(nb::handle obj, const std::optional<std::vector<std::int64_t>>& rows,
                     std::uintptr_t stream) {
    const BusyGuard busy(busy_, "row_stats");
    const Logits logits = import(obj, "row_stats");
    const std::size_t n = rows ? rows->size() : logits.view.rows;
    const std::vector<std::size_t> selected = select_rows(logits.view, rows, n, "row_stats");
    std::vector<RowStats> stats(n);
    compute_rows(logits, selected, stats, stream);
    nb::dict out;
    out["entropy"] = column<float>(stats, [](const RowStats& s) { return s.entropy; });
    out["max_logit"] = column<float>(stats, [](const RowStats& s) { return s.max_logit; });
    out["log_sum_exp"] = column<float>(stats, [](const RowStats& s) { return s.log_sum_exp; });
    out["end_think_mass"] = column<float>(stats, [](const RowStats& s) { return s.end_think_mass; });
    out["argmax"] = column<std::int32_t>(stats, [](const RowStats& s) { return s.argmax; });
    out["flags"] = column<std::uint32_t>(stats, [](const RowStats& s) { return s.flags; });
    return out;
  }

  bool release(RequestId id) { return requests_.erase(id) > 0; }
  [[nodiscard]] std::size_t size() const noexcept { return requests_.size(); }
  [[nodiscard]] bool contains(RequestId id) const { return requests_.contains(id); }
  [[nodiscard]] const std::vector<TokenId>& end_ids() const noexcept { return end_ids_; }
  [[nodiscard]] std::string backend() const {
    switch (backend_) {
      case Backend::kCpu: return "cpu";
      case Backend::kCuda: return "cuda";
      case Backend::kAuto: break;
    }
    return "auto";
  }

  static constexpr std::size_t kMaxEndIds = 8;  // the CUDA kernel's limit, kept on the CPU too

 private:
  /// cuda_unavailable_reason(), asked once per probe (devices do not come and go).
  const std::string& cuda_reason() {
    if (!cuda_reason_) cuda_reason_ = cuda_unavailable_reason();
    return *cuda_reason_;
  }

  Logits import(nb::handle obj, const char* method) {
    Logits logits;
    if (!nb::try_cast(obj, logits.array, false)) {
      throw nb::type_error(fmt::format("EntropyProbe.{}: logits must be a NumPy array or a DLPack tensor "
                                       "(torch, CuPy, JAX); got {}{}",
                                       method, nb::inst_name(obj).c_str(), dlpack_failure(obj))
                               .c_str());
    }
    const nb::ndarray<nb::ro>& a = logits.array;
    const nb::dlpack::dtype dt = a.dtype();
    const bool float_type =
        dt.lanes == 1 &&
        ((dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) &&
          (dt.bits == 32 || dt.bits == 16)) ||
         (dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16));
    if (!float_type) {
      throw nb::value_error(
          fmt::format("EntropyProbe.{}: logits dtype is {}; expected float32, bfloat16 or float16", method,
                      dtype_name(dt))
              .c_str());
    }
    DLTensor tensor{};
    tensor.data =
        const_cast<void*>(a.data());  // NOLINT(cppcoreguidelines-pro-type-const-cast): DLTensor is non-const
    tensor.device = {static_cast<DLDeviceType>(a.device_type()), a.device_id()};
    tensor.ndim = static_cast<std::int32_t>(a.ndim());
    tensor.dtype = {dt.code, dt.bits, dt.lanes};
    tensor.shape = const_cast<std::int64_t*>(a.shape_ptr());  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    tensor.strides =
        const_cast<std::int64_t*>(a.stride_ptr());  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    try {
      logits.view = logits_view_from_dlpack(tensor, &logits.device);
      logits.view.validate(end_ids_, logits.view.rows);
    } catch (const KernelError& e) {
      throw nb::value_error(fmt::format("EntropyProbe.{}: {}", method, e.what()).c_str());
    }
    logits.device_id = a.device_id();
    const std::string where = device_name(a.device_type(), a.device_id());
    if (logits.device == ProbeDevice::kCuda) {
      if (backend_ == Backend::kCpu) {
        throw nb::value_error(
            fmt::format("EntropyProbe.{}: logits are on {} but backend='cpu' (the probe makes no "
                        "host copy); use backend='auto' or 'cuda', or move the tensor to the CPU",
                        method, where)
                .c_str());
      }
      if (const std::string& why = cuda_reason(); !why.empty()) {
        throw KernelError(fmt::format("EntropyProbe.{}: logits are on {} but {}", method, where, why));
      }
    } else if (backend_ == Backend::kCuda) {
      throw nb::value_error(
          fmt::format("EntropyProbe.{}: logits are on {} but backend='cuda'; use backend='auto' "
                      "or 'cpu', or move the tensor to the GPU",
                      method, where)
              .c_str());
    }
    return logits;
  }

  template <typename T>
  static void check_length(const std::optional<std::vector<T>>& values, std::size_t n, const char* name) {
    if (values && values->size() != n) {
      throw nb::value_error(
          fmt::format("EntropyProbe.compute_batch: {} has {} entries for {} req_ids", name, values->size(), n)
              .c_str());
    }
  }

  static std::vector<std::size_t> select_rows(const LogitsView& view,
                                              const std::optional<std::vector<std::int64_t>>& rows,
                                              std::size_t n, const char* method) {
    std::vector<std::size_t> selected(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!rows) {
        selected[i] = i;
        continue;
      }
      const std::int64_t r = (*rows)[i];
      if (r < 0 || static_cast<std::uint64_t>(r) >= view.rows) {
        throw nb::value_error(fmt::format("EntropyProbe.{}: rows[{}] = {} is outside the batch of {} rows",
                                          method, i, r, view.rows)
                                  .c_str());
      }
      selected[i] = static_cast<std::size_t>(r);
    }
    return selected;
  }

  /// The think-token count of this token for request `id`: `given`, or the
  /// request's previous count + 1. Checks it does not go back.
  std::uint64_t next_think_tokens(RequestId id, std::optional<std::int64_t> given, const char* method,
                                  const std::string& name) const {
    const auto it = requests_.find(id);
    const std::uint64_t previous = it == requests_.end() ? 0 : it->second.think_tokens;
    if (!given) return previous + 1;
    if (*given < 1) {
      throw nb::value_error(
          fmt::format("EntropyProbe.{}: {} must be >= 1 (this token included); got {}", method, name, *given)
              .c_str());
    }
    const auto t = static_cast<std::uint64_t>(*given);
    if (t < previous) {
      throw nb::value_error(fmt::format("EntropyProbe.{}: {} = {} for request {} goes back from {}", method,
                                        name, t, id, previous)
                                .c_str());
    }
    return t;
  }

  /// Statistics of logits rows `rows` (one per output entry, repeats
  /// allowed) with the GIL released, each distinct row once. CPU: only the
  /// selected rows are read, runs of consecutive rows as one call each
  /// (threaded over rows when large). CUDA: one launch per run of selected
  /// rows at most kCudaMaxGapRows apart, so the rows read stay bounded by the
  /// rows asked for (compute_selected_rows).
  void compute_rows(const Logits& logits, const std::vector<std::size_t>& rows, std::span<RowStats> out,
                    std::uintptr_t stream) {
    if (rows.empty()) return;
    const LogitsView& view = logits.view;
    if (logits.device == ProbeDevice::kCuda) {
      compute_rows_cuda(logits, rows, out, stream);
      return;
    }
    bool identity = rows.size() == view.rows;
    for (std::size_t i = 0; identity && i < rows.size(); ++i) identity = rows[i] == i;
    const nb::gil_scoped_release unlocked;
    if (identity) {
      compute_row_stats_cpu(view, end_ids_, out);
      return;
    }
    compute_selected_rows(
        view, rows, 0,
        [this](const LogitsView& span_view, std::span<RowStats> span_out) {
          compute_row_stats_cpu(span_view, end_ids_, span_out);
        },
        out);
  }

  /// Unselected rows a CUDA launch may read between two selected ones: a
  /// launch and its copy back cost microseconds, a row well under one.
  static constexpr std::size_t kCudaMaxGapRows = 64;

  void compute_rows_cuda(const Logits& logits, const std::vector<std::size_t>& rows, std::span<RowStats> out,
                         std::uintptr_t stream) {
#if MERIDIAN_HAVE_CUDA
    cuda::CudaRowStatsKernel& kernel = cuda_kernel(logits.device_id);
    const nb::gil_scoped_release unlocked;
    compute_selected_rows(
        logits.view, rows, kCudaMaxGapRows,
        [this, &kernel, stream](const LogitsView& span_view, std::span<RowStats> span_out) {
          // NOLINTNEXTLINE(performance-no-int-to-ptr): the stream handle comes from Python as an integer
          kernel.compute(span_view, end_ids_, span_out, reinterpret_cast<void*>(stream));
        },
        out);
#else
    (void)logits;
    (void)rows;
    (void)out;
    (void)stream;
    throw KernelError("EntropyProbe: " + cuda_reason());
#endif
  }

#if MERIDIAN_HAVE_CUDA
  /// This probe's kernel (and workspace) for CUDA device `device`.
  cuda::CudaRowStatsKernel& cuda_kernel(int device) {
    auto& slot = cuda_kernels_[device];
    if (!slot) slot = std::make_unique<cuda::CudaRowStatsKernel>(device);
    return *slot;
  }
#endif

  /// Feeds one think token of request `id` (created on first use).
  EntropySignal observe(RequestId id, std::uint64_t think_tokens, bool tool_call_open,
                        const RowStats& stats) {
    auto it = requests_.find(id);
    if (it == requests_.end()) it = requests_.emplace(id, RequestState{EntropyProbe(settings_), 0}).first;
    RequestState& state = it->second;
    ThinkTokenObservation token;
    token.think_tokens = think_tokens;
    token.tool_call_open = tool_call_open;
    // A row with no distribution (every logit -inf) measures nothing: pass
    // NaN so the probe drops it and counts it, as it does a NaN row.
    const bool no_distribution = (stats.flags & kRowAllNegInf) != 0U;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    token.token_entropy = no_distribution ? nan : static_cast<double>(stats.entropy);
    if (state.probe.eat_due(think_tokens)) {
      // ADR-0011: a logits processor cannot run the probe pass.
      EatSample sample = EatSample::in_step_proxy(stats);
      if (no_distribution) sample.value = nan;
      token.eat = sample;
    }
    EntropySignal signal = state.probe.observe(token);
    state.think_tokens = think_tokens;
    return signal;
  }

  template <typename T, typename Field>
  static nb::object column(const std::vector<RowStats>& stats, Field field) {
    auto values = std::make_unique<std::vector<T>>(stats.size());
    for (std::size_t i = 0; i < stats.size(); ++i) (*values)[i] = field(stats[i]);
    const nb::capsule owner(values.get(), [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    std::vector<T>& owned = *values.release();  // the capsule frees it now
    return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned.data(), {owned.size()}, owner));
  }

  ProbeSettings settings_;
  std::vector<TokenId> end_ids_;
  Backend backend_ = Backend::kAuto;
  std::unordered_map<RequestId, RequestState> requests_;
  std::atomic<bool> busy_{false};
  std::optional<std::string> cuda_reason_;
#if MERIDIAN_HAVE_CUDA
  std::map<int, std::unique_ptr<cuda::CudaRowStatsKernel>> cuda_kernels_;
#endif
};

/// A double as Python's repr() writes it ("1.0", not fmt's "1").
std::string float_repr(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".ein") == std::string::npos) text += ".0";
  return text;
}

std::string optional_repr(const std::optional<double>& value) { return value ? float_repr(*value) : "None"; }

std::string reason_repr(const std::optional<ForceReason>& reason) {
  return reason ? nb::str(nb::cast(*reason)).c_str() : "None";
}

}  // namespace

void bind_probe(nb::module_& m) {
  // The module attribute keeps the exception type alive for the translator.
  const nb::exception<KernelError> kernel_error(m, "KernelError", PyExc_RuntimeError);
  kernel_error.attr("__module__") = "meridian";
  kernel_error.attr("__doc__") =
      "A kernel could not run: CUDA unavailable (no device, or a build without the CUDA kernel) "
      "or a CUDA error. Subclass of RuntimeError.";

  nb::class_<EntropySignal>(m, "EntropySignal",
                            "One think token's entropy signals and the forcing decision (read-only).")
      .def_ro("think_tokens", &EntropySignal::think_tokens, "think tokens so far, this one included")
      .def_ro("token_entropy", &EntropySignal::token_entropy,
              "this token's entropy (nats); None if not measured")
      .def_ro("eat", &EntropySignal::eat, "this token's EAT sample (in-step proxy), if one was due")
      .def_ro("eat_ema", &EntropySignal::eat_ema)
      .def_ro("eat_ema_variance", &EntropySignal::eat_ema_variance)
      .def_ro("eat_samples", &EntropySignal::eat_samples)
      .def_ro("rpdi_local", &EntropySignal::rpdi_local)
      .def_ro("rpdi_global", &EntropySignal::rpdi_global)
      .def_ro("rpdi_ratio", &EntropySignal::rpdi_ratio)
      .def_ro("rpdi_samples", &EntropySignal::rpdi_samples)
      .def_ro("force", &EntropySignal::force, "ForceReason when the end of thinking should be forced now")
      .def_ro("held_by_tool_call", &EntropySignal::held_by_tool_call,
              "ForceReason of a force held back because a tool call is open")
      .def("__repr__", [](const EntropySignal& s) {
        return fmt::format(
            "EntropySignal(think_tokens={}, token_entropy={}, eat={}, eat_ema={}, eat_ema_variance={}, "
            "eat_samples={}, rpdi_local={}, rpdi_global={}, rpdi_ratio={}, rpdi_samples={}, force={}, "
            "held_by_tool_call={})",
            s.think_tokens, optional_repr(s.token_entropy), optional_repr(s.eat), float_repr(s.eat_ema),
            float_repr(s.eat_ema_variance), s.eat_samples, float_repr(s.rpdi_local),
            float_repr(s.rpdi_global), float_repr(s.rpdi_ratio), s.rpdi_samples, reason_repr(s.force),
            reason_repr(s.held_by_tool_call));
      });

  nb::class_<ProbeCore>(m, "_EntropyProbeCore", "C++ half of meridian.EntropyProbe (use that class)")
      .def(nb::init<MeridianConfig, std::vector<TokenId>, const std::string&, std::optional<double>>(),
           "config"_a, "think_end_token_ids"_a, "backend"_a, "ema_alpha"_a.none() = nb::none())
      .def("compute", &ProbeCore::compute, "req_id"_a, "logits"_a, "think_tokens"_a.none(),
           "tool_call_open"_a, "stream"_a)
      .def("compute_batch", &ProbeCore::compute_batch, "req_ids"_a, "logits"_a, "rows"_a.none(),
           "think_tokens"_a.none(), "tool_call_open"_a.none(), "stream"_a)
      .def("row_stats", &ProbeCore::row_stats, "logits"_a, "rows"_a.none(), "stream"_a)
      .def("release", &ProbeCore::release, "req_id"_a)
      .def("__len__", &ProbeCore::size)
      .def("__contains__", &ProbeCore::contains, "req_id"_a)
      .def_prop_ro("backend", &ProbeCore::backend)
      .def_prop_ro("think_end_token_ids", &ProbeCore::end_ids)
      .def_static("cuda_unavailable_reason", &cuda_unavailable_reason);
}

}  // namespace meridian::python
