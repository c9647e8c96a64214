// Per-row statistics of next-token logits: the numbers the entropy probe
// needs, computed in one pass over each row.
//
// For a row x[0..V) the kernels compute, with m = max x, S = sum e^(x-m) and
// D = sum e^(x-m)(x-m):
//   max_logit      = m
//   log_sum_exp    = m + ln S
//   entropy        = ln S - D / S           (Shannon entropy in nats)
//   end_think_mass = sum over the end-of-think ids of e^(x_id - m) / S
//   argmax         = first index holding m
// -inf logits contribute nothing (a row of only -inf has no distribution and
// is flagged); NaN or +inf logits are reported in `flags`, never hidden.
// docs/architecture.md#entropy-probe has the derivation and the error bounds.
//
// Thread-safety: the free functions are reentrant; they only read the logits
// and write the caller's output span. RowStatsBackend objects may be shared
// across threads only where their own comment says so.
// Ownership: views never own memory; the caller keeps logits and outputs
// alive for the duration of the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "meridian/error.h"
#include "meridian/types.h"

namespace meridian {

enum class LogitsDType : std::uint8_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

[[nodiscard]] std::size_t dtype_size(LogitsDType dtype) noexcept;
/// "fp32", "bf16", "fp16".
[[nodiscard]] std::string_view to_string(LogitsDType dtype) noexcept;
/// Accepts fp32/float32, bf16/bfloat16, fp16/float16/half.
[[nodiscard]] std::optional<LogitsDType> parse_dtype(std::string_view name) noexcept;

/// Bits of RowStats::flags.
enum RowFlag : std::uint32_t {
  kRowHasNaN = 1U << 0,     ///< a NaN logit: statistics are NaN
  kRowHasPosInf = 1U << 1,  ///< a +inf logit: statistics are NaN
  kRowAllNegInf = 1U << 2,  ///< every logit is -inf: no distribution (entropy 0, lse -inf)
};

/// Statistics of one row. Plain data with the same layout on the host and
/// on a CUDA device (24 bytes).
struct RowStats {
  float max_logit = 0;
  float log_sum_exp = 0;
  float entropy = 0;         ///< nats
  float end_think_mass = 0;  ///< probability on the end-of-think ids
  std::int32_t argmax = -1;
  std::uint32_t flags = 0;  ///< RowFlag bits

  /// False when the row held NaN or +inf (its statistics are NaN).
  [[nodiscard]] bool valid() const noexcept { return (flags & (kRowHasNaN | kRowHasPosInf)) == 0; }
};

/// Thrown for a malformed logits view or a backend that cannot run here.
class KernelError : public Error {
 public:
  using Error::Error;
};

/// A read-only [rows, row_stride] matrix of logits. Row r holds vocab_of(r)
/// valid entries; the rest of its stride is ignored (ragged batches).
struct LogitsView {
  const void* data = nullptr;  ///< host memory (CPU) or device memory (CUDA)
  LogitsDType dtype = LogitsDType::kFloat32;
  std::size_t rows = 0;
  std::size_t vocab = 0;                     ///< valid entries per row when row_vocab is empty
  std::size_t row_stride = 0;                ///< elements between row starts; 0 means vocab
  std::span<const std::uint32_t> row_vocab;  ///< optional per-row vocab sizes (size rows)

