// The CPU row-statistics kernel against closed forms and the float64
// reference, including the rows that broke the seeds' kernels (-inf, NaN,
// bf16/fp16, several rows, ragged vocab sizes).
#include "meridian/row_stats.h"

#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "logits_fixtures.h"
#include "meridian/dlpack_view.h"

namespace meridian {
namespace {

using testing::EncodedLogits;
using testing::make_row;
using testing::RowShape;

constexpr float kInf = std::numeric_limits<float>::infinity();

RowStats one_row(const std::vector<float>& row, std::vector<TokenId> ends = {}) {
  LogitsView v;
  v.data = row.data();
  v.rows = 1;
  v.vocab = row.size();
  RowStats out;
  compute_row_stats_cpu(v, ends, {&out, 1});
  return out;
}

// |a - b| <= tol * max(1, |b|): absolute near zero, relative for large values.
void expect_close(double a, double b, double tol, const char* what) {
  EXPECT_LE(std::fabs(a - b), tol * std::max(1.0, std::fabs(b))) << what << ": " << a << " vs " << b;
}

void expect_matches(const RowStats& got, const RowStats& want, double tol) {
  EXPECT_EQ(got.flags, want.flags);
  EXPECT_EQ(got.argmax, want.argmax);
  if (!want.valid()) {
    EXPECT_TRUE(std::isnan(got.entropy));
    return;
  }
  expect_close(got.max_logit, want.max_logit, 0.0, "max");
  expect_close(got.log_sum_exp, want.log_sum_exp, tol, "log_sum_exp");
  expect_close(got.entropy, want.entropy, tol, "entropy");
  expect_close(got.end_think_mass, want.end_think_mass, tol, "end_think_mass");
}

TEST(RowStats, ValidatingRowsAlikeIsOneCheckNotOnePerRow) {
  // Issue 27: a view of 2^40 rows was checked row by row (hours with the GIL
  // held). Without per-row vocab sizes every row is alike: one check, and a
  // bad end id is still caught; bytes_read() needs no loop either.
  const std::vector<float> row(16, 0.0F);
  LogitsView v;
  v.data = row.data();
  v.rows = std::size_t{1} << 40;
  v.vocab = 16;
  const std::vector<TokenId> ok{3};
  EXPECT_NO_THROW(v.validate(ok, v.rows));
  EXPECT_EQ(v.bytes_read(), (std::size_t{1} << 40) * 16 * sizeof(float));
  const std::vector<TokenId> outside{16};
  EXPECT_THROW(v.validate(outside, v.rows), KernelError);
}

TEST(RowStats, UniformRowHasEntropyLnV) {
  for (const std::size_t v : {1UL, 7UL, 1000UL, 151936UL}) {
    const RowStats s = one_row(std::vector<float>(v, 0.5F), {0});
    EXPECT_NEAR(s.entropy, std::log(static_cast<double>(v)), 1e-5) << v;
    EXPECT_NEAR(s.log_sum_exp, 0.5 + std::log(static_cast<double>(v)), 1e-5) << v;
    EXPECT_NEAR(s.end_think_mass, 1.0 / static_cast<double>(v), 1e-7) << v;
    EXPECT_EQ(s.argmax, 0);  // first index of the max
  }
}

TEST(RowStats, OneHotRowHasZeroEntropyAndAllMassOnIt) {
  std::vector<float> row(5000, -kInf);
  row[4321] = 3.0F;
  const RowStats s = one_row(row, {4321, 7});
  EXPECT_NEAR(s.entropy, 0.0F, 1e-7);
  EXPECT_FLOAT_EQ(s.log_sum_exp, 3.0F);
  EXPECT_FLOAT_EQ(s.end_think_mass, 1.0F);
  EXPECT_EQ(s.argmax, 4321);
  EXPECT_TRUE(s.valid());
}

TEST(RowStats, TwoWayRowMatchesClosedForm) {
  // p = (1/(1+e), e/(1+e)): H = ln(1+e) - e/(1+e).
  std::vector<float> row(2000, -kInf);
  row[10] = 0.0F;
  row[1999] = 1.0F;  // in the scalar tail for most vector widths
  const RowStats s = one_row(row, {10});
  const double e = std::exp(1.0);
  EXPECT_NEAR(s.entropy, std::log1p(e) - e / (1 + e), 1e-6);
  EXPECT_NEAR(s.end_think_mass, 1 / (1 + e), 1e-6);
  EXPECT_EQ(s.argmax, 1999);
}

TEST(RowStats, AllNegInfRowIsFlaggedNotNaN) {
  const RowStats s = one_row(std::vector<float>(300, -kInf), {1});
  EXPECT_TRUE(s.flags & kRowAllNegInf);
  EXPECT_TRUE(s.valid());
  EXPECT_EQ(s.entropy, 0.0F);
  EXPECT_EQ(s.log_sum_exp, -kInf);
  EXPECT_EQ(s.end_think_mass, 0.0F);
  EXPECT_EQ(s.argmax, -1);
}

TEST(RowStats, NaNAndPosInfAreReported) {
  for (const std::size_t at : {0UL, 500UL, 1023UL, 2999UL}) {
    std::vector<float> row(3000, 1.0F);
    row[at] = std::numeric_limits<float>::quiet_NaN();
    const RowStats s = one_row(row);
    EXPECT_EQ(s.flags, kRowHasNaN) << at;
    EXPECT_FALSE(s.valid());
    EXPECT_TRUE(std::isnan(s.entropy));
    row[at] = kInf;
    const RowStats t = one_row(row);
    EXPECT_EQ(t.flags, kRowHasPosInf) << at;
    EXPECT_TRUE(std::isnan(t.log_sum_exp));
  }
}

TEST(RowStats, ArgmaxIsTheFirstIndexOfTheMaxAcrossChunks) {
  std::vector<float> row(5000, 0.0F);
  row[3000] = 2.0F;
  row[4000] = 2.0F;
  row[4999] = 2.0F;
  EXPECT_EQ(one_row(row).argmax, 3000);
}

TEST(RowStats, RaggedRowsAndStridesReadOnlyTheirOwnEntries) {
  // Three rows in a stride of 1100; the entries past each row's vocab are
  // poison that must never be read.
  const std::array<std::uint32_t, 3> vocab{1100, 37, 1000};
  std::vector<float> data(3 * 1100, std::numeric_limits<float>::quiet_NaN());
  std::mt19937_64 rng(7);
  for (std::size_t r = 0; r < 3; ++r) {
    const auto row = make_row(RowShape::kRandom, vocab[r], rng);
    std::copy(row.begin(), row.end(), data.begin() + static_cast<std::ptrdiff_t>(r * 1100));
  }
  LogitsView v;
  v.data = data.data();
  v.rows = 3;
  v.row_stride = 1100;
  v.row_vocab = vocab;
  std::array<RowStats, 3> got{};
  std::array<RowStats, 3> want{};
  const std::array<TokenId, 1> ends{5};
  compute_row_stats_cpu(v, ends, got);
  compute_row_stats_reference(v, ends, want);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(got[r].valid()) << r;
    expect_matches(got[r], want[r], 1e-5);
  }
}

TEST(RowStats, ThreadedCallEqualsSingleThreaded) {
  std::mt19937_64 rng(11);
  const std::size_t rows = 9;
  const std::size_t vocab = 20011;
  std::vector<float> data;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = make_row(static_cast<RowShape>(r % 5), vocab, rng);
    data.insert(data.end(), row.begin(), row.end());
  }
  LogitsView v;
  v.data = data.data();
  v.rows = rows;
  v.vocab = vocab;
  std::vector<RowStats> one(rows);
  std::vector<RowStats> many(rows);
  compute_row_stats_cpu(v, {}, one, {.max_threads = 1});
  compute_row_stats_cpu(v, {}, many, {.max_threads = 4, .min_bytes_per_thread = 1});
  for (std::size_t r = 0; r < rows; ++r) {
    EXPECT_EQ(one[r].entropy, many[r].entropy);  // same code per row: bit-identical
    EXPECT_EQ(one[r].argmax, many[r].argmax);
  }
}

