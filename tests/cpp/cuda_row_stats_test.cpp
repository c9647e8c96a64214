// The CUDA kernel against the CPU kernel (label "gpu"). The suites that need
// a device skip themselves, not fail, on a machine without one; the launch
// contract checks that fail before any CUDA call (workspace size, alignment,
// limits) run everywhere the CUDA build exists.
#include "meridian/cuda_row_stats.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "logits_fixtures.h"
#include "meridian/row_stats.h"
#include <cuda_runtime.h>

namespace meridian {
namespace {

using testing::EncodedLogits;
using testing::make_row;
using testing::RowShape;

class CudaRowStats : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

// Device memory of `bytes` bytes, optionally filled from the host.
struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes, const void* host = nullptr) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), cudaSuccess);
    if (host != nullptr) {
      EXPECT_EQ(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceMemory() { cudaFree(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&&) = delete;
  DeviceMemory& operator=(DeviceMemory&&) = delete;
  template <typename T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(ptr);
  }
};

// A stream created with the given flags, destroyed at scope exit.
struct Stream {
  cudaStream_t handle = nullptr;
  explicit Stream(unsigned flags = cudaStreamDefault) {
    EXPECT_EQ(cudaStreamCreateWithFlags(&handle, flags), cudaSuccess);
  }
  ~Stream() { cudaStreamDestroy(handle); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&&) = delete;
  Stream& operator=(Stream&&) = delete;
};

void expect_agree(const RowStats& gpu, const RowStats& cpu, std::size_t row) {
  EXPECT_EQ(gpu.flags, cpu.flags) << row;
  EXPECT_EQ(gpu.argmax, cpu.argmax) << row;
  if (!cpu.valid()) {
    EXPECT_TRUE(std::isnan(gpu.entropy)) << row;
    return;
  }
  const auto tol = [](double b) { return 1e-5 * std::max(1.0, std::fabs(b)); };
  EXPECT_LE(std::fabs(gpu.entropy - cpu.entropy), tol(cpu.entropy)) << row;
  if (!(cpu.flags & kRowAllNegInf)) {
    EXPECT_LE(std::fabs(gpu.log_sum_exp - cpu.log_sum_exp), tol(cpu.log_sum_exp)) << row;
  }
  EXPECT_LE(std::fabs(gpu.end_think_mass - cpu.end_think_mass), 1e-5) << row;
  EXPECT_EQ(gpu.max_logit, cpu.max_logit) << row;
}

std::vector<float> random_rows(std::size_t rows, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> floats;
  floats.reserve(rows * vocab);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = make_row(static_cast<RowShape>(r % 5), vocab, rng);
    floats.insert(floats.end(), row.begin(), row.end());
  }
  return floats;
}

std::vector<RowStats> cpu_stats(const LogitsView& host, std::span<const TokenId> ends) {
  std::vector<RowStats> out(host.rows);
  compute_row_stats_cpu(host, ends, out);
  return out;
}