  [[nodiscard]] std::size_t stride() const noexcept { return row_stride == 0 ? vocab : row_stride; }
  [[nodiscard]] std::size_t vocab_of(std::size_t row) const noexcept {
    return row_vocab.empty() ? vocab : row_vocab[row];
  }
  /// Bytes of logits the kernels read (valid entries only).
  [[nodiscard]] std::size_t bytes_read() const noexcept;
  /// Throws KernelError naming the first problem (null data, empty rows,
  /// vocab larger than the stride, an end-of-think id outside a row, ...).
  void validate(std::span<const TokenId> end_think_ids, std::size_t out_rows) const;
};

/// Rows [first, first + count) of `view` as a view of their own (no copy).
[[nodiscard]] LogitsView rows_of(const LogitsView& view, std::size_t first, std::size_t count);

/// A run of rows [first, first + count) that one kernel call reads.
struct RowSpan {
  std::size_t first = 0;
  std::size_t count = 0;
  friend bool operator==(const RowSpan&, const RowSpan&) = default;
};

/// The spans covering `sorted_rows` (ascending, distinct), fewest first:
/// consecutive selected rows share a span, and so do two selected rows with
/// at most `max_gap` unselected rows between them. So the spans hold at most
/// (sorted_rows.size() - 1) * max_gap rows nobody asked for: the cost stays
/// bounded by the rows selected, never by how far apart they are.
[[nodiscard]] std::vector<RowSpan> cover_rows(std::span<const std::size_t> sorted_rows, std::size_t max_gap);

/// Computes one span of rows (a sub-view and its out entries).
using RowSpanKernel = std::function<void(const LogitsView& span_view, std::span<RowStats> out)>;

/// Statistics of the selected `rows` of `view` (any order, repeats allowed;
/// each < view.rows), out[i] for rows[i], each distinct row computed once:
/// one `kernel` call per span of cover_rows(distinct rows, max_gap). The CPU
/// passes max_gap 0 (only selected rows are read); CUDA a few rows, since a
/// launch costs more than reading them.
void compute_selected_rows(const LogitsView& view, std::span<const std::size_t> rows, std::size_t max_gap,
                           const RowSpanKernel& kernel, std::span<RowStats> out);

struct CpuRowStatsOptions {
  /// Threads used for one call; 0 means std::thread::hardware_concurrency().
  unsigned max_threads = 0;
  /// A thread is only added for at least this many bytes of logits, so small
  /// batches (a decode step's few rows) stay on the calling thread.
  std::size_t min_bytes_per_thread = std::size_t{8} << 20;
};

/// The Highway kernel (runtime SIMD dispatch), multithreaded over rows for
/// large batches. `out` must hold view.rows entries. Throws KernelError if
/// the view is malformed; never throws for odd values in the logits.
void compute_row_stats_cpu(const LogitsView& view, std::span<const TokenId> end_think_ids,
                           std::span<RowStats> out, const CpuRowStatsOptions& options = {});

/// Float64 scalar two-pass reference: the ground truth of the tests and the
/// naive baseline of the micro-benchmarks. Same contract as the kernel.
void compute_row_stats_reference(const LogitsView& view, std::span<const TokenId> end_think_ids,
                                 std::span<RowStats> out);

/// The SIMD target the CPU kernel dispatches to on this machine ("AVX2", ...).
[[nodiscard]] std::string_view cpu_simd_target();

/// Measures single-core streaming-read bandwidth over `bytes` bytes of
/// `data` (a vectorised sum; the baseline bench-probe compares against).
/// Returns the sum so the read cannot be optimised away.
float stream_read_sum(const void* data, std::size_t bytes) noexcept;

enum class ProbeDevice : std::uint8_t { kCpu = 0, kCuda = 1 };
[[nodiscard]] std::string_view to_string(ProbeDevice device) noexcept;

/// One interface over the CPU and CUDA kernels; the probe picks one at run
/// time (make_row_stats_backend). Thread-safety: the CPU backend may be used
/// from several threads at once; a CUDA backend is used from one thread at a
/// time (it owns a device workspace).
class RowStatsBackend {
 public:
  virtual ~RowStatsBackend() = default;
  [[nodiscard]] virtual ProbeDevice device() const noexcept = 0;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// `view.data` lives on this backend's device; `out` is host memory.
  /// `stream` is a cudaStream_t for CUDA (nullptr: the legacy default
  /// stream) and ignored on the CPU. Returns when `out` is filled.
  virtual void compute(const LogitsView& view, std::span<const TokenId> end_think_ids,
                       std::span<RowStats> out, void* stream) = 0;

 protected:
  RowStatsBackend() = default;
  RowStatsBackend(const RowStatsBackend&) = default;
  RowStatsBackend& operator=(const RowStatsBackend&) = default;
  RowStatsBackend(RowStatsBackend&&) = default;
  RowStatsBackend& operator=(RowStatsBackend&&) = default;
};

[[nodiscard]] std::unique_ptr<RowStatsBackend> make_cpu_row_stats_backend(CpuRowStatsOptions options = {});

/// Whether this build has the CUDA kernel and a CUDA device is visible.
[[nodiscard]] bool cuda_row_stats_available() noexcept;

/// kCpu: the CPU backend. kCuda: the CUDA backend, or KernelError saying why
/// it is unavailable (not built with CUDA, no device, driver error).
[[nodiscard]] std::unique_ptr<RowStatsBackend> make_row_stats_backend(ProbeDevice device,
                                                                      CpuRowStatsOptions cpu_options = {});

}  // namespace meridian
