// `meridian bench-probe`: times the row-statistics kernel on a [rows, vocab]
// batch and, in the same run on the same buffer, a streaming-read baseline
// (a vectorised sum) and the float64 scalar reference. Prints one JSON object.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meridian/row_stats.h"
#include "option_checks.h"
#if MERIDIAN_HAVE_CUDA
#include "meridian/cuda_row_stats.h"
#include <cuda_runtime.h>
#endif

namespace meridian::cli {
namespace {

struct BenchProbeOptions {
  std::size_t rows = 64;
  std::size_t vocab = 151936;
  std::string dtype = "fp32";
  unsigned threads = 1;
  double min_time_s = 1.0;
  std::string device = "cpu";
  std::uint64_t seed = 1;
  bool skip_reference = false;
};

using Clock = std::chrono::steady_clock;

// Bounds of the options: the batch is allocated (and filled) on the host, so
// its size is capped well below what a machine has, and every product below
// stays far from overflow.
constexpr std::uint64_t kMaxRows = 65536;
constexpr std::uint64_t kMaxVocab = std::uint64_t{1} << 32U;  // TokenId is 32-bit
constexpr std::uint64_t kMaxLogitsBytes = std::uint64_t{4} << 30U;
constexpr unsigned kMaxThreads = 1024;
constexpr double kMaxMinTimeS = 3600;

/// rows x vocab x dtype bytes, or a UsageError naming the options when the
/// product overflows or exceeds kMaxLogitsBytes.
std::size_t logits_bytes(const BenchProbeOptions& o, LogitsDType dtype) {
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
  const bool overflow = __builtin_mul_overflow(std::uint64_t{o.rows}, std::uint64_t{o.vocab}, &elements) ||
                        __builtin_mul_overflow(elements, std::uint64_t{dtype_size(dtype)}, &bytes);
  if (overflow || bytes > kMaxLogitsBytes) {
    throw UsageError(
        fmt::format("--rows {} x --vocab {} x {} bytes ({}) is {} bytes of logits; bench-probe allocates at "
                    "most {} bytes "
                    "(4 GiB)",
                    o.rows, o.vocab, dtype_size(dtype), o.dtype,
                    overflow ? std::string("more than 2^64") : fmt::format("{}", bytes), kMaxLogitsBytes));
  }
  return static_cast<std::size_t>(bytes);
}

/// Runs `fn` until `min_time_s` has passed (at least 3 times) after one
/// warm-up call; returns every call's seconds.
template <typename Fn>
std::vector<double> time_calls(double min_time_s, Fn&& fn) {
  fn();
  std::vector<double> seconds;
  const auto start = Clock::now();
  while (seconds.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < min_time_s) {
    const auto t0 = Clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Random logits (normal, sd 3: entropy ~ 9 nats over a 152k vocab), stored
/// as `dtype`, as raw bytes.
std::vector<std::uint8_t> make_logits(const BenchProbeOptions& o, LogitsDType dtype) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  const std::size_t n = o.rows * o.vocab;  // logits_bytes() bounded the product
  std::vector<std::uint8_t> bytes(n * dtype_size(dtype));
  for (std::size_t i = 0; i < n; ++i) {
    const float x = normal(rng);
    const auto bits = std::bit_cast<std::uint32_t>(x);
    if (dtype == LogitsDType::kFloat32) {
      std::memcpy(bytes.data() + i * 4, &x, 4);
    } else if (dtype == LogitsDType::kBFloat16) {
      const auto h = static_cast<std::uint16_t>((bits + 0x7FFFU + ((bits >> 16U) & 1U)) >> 16U);
      std::memcpy(bytes.data() + i * 2, &h, 2);
    } else {
      // |x| < 2^15 and normal: exponent rebias and a truncated mantissa suffice
      // for benchmark input.
      const std::uint32_t sign = (bits >> 16U) & 0x8000U;
      const int exponent = static_cast<int>((bits >> 23U) & 0xFFU) - 127 + 15;
      auto h = static_cast<std::uint16_t>(sign);
      if (exponent > 0) {
        h = static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exponent) << 10U) |
                                       ((bits >> 13U) & 0x3FFU));
      }
      std::memcpy(bytes.data() + i * 2, &h, 2);
    }
  }
  return bytes;
}

#if MERIDIAN_HAVE_CUDA
void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw KernelError(fmt::format("{}: {}", what, cudaGetErrorString(status)));
}

