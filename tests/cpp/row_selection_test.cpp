// Selected rows of a batch, span by span (compute_selected_rows): every
// selected row gets its own statistics, and the rows read stay bounded by the
// rows selected however far apart they are (issue 27).
#include <cstddef>
#include <ostream>
#include <set>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "meridian/row_stats.h"

namespace meridian {

void PrintTo(const RowSpan& span, std::ostream* os) {
  *os << "[" << span.first << ", +" << span.count << ")";
}

namespace {

TEST(RowSelection, CoverRowsJoinsRunsAndGapsUpToTheLimit) {
  const std::vector<std::size_t> rows{0, 1, 2, 5, 9, 10, 40};
  EXPECT_EQ(cover_rows(rows, 0), (std::vector<RowSpan>{{0, 3}, {5, 1}, {9, 2}, {40, 1}}));
  EXPECT_EQ(cover_rows(rows, 1), (std::vector<RowSpan>{{0, 3}, {5, 1}, {9, 2}, {40, 1}}));
  EXPECT_EQ(cover_rows(rows, 2), (std::vector<RowSpan>{{0, 6}, {9, 2}, {40, 1}}));
  EXPECT_EQ(cover_rows(rows, 3), (std::vector<RowSpan>{{0, 11}, {40, 1}}));
  EXPECT_EQ(cover_rows(rows, 29), (std::vector<RowSpan>{{0, 41}}));
  EXPECT_TRUE(cover_rows({}, 8).empty());
}

TEST(RowSelection, RowsFarApartReadOnlyThemselves) {
  // The case of issue 27: rows 0 and 2^40 - 1 of a view that has 2^40 rows.
  // The kernel is only counted (a view this large has no memory behind it).
  const float cell = 0.0F;
  LogitsView view;
  view.data = &cell;
  view.rows = std::size_t{1} << 40U;
  view.vocab = 1;
  std::size_t rows_read = 0;
  std::size_t calls = 0;
  const RowSpanKernel count = [&](const LogitsView& span, std::span<RowStats> out) {
    ++calls;
    rows_read += span.rows;
    EXPECT_EQ(out.size(), span.rows);
  };
  std::vector<RowStats> out(3);
  compute_selected_rows(view, std::vector<std::size_t>{view.rows - 1, 0, view.rows - 1}, 64, count, out);
  EXPECT_EQ(calls, 2U);
  EXPECT_EQ(rows_read, 2U);
}

TEST(RowSelection, RefusesRowsOutsideTheViewAndMismatchedOutputs) {
  const std::vector<float> logits(8, 0.0F);
  LogitsView view;
  view.data = logits.data();
  view.rows = 2;
  view.vocab = 4;
  const RowSpanKernel never = [](const LogitsView&, std::span<RowStats>) { FAIL() << "kernel called"; };
  std::vector<RowStats> out(1);
  EXPECT_THROW(compute_selected_rows(view, std::vector<std::size_t>{2}, 0, never, out), KernelError);
  EXPECT_THROW(compute_selected_rows(view, std::vector<std::size_t>{0, 1}, 0, never, out), KernelError);
}

// Any selection, any gap limit: out[i] is row rows[i]'s own statistics (the
// same as computing that row alone), each distinct row is computed once, and
// the kernel reads at most (distinct - 1) * max_gap rows nobody asked for.
RC_GTEST_PROP(RowSelection, EachSelectedRowGetsItsOwnStatsAndTheWasteIsBounded, ()) {
  const auto n_rows = *rc::gen::inRange<std::size_t>(1, 40);
  const auto vocab = *rc::gen::inRange<std::size_t>(1, 9);
  const auto max_gap = *rc::gen::inRange<std::size_t>(0, 6);
  const auto rows = *rc::gen::container<std::vector<std::size_t>>(rc::gen::inRange<std::size_t>(0, n_rows));
  std::vector<float> logits(n_rows * vocab);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919U) % 13U) * 0.25F;
  LogitsView view;
  view.data = logits.data();
  view.rows = n_rows;
  view.vocab = vocab;

  std::size_t rows_read = 0;
  std::multiset<std::size_t> computed;
  const RowSpanKernel cpu = [&](const LogitsView& span, std::span<RowStats> out) {
    rows_read += span.rows;
    const auto first = static_cast<std::size_t>(static_cast<const float*>(span.data) - logits.data()) / vocab;
    for (std::size_t r = 0; r < span.rows; ++r) computed.insert(first + r);
    compute_row_stats_cpu(span, {}, out);
  };
  std::vector<RowStats> out(rows.size());
  compute_selected_rows(view, rows, max_gap, cpu, out);

  const std::set<std::size_t> distinct(rows.begin(), rows.end());
  for (const std::size_t row : distinct) RC_ASSERT(computed.count(row) == 1U);
  const std::size_t waste_bound = distinct.empty() ? 0 : (distinct.size() - 1) * max_gap;
  RC_ASSERT(rows_read <= distinct.size() + waste_bound);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    RowStats alone;
    compute_row_stats_cpu(rows_of(view, rows[i], 1), {}, {&alone, 1});
    RC_ASSERT(out[i].argmax == alone.argmax);
    RC_ASSERT(out[i].entropy == alone.entropy);
    RC_ASSERT(out[i].max_logit == alone.max_logit);
  }
}

}  // namespace
}  // namespace meridian