TEST(RowStats, SixteenBitInputsMatchTheReferenceOnTheSameValues) {
  std::mt19937_64 rng(3);
  for (const auto dtype : {LogitsDType::kBFloat16, LogitsDType::kFloat16}) {
    for (const auto shape :
         {RowShape::kRandom, RowShape::kPeaked, RowShape::kUniform, RowShape::kWithNegInf}) {
      const std::size_t vocab = 151936;
      const auto floats = make_row(shape, vocab, rng);
      const EncodedLogits enc(floats, dtype);
      const LogitsView v = enc.view(1, vocab);
      RowStats got;
      RowStats want;
      const std::array<TokenId, 1> ends{151668};
      compute_row_stats_cpu(v, ends, {&got, 1});
      compute_row_stats_reference(v, ends, {&want, 1});
      expect_matches(got, want, 1e-5);
      // Against the unrounded fp32 row, within the 16-bit format's precision.
      const RowStats exact = one_row(floats, {151668});
      const double precision = dtype == LogitsDType::kBFloat16 ? 4e-2 : 4e-3;
      EXPECT_NEAR(got.entropy, exact.entropy, precision * std::max(1.0F, exact.entropy)) << to_string(dtype);
    }
  }
}

TEST(RowStats, SixteenBitSpecialValuesDecode) {
  // fp16: -inf (0xFC00), NaN (0x7E00), a subnormal (0x0001 = 2^-24), 1.0 (0x3C00).
  const std::vector<std::uint16_t> fp16{0xFC00, 0x0001, 0x3C00, 0x3C00};
  LogitsView v;
  v.data = fp16.data();
  v.dtype = LogitsDType::kFloat16;
  v.rows = 1;
  v.vocab = fp16.size();
  RowStats s;
  compute_row_stats_cpu(v, {}, {&s, 1});
  const double e = std::exp(std::ldexp(1.0, -24) - 1.0);  // the subnormal's weight relative to 1.0
  const double total = 2 + e;
  const double h = -(2 * (1 / total) * std::log(1 / total) + (e / total) * std::log(e / total));
  EXPECT_NEAR(s.entropy, h, 1e-6);
  EXPECT_EQ(s.argmax, 2);
  const std::vector<std::uint16_t> nan_row{0x3C00, 0x7E00};
  v.data = nan_row.data();
  v.vocab = 2;
  compute_row_stats_cpu(v, {}, {&s, 1});
  EXPECT_EQ(s.flags, kRowHasNaN);
}

