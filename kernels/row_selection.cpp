// Selected rows of a logits batch, computed span by span: the work is bounded
// by the rows asked for, not by the distance between them (issue 27: rows
// [0, 2^40 - 1] of a strided view must not read 2^40 rows).
#include <algorithm>
#include <string>
#include <vector>

#include "meridian/row_stats.h"

namespace meridian {

LogitsView rows_of(const LogitsView& view, std::size_t first, std::size_t count) {
  LogitsView sub = view;
  sub.data = static_cast<const char*>(view.data) + (first * view.stride() * dtype_size(view.dtype));
  sub.rows = count;
  sub.row_stride = view.stride();
  if (!view.row_vocab.empty()) sub.row_vocab = view.row_vocab.subspan(first, count);
  return sub;
}

std::vector<RowSpan> cover_rows(std::span<const std::size_t> sorted_rows, std::size_t max_gap) {
  std::vector<RowSpan> spans;
  for (const std::size_t row : sorted_rows) {
    if (!spans.empty()) {
      RowSpan& last = spans.back();
      const std::size_t end = last.first + last.count;  // one past the span's last row
      if (row - end <= max_gap) {                       // rows are ascending and distinct: row >= end
        last.count = row - last.first + 1;
        continue;
      }
    }
    spans.push_back(RowSpan{row, 1});
  }
  return spans;
}

void compute_selected_rows(const LogitsView& view, std::span<const std::size_t> rows, std::size_t max_gap,
                           const RowSpanKernel& kernel, std::span<RowStats> out) {
  if (out.size() != rows.size()) {
    throw KernelError("compute_selected_rows: " + std::to_string(out.size()) + " outputs for " +
                      std::to_string(rows.size()) + " rows");
  }
  std::vector<std::size_t> distinct(rows.begin(), rows.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (!distinct.empty() && distinct.back() >= view.rows) {
    throw KernelError("compute_selected_rows: row " + std::to_string(distinct.back()) + " is outside the " +
                      std::to_string(view.rows) + " rows of the view");
  }
  std::vector<RowStats> stats(distinct.size());  // stats[k] for distinct[k]
  std::vector<RowStats> span_stats;
  std::size_t next = 0;  // the first distinct row not yet computed
  for (const RowSpan& span : cover_rows(distinct, max_gap)) {
    span_stats.resize(span.count);
    kernel(rows_of(view, span.first, span.count), span_stats);
    for (; next < distinct.size() && distinct[next] < span.first + span.count; ++next) {
      stats[next] = span_stats[distinct[next] - span.first];
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto at = std::lower_bound(distinct.begin(), distinct.end(), rows[i]) - distinct.begin();
    out[i] = stats[static_cast<std::size_t>(at)];
  }
}

}  // namespace meridian