std::vector<RowStats> download(const DeviceMemory& out, std::size_t rows) {
  std::vector<RowStats> host(rows);
  EXPECT_EQ(cudaMemcpy(host.data(), out.ptr, rows * sizeof(RowStats), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

void check_shape(std::size_t rows, std::size_t vocab, LogitsDType dtype, std::uint64_t seed) {
  std::vector<float> floats = random_rows(rows, vocab, seed);
  if (dtype == LogitsDType::kFloat16) {
    for (auto& x : floats) x = std::min(x, 60000.0F);
  }
  const EncodedLogits enc(floats, dtype);
  const LogitsView host = enc.view(rows, vocab);
  const std::vector<TokenId> ends{static_cast<TokenId>(vocab - 1), 0};
  const std::vector<RowStats> cpu = cpu_stats(host, ends);
  const DeviceMemory device(rows * vocab * dtype_size(dtype), enc.data());
  LogitsView dev = host;
  dev.data = device.ptr;
  const Stream stream;
  cuda::CudaRowStatsKernel kernel;
  std::vector<RowStats> gpu(rows);
  kernel.compute(dev, ends, gpu, stream.handle);
  for (std::size_t r = 0; r < rows; ++r) expect_agree(gpu[r], cpu[r], r);
}

TEST_F(CudaRowStats, AgreesWithCpuOnQwenVocab) {
  for (const auto dtype : {LogitsDType::kFloat32, LogitsDType::kBFloat16, LogitsDType::kFloat16}) {
    for (const std::size_t rows : {1UL, 5UL, 64UL, 256UL}) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " rows=" + std::to_string(rows));
      check_shape(rows, 151936, dtype, rows);
    }
  }
}

TEST_F(CudaRowStats, AgreesOnOddVocabSizes) {
  for (const std::size_t vocab : {1UL, 3UL, 255UL, 8193UL, 32001UL})
    check_shape(3, vocab, LogitsDType::kFloat32, vocab);
}

TEST_F(CudaRowStats, NaNAndAllNegInfRows) {
  const std::size_t vocab = 40000;
  std::vector<float> rows(3 * vocab, 0.0F);
  rows[123] = std::numeric_limits<float>::quiet_NaN();
  std::fill(rows.begin() + vocab, rows.begin() + 2 * vocab, -std::numeric_limits<float>::infinity());
  rows[2 * vocab + 39999] = std::numeric_limits<float>::infinity();
  const EncodedLogits enc(rows, LogitsDType::kFloat32);
  const DeviceMemory device(rows.size() * 4, enc.data());
  LogitsView dev = enc.view(3, vocab);
  dev.data = device.ptr;
  std::vector<RowStats> gpu(3);
  cuda::CudaRowStatsKernel kernel;
  kernel.compute(dev, {}, gpu, nullptr);
  EXPECT_EQ(gpu[0].flags, kRowHasNaN);
  EXPECT_EQ(gpu[1].flags, kRowAllNegInf);
  EXPECT_EQ(gpu[1].entropy, 0.0F);
  EXPECT_EQ(gpu[2].flags, kRowHasPosInf);
}

TEST_F(CudaRowStats, RaggedRowsAndBackendInterface) {
  const std::size_t stride = 20000;
  const std::vector<std::uint32_t> vocab{20000, 17, 12345};
  std::vector<float> data(3 * stride, std::numeric_limits<float>::quiet_NaN());
  std::mt19937_64 rng(5);
  for (std::size_t r = 0; r < 3; ++r) {
    const auto row = make_row(RowShape::kRandom, vocab[r], rng);
    std::copy(row.begin(), row.end(), data.begin() + static_cast<std::ptrdiff_t>(r * stride));
  }
  LogitsView host;
  host.data = data.data();
  host.rows = 3;
  host.row_stride = stride;
  host.row_vocab = vocab;
  const std::vector<RowStats> cpu = cpu_stats(host, {});
  const DeviceMemory device(data.size() * 4, data.data());
  LogitsView dev = host;
  dev.data = device.ptr;
  auto backend = make_row_stats_backend(ProbeDevice::kCuda);
  EXPECT_EQ(backend->device(), ProbeDevice::kCuda);
  std::vector<RowStats> gpu(3);
  backend->compute(dev, {}, gpu, nullptr);
  for (std::size_t r = 0; r < 3; ++r) expect_agree(gpu[r], cpu[r], r);
}

// The engine-grade launch on a non-blocking stream with a caller-owned,
// deliberately dirty workspace (the launch clears what it uses).
TEST_F(CudaRowStats, EngineLaunchOnNonBlockingStream) {
  const std::size_t rows = 8;
  const std::size_t vocab = 151936;
  const std::vector<float> floats = random_rows(rows, vocab, 11);
  const EncodedLogits enc(floats, LogitsDType::kBFloat16);
  const std::vector<TokenId> ends{151668};
  const std::vector<RowStats> cpu = cpu_stats(enc.view(rows, vocab), ends);
  const DeviceMemory logits(floats.size() * 2, enc.data());
  const DeviceMemory out(rows * sizeof(RowStats));
  const std::size_t bytes = cuda::row_stats_workspace_bytes(rows, vocab);
  ASSERT_GT(bytes, 0U);
  const DeviceMemory workspace(bytes);
  ASSERT_EQ(cudaMemset(workspace.ptr, 0xAB, bytes), cudaSuccess);
  const Stream stream(cudaStreamNonBlocking);
  LogitsView dev = enc.view(rows, vocab);
  dev.data = logits.ptr;
  const int sms = cuda::multiprocessor_count();
  ASSERT_GT(cuda::row_stats_splits(rows, vocab, sms), 1U) << "the test must exercise the split path";
  for (int repeat = 0; repeat < 3; ++repeat) {
    cuda::launch_row_stats(dev, ends, out.as<RowStats>(), workspace.ptr, bytes, stream.handle, sms);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream.handle), cudaSuccess);
  const std::vector<RowStats> gpu = download(out, rows);
  for (std::size_t r = 0; r < rows; ++r) expect_agree(gpu[r], cpu[r], r);
}