TEST(RowStats, MalformedViewsAreRejectedWithTheReason) {
  std::vector<float> row(10, 0.0F);
  RowStats out;
  LogitsView v;
  v.data = row.data();
  v.rows = 1;
  v.vocab = 10;
  const std::array<TokenId, 1> far{10};
  EXPECT_THROW(
      {
        try {
          compute_row_stats_cpu(v, far, {&out, 1});
        } catch (const KernelError& e) {
          EXPECT_STREQ(e.what(), "logits: end_think_ids[0] = 10 is outside row 0 (vocab size 10)");
          throw;
        }
      },
      KernelError);
  LogitsView null_data = v;
  null_data.data = nullptr;
  EXPECT_THROW(compute_row_stats_cpu(null_data, {}, {&out, 1}), KernelError);
  LogitsView zero_vocab = v;
  zero_vocab.vocab = 0;
  EXPECT_THROW(compute_row_stats_cpu(zero_vocab, {}, {&out, 1}), KernelError);
  LogitsView too_wide = v;
  too_wide.row_stride = 5;
  EXPECT_THROW(compute_row_stats_cpu(too_wide, {}, {&out, 1}), KernelError);
  EXPECT_THROW(compute_row_stats_cpu(v, {}, {}), KernelError);  // no room for the output
  LogitsView empty;
  compute_row_stats_cpu(empty, {}, {});  // no rows: nothing to do, not an error
}

TEST(RowStats, DlpackTensorsBecomeViews) {
  std::vector<float> data(2 * 8, 0.0F);
  std::array<std::int64_t, 2> shape{2, 6};
  std::array<std::int64_t, 2> strides{8, 1};
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape.data();
  t.strides = strides.data();
  ProbeDevice device = ProbeDevice::kCuda;
  const LogitsView v = logits_view_from_dlpack(t, &device);
  EXPECT_EQ(device, ProbeDevice::kCpu);
  EXPECT_EQ(v.rows, 2U);
  EXPECT_EQ(v.vocab, 6U);
  EXPECT_EQ(v.stride(), 8U);
  t.dtype = {kDLBfloat, 16, 1};
  EXPECT_EQ(logits_view_from_dlpack(t).dtype, LogitsDType::kBFloat16);
  t.device = {kDLCUDA, 0};
  (void)logits_view_from_dlpack(t, &device);
  EXPECT_EQ(device, ProbeDevice::kCuda);
  t.dtype = {kDLInt, 32, 1};
  EXPECT_THROW((void)logits_view_from_dlpack(t), KernelError);
  t.dtype = {kDLFloat, 32, 1};
  strides = {1, 2};
  EXPECT_THROW((void)logits_view_from_dlpack(t), KernelError);  // vocab not contiguous
}