/// Median seconds of `fn` (enqueued on `stream`) over `reps` runs, by CUDA events.
template <typename Fn>
double time_device(cudaStream_t stream, int reps, Fn&& fn) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cuda_check(cudaEventCreate(&start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  fn();  // warm-up
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    cuda_check(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    cuda_check(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(static_cast<double>(ms) / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(seconds);
}

/// A CUDA graph of `calls` back-to-back enqueues of `enqueue(i)`, captured on `stream`.
template <typename Enqueue>
cudaGraphExec_t capture_calls(cudaStream_t stream, std::size_t calls, Enqueue&& enqueue) {
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (std::size_t i = 0; i < calls; ++i) enqueue(i);
  cudaGraph_t graph = nullptr;
  cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  return exec;
}

// Each timed call reads its own copy of the logits from a pool this large (5x an H100's 50 MB L2,
// 2.5x an H200's), as the engine's freshly written logits arrive, rather than re-reading a
// buffer that the previous call left in L2. Small batches would otherwise time the cache.
constexpr std::size_t kColdPoolBytes = std::size_t{256} << 20U;
// At least this many calls per graph, so one replay is long enough to time with events.
constexpr std::size_t kMinCallsPerGraph = 16;

/// The CUDA kernel against a device-to-device copy of the same bytes. Both are timed as graphs of
/// back-to-back calls (no host launch gaps, as behind an engine's forward pass), each call on a
/// different copy from a pool larger than L2. The copy reads and writes every byte, so its
/// bandwidth counts both; the kernel only reads.
int run_bench_probe_cuda(const BenchProbeOptions& o, LogitsView view, const std::vector<std::uint8_t>& bytes,
                         nlohmann::ordered_json& report) {
  cuda::CudaRowStatsKernel kernel;
  const std::size_t size = bytes.size();
  const std::size_t copies = std::max<std::size_t>(1, (kColdPoolBytes + size - 1) / size);
  const std::size_t calls = std::max(copies, kMinCallsPerGraph);
  unsigned char* pool = nullptr;
  unsigned char* sink = nullptr;
  RowStats* out = nullptr;
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&pool), copies * size), "cudaMalloc");
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&sink), copies * size), "cudaMalloc");
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&out), calls * o.rows * sizeof(RowStats)), "cudaMalloc");
  for (std::size_t c = 0; c < copies; ++c) {
    cuda_check(cudaMemcpy(pool + c * size, bytes.data(), size, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::vector<TokenId> end_ids{static_cast<TokenId>(o.vocab - 1)};
  view.data = pool;
  kernel.launch(view, end_ids, out, stream);  // sizes the workspace outside the capture
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaGraphExec_t probe_graph = capture_calls(stream, calls, [&](std::size_t i) {
    LogitsView v = view;
    v.data = pool + (i % copies) * size;
    kernel.launch(v, end_ids, out + i * o.rows, stream);
  });
  cudaGraphExec_t copy_graph = capture_calls(stream, calls, [&](std::size_t i) {
    const std::size_t at = (i % copies) * size;
    cuda_check(cudaMemcpyAsync(sink + at, pool + at, size, cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync");
  });
  const int reps = 20;
  const auto per_call = static_cast<double>(calls);
  const double kernel_s =
      time_device(stream, reps,
                  [&] { cuda_check(cudaGraphLaunch(probe_graph, stream), "cudaGraphLaunch"); }) /
      per_call;
  const double copy_s =
      time_device(stream, reps, [&] { cuda_check(cudaGraphLaunch(copy_graph, stream), "cudaGraphLaunch"); }) /
      per_call;
  const auto b = static_cast<double>(size);
  report["splits_per_row"] = kernel.splits_for(view);
  report["iterations"] = reps;
  report["calls_per_graph"] = calls;
  report["pool_bytes"] = copies * size;
  report["ns_per_row"] = kernel_s * 1e9 / static_cast<double>(o.rows);
  report["gb_per_s"] = b / kernel_s / 1e9;
  report["d2d_copy_gb_per_s"] = 2 * b / copy_s / 1e9;
  report["fraction_of_d2d_copy"] = (b / kernel_s) / (2 * b / copy_s);
  cudaGraphExecDestroy(copy_graph);
  cudaGraphExecDestroy(probe_graph);
  cudaStreamDestroy(stream);
  cudaFree(out);
  cudaFree(sink);
  cudaFree(pool);
  fmt::print("{}\n", report.dump(2));
  return 0;
}
#endif

int run_bench_probe(const BenchProbeOptions& o) {
  const auto dtype = parse_dtype(o.dtype);
  if (!dtype) throw UsageError(fmt::format("--dtype must be fp32, bf16 or fp16; got '{}'", o.dtype));
  const std::size_t size = logits_bytes(o, *dtype);
  std::vector<std::uint8_t> bytes;
  try {
    bytes = make_logits(o, *dtype);
  } catch (const std::bad_alloc&) {
    throw Error(
        fmt::format("cannot allocate {} bytes of logits for --rows {} x --vocab {} ({}): out of memory", size,
                    o.rows, o.vocab, o.dtype));
  }
  LogitsView view;
  view.data = bytes.data();
  view.dtype = *dtype;
  view.rows = o.rows;
  view.vocab = o.vocab;
  const std::vector<TokenId> end_ids{static_cast<TokenId>(o.vocab - 1)};
  std::vector<RowStats> out(o.rows);
  const auto bytes_per_call = static_cast<double>(view.bytes_read());

  nlohmann::ordered_json report;
  report["device"] = o.device;
  report["rows"] = o.rows;
  report["vocab"] = o.vocab;
  report["dtype"] = to_string(*dtype);
  report["bytes_per_call"] = bytes_per_call;

  if (o.device == "cuda") {
#if MERIDIAN_HAVE_CUDA
    return run_bench_probe_cuda(o, view, bytes, report);
#else
    throw KernelError("--device cuda: this build has no CUDA kernels");
#endif
  }

  const CpuRowStatsOptions cpu{.max_threads = o.threads, .min_bytes_per_thread = 1};
  const auto kernel = time_calls(o.min_time_s, [&] { compute_row_stats_cpu(view, end_ids, out, cpu); });
  volatile float sink = 0;
  const auto stream =
      time_calls(o.min_time_s, [&] { sink = sink + stream_read_sum(bytes.data(), bytes.size()); });
  const double kernel_s = median(kernel);
  const double stream_s = median(stream);
  report["threads"] = o.threads;
  report["simd_target"] = cpu_simd_target();
  report["iterations"] = kernel.size();
  report["ns_per_row"] = kernel_s * 1e9 / static_cast<double>(o.rows);
  report["gb_per_s"] = bytes_per_call / kernel_s / 1e9;
  report["stream_read_gb_per_s"] = bytes_per_call / stream_s / 1e9;
  report["fraction_of_stream_read"] = stream_s / kernel_s;
  if (!o.skip_reference) {
    const auto reference = time_calls(0.0, [&] { compute_row_stats_reference(view, end_ids, out); });
    const double reference_s = median(reference);
    report["reference_ns_per_row"] = reference_s * 1e9 / static_cast<double>(o.rows);
    report["speedup_vs_reference"] = reference_s / kernel_s;
  }
  report["mean_entropy_nats"] = [&] {
    compute_row_stats_cpu(view, end_ids, out, cpu);
    double sum = 0;
    for (const RowStats& s : out) sum += s.entropy;
    return sum / static_cast<double>(o.rows);
  }();
  fmt::print("{}\n", report.dump(2));
  return 0;
}

}  // namespace

std::function<int()> add_bench_probe(CLI::App& app) {
  auto options = std::make_shared<BenchProbeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-probe", "Time the entropy-probe kernel against a streaming-read baseline; prints JSON");
  cmd->add_option("--rows", options->rows, "rows (requests) per call; rows x vocab x dtype bytes <= 4 GiB")
      ->transform(integer_in(1, kMaxRows))
      ->capture_default_str();
  cmd->add_option("--vocab", options->vocab, "vocabulary size (entries per row)")
      ->transform(integer_in(1, kMaxVocab))
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "logits dtype: fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--threads", options->threads,
                  "CPU threads (1: single-core, as the bandwidth baseline; 0: one per hardware thread)")
      ->transform(integer_in(0, kMaxThreads))
      ->capture_default_str();
  cmd->add_option("--min-time", options->min_time_s, "seconds to time each variant")
      ->check(number_in(0, kMaxMinTimeS))
      ->capture_default_str();
  cmd->add_option("--device", options->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "seed of the random logits")
      ->transform(integer_in(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  cmd->add_flag("--skip-reference", options->skip_reference, "do not time the float64 scalar reference");
  return [options] { return run_bench_probe(*options); };
}

}  // namespace meridian::cli