// Captured into a CUDA graph, replayed twice over different logits written
// into the same device buffer: the memset node resets the arrival counters
// on every replay.
TEST_F(CudaRowStats, GraphCaptureAndReplay) {
  const std::size_t rows = 4;
  const std::size_t vocab = 151936;
  const std::vector<TokenId> ends{151668};
  const std::vector<float> first = random_rows(rows, vocab, 21);
  const std::vector<float> second = random_rows(rows, vocab, 22);
  const DeviceMemory logits(first.size() * 4, first.data());
  const DeviceMemory out(rows * sizeof(RowStats));
  const std::size_t bytes = cuda::row_stats_workspace_bytes(rows, vocab);
  const DeviceMemory workspace(bytes);
  const Stream stream(cudaStreamNonBlocking);
  LogitsView dev;
  dev.data = logits.ptr;
  dev.rows = rows;
  dev.vocab = vocab;
  const int sms = cuda::multiprocessor_count();

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream.handle, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cuda::launch_row_stats(dev, ends, out.as<RowStats>(), workspace.ptr, bytes, stream.handle, sms);
  ASSERT_EQ(cudaStreamEndCapture(stream.handle, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const std::vector<float>* data : {&first, &second}) {
    ASSERT_EQ(
        cudaMemcpyAsync(logits.ptr, data->data(), data->size() * 4, cudaMemcpyHostToDevice, stream.handle),
        cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.handle), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.handle), cudaSuccess);
    LogitsView host = dev;
    host.data = data->data();
    const std::vector<RowStats> cpu = cpu_stats(host, ends);
    const std::vector<RowStats> gpu = download(out, rows);
    for (std::size_t r = 0; r < rows; ++r) expect_agree(gpu[r], cpu[r], r);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Two streams at once, each with its own workspace and output, both enqueued
// before either is waited for.
TEST_F(CudaRowStats, TwoStreamsWithSeparateWorkspaces) {
  const std::size_t rows = 16;
  const std::size_t vocab = 151936;
  const std::vector<TokenId> ends{151668};
  const std::vector<float> a = random_rows(rows, vocab, 31);
  const std::vector<float> b = random_rows(rows, vocab, 32);
  const DeviceMemory logits_a(a.size() * 4, a.data());
  const DeviceMemory logits_b(b.size() * 4, b.data());
  const DeviceMemory out_a(rows * sizeof(RowStats));
  const DeviceMemory out_b(rows * sizeof(RowStats));
  const std::size_t bytes = cuda::row_stats_workspace_bytes(rows, vocab);
  const DeviceMemory ws_a(bytes);
  const DeviceMemory ws_b(bytes);
  const Stream stream_a(cudaStreamNonBlocking);
  const Stream stream_b(cudaStreamNonBlocking);
  const int sms = cuda::multiprocessor_count();
  LogitsView view;
  view.rows = rows;
  view.vocab = vocab;
  LogitsView dev_a = view;
  dev_a.data = logits_a.ptr;
  LogitsView dev_b = view;
  dev_b.data = logits_b.ptr;
  for (int repeat = 0; repeat < 4; ++repeat) {
    cuda::launch_row_stats(dev_a, ends, out_a.as<RowStats>(), ws_a.ptr, bytes, stream_a.handle, sms);
    cuda::launch_row_stats(dev_b, ends, out_b.as<RowStats>(), ws_b.ptr, bytes, stream_b.handle, sms);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_a.handle), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_b.handle), cudaSuccess);
  LogitsView host_a = view;
  host_a.data = a.data();
  LogitsView host_b = view;
  host_b.data = b.data();
  const std::vector<RowStats> cpu_a = cpu_stats(host_a, ends);
  const std::vector<RowStats> cpu_b = cpu_stats(host_b, ends);
  const std::vector<RowStats> gpu_a = download(out_a, rows);
  const std::vector<RowStats> gpu_b = download(out_b, rows);
  for (std::size_t r = 0; r < rows; ++r) {
    expect_agree(gpu_a[r], cpu_a[r], r);
    expect_agree(gpu_b[r], cpu_b[r], r);
  }
}