TEST(RowStats, EmptyDlpackTensorsIgnoreTheirStrides) {
  // NumPy 2.5 exports a [0, vocab] array with strides (0, 0); it holds nothing to read.
  std::array<std::int64_t, 2> shape{0, 151936};
  std::array<std::int64_t, 2> strides{0, 0};
  DLTensor t{};
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape.data();
  t.strides = strides.data();
  const LogitsView v = logits_view_from_dlpack(t);
  EXPECT_EQ(v.rows, 0U);
  EXPECT_EQ(v.vocab, 151936U);
  shape = {3, 151936};  // the same strides with rows to read are still refused
  EXPECT_THROW((void)logits_view_from_dlpack(t), KernelError);
}

TEST(RowStats, BackendSelection) {
  auto cpu = make_row_stats_backend(ProbeDevice::kCpu);
  EXPECT_EQ(cpu->device(), ProbeDevice::kCpu);
  std::vector<float> row(100, 0.0F);
  LogitsView v;
  v.data = row.data();
  v.rows = 1;
  v.vocab = 100;
  RowStats out;
  cpu->compute(v, {}, {&out, 1}, nullptr);
  EXPECT_NEAR(out.entropy, std::log(100.0), 1e-6);
  if (!cuda_row_stats_available()) {
    // Without a usable GPU the CUDA backend says so instead of pretending.
    EXPECT_THROW((void)make_row_stats_backend(ProbeDevice::kCuda), KernelError);
  }
  EXPECT_FALSE(cpu_simd_target().empty());
}

TEST(RowStats, DtypeNames) {
  EXPECT_EQ(parse_dtype("bf16"), LogitsDType::kBFloat16);
  EXPECT_EQ(parse_dtype("half"), LogitsDType::kFloat16);
  EXPECT_EQ(parse_dtype("fp32"), LogitsDType::kFloat32);
  EXPECT_FALSE(parse_dtype("int8").has_value());
  EXPECT_EQ(to_string(LogitsDType::kBFloat16), "bf16");
}

// Property: for any shape, vocab size, row count and dtype, the SIMD kernel
// agrees with the float64 reference on the same input values within 1e-5.
RC_GTEST_PROP(RowStatsProperty, AgreesWithFloat64Reference, ()) {
  const auto shape = *rc::gen::element(RowShape::kRandom, RowShape::kPeaked, RowShape::kUniform,
                                       RowShape::kWithNegInf, RowShape::kLargeMagnitude);
  const auto dtype = *rc::gen::element(LogitsDType::kFloat32, LogitsDType::kBFloat16, LogitsDType::kFloat16);
  const std::size_t vocab =
      *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 80), rc::gen::inRange<std::size_t>(80, 5000),
                      rc::gen::element<std::size_t>(32000, 151936));
  const std::size_t rows = *rc::gen::inRange<std::size_t>(1, 4);
  const std::size_t pad = *rc::gen::inRange<std::size_t>(0, 9);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  std::mt19937_64 rng(seed);
  std::vector<float> floats((vocab + pad) * rows, std::numeric_limits<float>::quiet_NaN());
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = make_row(shape, vocab, rng);
    std::copy(row.begin(), row.end(), floats.begin() + static_cast<std::ptrdiff_t>(r * (vocab + pad)));
  }
  if (dtype == LogitsDType::kFloat16 && shape == RowShape::kLargeMagnitude) {
    for (auto& x : floats) x = std::isnan(x) ? x : std::min(x, 60000.0F);
  }
  const EncodedLogits enc(floats, dtype);
  const LogitsView v = enc.view(rows, vocab, vocab + pad);
  std::vector<TokenId> ends{static_cast<TokenId>(vocab - 1)};
  std::vector<RowStats> got(rows);
  std::vector<RowStats> want(rows);
  compute_row_stats_cpu(v, ends, got);
  compute_row_stats_reference(v, ends, want);
  for (std::size_t r = 0; r < rows; ++r) {
    RC_ASSERT(got[r].flags == want[r].flags);
    RC_ASSERT(got[r].argmax == want[r].argmax);
    RC_ASSERT(!std::isnan(got[r].entropy));
    const auto tol = [](double b) { return 1e-5 * std::max(1.0, std::fabs(b)); };
    RC_ASSERT(std::fabs(got[r].entropy - want[r].entropy) <= tol(want[r].entropy));
    if (!(want[r].flags & kRowAllNegInf)) {
      RC_ASSERT(std::fabs(got[r].log_sum_exp - want[r].log_sum_exp) <= tol(want[r].log_sum_exp));
    }
    RC_ASSERT(std::fabs(got[r].end_think_mass - want[r].end_think_mass) <= 1e-5);
  }
}

}  // namespace
}  // namespace meridian
