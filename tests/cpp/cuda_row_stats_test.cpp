// The CUDA kernel against the CPU kernel (label "gpu"). Skipped, not failed,
// on a machine without a CUDA device; built wherever nvcc is.
#include "meridian/cuda_row_stats.h"

#include <cmath>
#include <limits>
#include <random>
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

// Copies `bytes` of host data to a fresh device buffer.
struct DeviceCopy {
  void* ptr = nullptr;
  DeviceCopy(const void* host, std::size_t bytes) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(ptr); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
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

void check_shape(std::size_t rows, std::size_t vocab, LogitsDType dtype, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> floats;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = make_row(static_cast<RowShape>(r % 5), vocab, rng);
    floats.insert(floats.end(), row.begin(), row.end());
  }
  if (dtype == LogitsDType::kFloat16) {
    for (auto& x : floats) x = std::min(x, 60000.0F);
  }
  const EncodedLogits enc(floats, dtype);
  const LogitsView host = enc.view(rows, vocab);
  const std::vector<TokenId> ends{static_cast<TokenId>(vocab - 1), 0};
  std::vector<RowStats> cpu(rows);
  compute_row_stats_cpu(host, ends, cpu);
  const DeviceCopy device(enc.data(), rows * vocab * dtype_size(dtype));
  LogitsView dev = host;
  dev.data = device.ptr;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::CudaRowStatsKernel kernel;
  std::vector<RowStats> gpu(rows);
  kernel.compute(dev, ends, gpu, stream);
  cudaStreamDestroy(stream);
  for (std::size_t r = 0; r < rows; ++r) expect_agree(gpu[r], cpu[r], r);
}

TEST_F(CudaRowStats, AgreesWithCpuOnQwenVocab) {
  for (const auto dtype : {LogitsDType::kFloat32, LogitsDType::kBFloat16, LogitsDType::kFloat16}) {
    for (const std::size_t rows : {1UL, 5UL, 64UL}) {
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
  const DeviceCopy device(enc.data(), rows.size() * 4);
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
  std::vector<RowStats> cpu(3);
  compute_row_stats_cpu(host, {}, cpu);
  const DeviceCopy device(data.data(), data.size() * 4);
  LogitsView dev = host;
  dev.data = device.ptr;
  auto backend = make_row_stats_backend(ProbeDevice::kCuda);
  EXPECT_EQ(backend->device(), ProbeDevice::kCuda);
  std::vector<RowStats> gpu(3);
  backend->compute(dev, {}, gpu, nullptr);
  for (std::size_t r = 0; r < 3; ++r) expect_agree(gpu[r], cpu[r], r);
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

}  // namespace
}  // namespace meridian
