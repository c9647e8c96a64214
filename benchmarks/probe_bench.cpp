// The entropy-probe kernel against the float64 scalar reference and a
// streaming read of the same bytes, on a decode-step batch of Qwen3 rows.
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "meridian/row_stats.h"

namespace {

constexpr std::size_t kVocab = 151936;

std::vector<float> make_logits(std::size_t rows) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  std::vector<float> v(rows * kVocab);
  for (auto& x : v) x = normal(rng);
  return v;
}

meridian::LogitsView view_of(const std::vector<float>& v, std::size_t rows) {
  meridian::LogitsView view;
  view.data = v.data();
  view.rows = rows;
  view.vocab = kVocab;
  return view;
}

// Times `compute(view, end_ids, out)` on `rows` Qwen3-sized rows.
template <typename Compute>
void time_row_stats(benchmark::State& state, Compute compute) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  const auto logits = make_logits(rows);
  const auto view = view_of(logits, rows);
  std::vector<meridian::RowStats> out(rows);
  const std::vector<meridian::TokenId> ends{151668};
  for (auto _ : state) {
    compute(view, ends, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(view.bytes_read()));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(rows));
}

void BM_ProbeKernel(benchmark::State& state) {
  time_row_stats(state, [](const auto& view, const auto& ends, auto& out) {
    meridian::compute_row_stats_cpu(view, ends, out, {.max_threads = 1});
  });
}
BENCHMARK(BM_ProbeKernel)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);

void BM_ProbeReference(benchmark::State& state) {
  time_row_stats(state, [](const auto& view, const auto& ends, auto& out) {
    meridian::compute_row_stats_reference(view, ends, out);
  });
}
BENCHMARK(BM_ProbeReference)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);

void BM_ProbeStreamRead(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  const auto logits = make_logits(rows);
  for (auto _ : state) {
    benchmark::DoNotOptimize(meridian::stream_read_sum(logits.data(), logits.size() * sizeof(float)));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(logits.size() * sizeof(float)));
  // Rows read, like the kernels' items: run_microbench.py compares them per row.
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(rows));
}
BENCHMARK(BM_ProbeStreamRead)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);

}  // namespace