TEST_F(CudaRowStats, RaggedViewInCapturingStreamIsRefused) {
  const std::vector<std::uint32_t> vocab{100, 50};
  const DeviceMemory logits(200 * 4);
  const DeviceMemory out(2 * sizeof(RowStats));
  LogitsView dev;
  dev.data = logits.ptr;
  dev.rows = 2;
  dev.row_stride = 100;
  dev.row_vocab = vocab;
  const std::size_t bytes = cuda::row_stats_workspace_bytes(dev);
  const DeviceMemory workspace(bytes);
  const Stream stream(cudaStreamNonBlocking);
  ASSERT_EQ(cudaStreamBeginCapture(stream.handle, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_THROW(cuda::launch_row_stats(dev, {}, out.as<RowStats>(), workspace.ptr, bytes, stream.handle,
                                      cuda::multiprocessor_count()),
               KernelError);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream.handle, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
}

TEST_F(CudaRowStats, WrapperReserveThenCapture) {
  const std::size_t rows = 2;
  const std::size_t vocab = 151936;
  const std::vector<float> floats = random_rows(rows, vocab, 41);
  const DeviceMemory logits(floats.size() * 4, floats.data());
  const DeviceMemory out(rows * sizeof(RowStats));
  cuda::CudaRowStatsKernel kernel;
  kernel.reserve(rows, vocab);
  EXPECT_GE(kernel.workspace_bytes(), cuda::row_stats_workspace_bytes(rows, vocab));
  const Stream stream(cudaStreamNonBlocking);
  LogitsView dev;
  dev.data = logits.ptr;
  dev.rows = rows;
  dev.vocab = vocab;
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream.handle, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  kernel.launch(dev, {}, out.as<RowStats>(), stream.handle);
  ASSERT_EQ(cudaStreamEndCapture(stream.handle, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream.handle), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.handle), cudaSuccess);
  LogitsView host = dev;
  host.data = floats.data();
  const std::vector<RowStats> cpu = cpu_stats(host, {});
  const std::vector<RowStats> gpu = download(out, rows);
  for (std::size_t r = 0; r < rows; ++r) expect_agree(gpu[r], cpu[r], r);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CudaRowStatsAvailability, ReportsNoDeviceClearly) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_FALSE(cuda_row_stats_available());
  try {
    cuda::CudaRowStatsKernel kernel;
    FAIL() << "constructed a CUDA kernel without a device";
  } catch (const KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

// ---- The launch contract: checked on the host before any CUDA call. ----

// A stand-in for device memory: these launches fail before reading it.
alignas(16) const float kNotRead[16] = {};

LogitsView contract_view(std::size_t rows, std::size_t vocab) {
  LogitsView view;
  view.data = kNotRead;
  view.rows = rows;
  view.vocab = vocab;
  return view;
}

std::string launch_error(const LogitsView& view, void* workspace, std::size_t bytes, int sm_count = 132,
                         std::span<const TokenId> ends = {}) {
  auto* out = reinterpret_cast<RowStats*>(std::uintptr_t{256});
  try {
    cuda::launch_row_stats(view, ends, out, workspace, bytes, nullptr, sm_count);
  } catch (const KernelError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaRowStatsContract, WorkspaceBytesCoverEverySplitCount) {
  EXPECT_EQ(cuda::row_stats_workspace_bytes(0, 151936), 0U);
  EXPECT_EQ(cuda::row_stats_workspace_bytes(64, 16383), 0U) << "one block per row needs no workspace";
  EXPECT_GT(cuda::row_stats_workspace_bytes(64, 16383, true), 0U) << "ragged sizes are staged";
  for (const std::size_t rows : {1UL, 7UL, 256UL}) {
    for (const int sms : {1, 66, 132, 1000}) {
      const unsigned splits = cuda::row_stats_splits(rows, 151936, sms);
      EXPECT_GE(splits, 1U);
      EXPECT_LE(splits, 151936U / 8192U);
      // partials (24 bytes per row and split) plus one arrival counter per row
      EXPECT_GE(cuda::row_stats_workspace_bytes(rows, 151936), rows * (splits * 24 + 4));
    }
  }
  EXPECT_EQ(cuda::row_stats_splits(1024, 151936, 132), 1U) << "enough rows to fill the GPU";
  // About 4 blocks per SM, rounded down so that no second, mostly empty wave starts.
  EXPECT_EQ(cuda::row_stats_splits(256, 151936, 132), 2U);
  EXPECT_EQ(cuda::row_stats_splits(64, 151936, 132), 8U);
  EXPECT_EQ(cuda::row_stats_splits(1, 151936, 132), 18U) << "at most one split per 8192 logits";
  EXPECT_EQ(cuda::row_stats_splits(600, 151936, 132), 1U);
  LogitsView ragged = contract_view(2, 0);
  const std::vector<std::uint32_t> sizes{151936, 10};
  ragged.row_stride = 151936;
  ragged.row_vocab = sizes;
  EXPECT_EQ(cuda::row_stats_workspace_bytes(ragged), cuda::row_stats_workspace_bytes(2, 151936, true));
}

TEST(CudaRowStatsContract, WorkspaceTooSmallNamesRequiredAndGivenBytes) {
  const LogitsView view = contract_view(256, 151936);
  const std::size_t need = cuda::row_stats_workspace_bytes(256, 151936);
  alignas(16) static unsigned char fake[16];
  const std::string message = launch_error(view, fake, need - 1);
  EXPECT_NE(message.find("workspace too small"), std::string::npos) << message;
  EXPECT_NE(message.find("requires " + std::to_string(need) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("given " + std::to_string(need - 1)), std::string::npos) << message;
  EXPECT_NE(launch_error(view, nullptr, need).find("workspace is null"), std::string::npos);
}

TEST(CudaRowStatsContract, RejectsMisalignedWorkspaceAndBadArguments) {
  const LogitsView view = contract_view(4, 151936);
  const std::size_t need = cuda::row_stats_workspace_bytes(4, 151936);
  auto* misaligned = reinterpret_cast<void*>(std::uintptr_t{4096 + 4});
  EXPECT_NE(launch_error(view, misaligned, need).find("aligned"), std::string::npos);
  auto* aligned = reinterpret_cast<void*>(std::uintptr_t{4096});
  EXPECT_NE(launch_error(view, aligned, need, 0).find("sm_count"), std::string::npos);
  const std::vector<TokenId> nine(9, 1);
  EXPECT_NE(launch_error(view, aligned, need, 132, nine).find("at most 8 end-of-think ids"),
            std::string::npos);
  EXPECT_NE(launch_error(contract_view(70000, 4), aligned, 1 << 20).find("at most 65535 rows"),
            std::string::npos);
  const std::vector<TokenId> outside{151936};
  EXPECT_NE(launch_error(view, aligned, need, 132, outside).find("end_think_ids[0] = 151936"),
            std::string::npos);
}

}  // namespace
}  // namespace meridian
