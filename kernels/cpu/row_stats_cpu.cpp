// The CPU side of the probe kernels: view validation, threading over rows,
// the float64 reference and the CPU backend. The SIMD loop itself is in
// row_stats_simd.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/row_stats_math.h"
#include "cpu/row_stats_internal.h"
#include "meridian/row_stats.h"

namespace meridian {

std::size_t dtype_size(LogitsDType dtype) noexcept { return dtype == LogitsDType::kFloat32 ? 4 : 2; }

std::string_view to_string(LogitsDType dtype) noexcept {
  switch (dtype) {
    case LogitsDType::kFloat32: return "fp32";
    case LogitsDType::kBFloat16: return "bf16";
    case LogitsDType::kFloat16: return "fp16";
  }
  return "?";
}

std::optional<LogitsDType> parse_dtype(std::string_view name) noexcept {
  if (name == "fp32" || name == "float32") return LogitsDType::kFloat32;
  if (name == "bf16" || name == "bfloat16") return LogitsDType::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "half") return LogitsDType::kFloat16;
  return std::nullopt;
}

std::string_view to_string(ProbeDevice device) noexcept {
  return device == ProbeDevice::kCpu ? "cpu" : "cuda";
}

std::size_t LogitsView::bytes_read() const noexcept {
  if (row_vocab.empty()) return rows * vocab_of(0) * dtype_size(dtype);
  std::size_t elements = 0;
  for (std::size_t r = 0; r < rows; ++r) elements += vocab_of(r);
  return elements * dtype_size(dtype);
}

void LogitsView::validate(std::span<const TokenId> end_think_ids, std::size_t out_rows) const {
  if (rows == 0) return;
  if (data == nullptr) throw KernelError(fmt::format("logits: data is null for {} rows", rows));
  if (!row_vocab.empty() && row_vocab.size() != rows) {
    throw KernelError(fmt::format("logits: row_vocab has {} entries for {} rows", row_vocab.size(), rows));
  }
  if (out_rows < rows) {
    throw KernelError(fmt::format("logits: output holds {} rows, need {}", out_rows, rows));
  }
  // Without per-row vocab sizes every row is alike: checked once, so the cost
  // is bounded by what the caller passed, not by a (strided) view's row count
  // (issue 27: 2^40 rows scanned with the GIL held).
  const std::size_t checked_rows = row_vocab.empty() ? 1 : rows;
  for (std::size_t r = 0; r < checked_rows; ++r) {
    const std::size_t v = vocab_of(r);
    if (v == 0) throw KernelError(fmt::format("logits: row {} has vocab size 0", r));
    if (v > stride()) {
      throw KernelError(fmt::format("logits: row {} has vocab size {} > row_stride {}", r, v, stride()));
    }
    if (v > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      throw KernelError(fmt::format("logits: row {} has vocab size {} > 2^31-1", r, v));
    }
    for (std::size_t i = 0; i < end_think_ids.size(); ++i) {
      if (end_think_ids[i] >= v) {
        throw KernelError(fmt::format("logits: end_think_ids[{}] = {} is outside row {} (vocab size {})", i,
                                      end_think_ids[i], r, v));
      }
    }
  }
}

void compute_row_stats_cpu(const LogitsView& view, std::span<const TokenId> end_think_ids,
                           std::span<RowStats> out, const CpuRowStatsOptions& options) {
  view.validate(end_think_ids, out.size());
  if (view.rows == 0) return;
  const std::size_t hardware = std::max(1U, std::thread::hardware_concurrency());
  const std::size_t wanted = options.max_threads == 0 ? hardware : options.max_threads;
  const std::size_t by_size = view.bytes_read() / std::max<std::size_t>(options.min_bytes_per_thread, 1);
  const std::size_t threads = std::clamp<std::size_t>(std::min(wanted, by_size), 1, view.rows);
  if (threads == 1) {
    kernels::dispatch_row_stats_rows({&view, end_think_ids, out, 0, view.rows});
    return;
  }
  // Contiguous row ranges, one per thread; the calling thread takes the first.
  std::vector<std::jthread> workers;
  workers.reserve(threads - 1);
  const std::size_t per = view.rows / threads;
  const std::size_t extra = view.rows % threads;
  std::size_t begin = 0;
  std::vector<kernels::RowsTask> tasks;
  tasks.reserve(threads);
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t end = begin + per + (t < extra ? 1 : 0);
    tasks.push_back({&view, end_think_ids, out, begin, end});
    begin = end;
  }
  for (std::size_t t = 1; t < threads; ++t) {
    workers.emplace_back([task = tasks[t]] { kernels::dispatch_row_stats_rows(task); });
  }
  kernels::dispatch_row_stats_rows(tasks[0]);
}

namespace {

template <typename T>
RowStats reference_row(const T* row, std::size_t vocab, std::span<const TokenId> end_ids) {
  std::uint32_t flags = 0;
  double m = -std::numeric_limits<double>::infinity();
  std::int32_t argmax = -1;
  for (std::size_t i = 0; i < vocab; ++i) {
    const double x = kernels::to_float(row[i]);
    if (std::isnan(x)) flags |= kRowHasNaN;
    if (x == std::numeric_limits<double>::infinity()) flags |= kRowHasPosInf;
    if (x > m) {
      m = x;
      argmax = static_cast<std::int32_t>(i);
    }
  }
  if (flags != 0) return kernels::finish_row(kernels::empty_partial(), 0.0, -1, flags);
  if (m == -std::numeric_limits<double>::infinity()) {
    return kernels::finish_row(kernels::empty_partial(), 0.0, -1, 0);
  }
  double s = 0.0;
  double d = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) {
    const double x = kernels::to_float(row[i]);
    if (x == -std::numeric_limits<double>::infinity()) continue;
    const double e = std::exp(x - m);
    s += e;
    d += e * (x - m);
  }
  // m is one of the inputs, so it is exact as a float.
  const auto m_float = static_cast<float>(m);
  return kernels::finish_row({m_float, s, d}, kernels::end_mass_terms(row, end_ids, m_float), argmax, 0);
}

}  // namespace

void compute_row_stats_reference(const LogitsView& view, std::span<const TokenId> end_think_ids,
                                 std::span<RowStats> out) {
  view.validate(end_think_ids, out.size());
  for (std::size_t r = 0; r < view.rows; ++r) {
    out[r] = kernels::visit_row(view, r, [&](const auto* row, std::size_t vocab) {
      return reference_row(row, vocab, end_think_ids);
    });
  }
}

std::string_view cpu_simd_target() { return kernels::dispatch_target_name(); }

float stream_read_sum(const void* data, std::size_t bytes) noexcept {
  return kernels::dispatch_stream_sum(static_cast<const float*>(data), bytes / sizeof(float));
}

namespace {

class CpuRowStatsBackend final : public RowStatsBackend {
 public:
  explicit CpuRowStatsBackend(CpuRowStatsOptions options) : options_(options) {}
  [[nodiscard]] ProbeDevice device() const noexcept override { return ProbeDevice::kCpu; }
  [[nodiscard]] std::string_view name() const noexcept override { return "cpu"; }
  void compute(const LogitsView& view, std::span<const TokenId> end_think_ids, std::span<RowStats> out,
               void* /*stream*/) override {
    compute_row_stats_cpu(view, end_think_ids, out, options_);
  }

 private:
  CpuRowStatsOptions options_;
};

}  // namespace

std::unique_ptr<RowStatsBackend> make_cpu_row_stats_backend(CpuRowStatsOptions options) {
  return std::make_unique<CpuRowStatsBackend>(options);
}

}  // namespace meridian
