#include "core/eviction/recall.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace glimpse::eviction {
namespace {

bool Present(const float* row, int64_t hd) {
  for (int64_t c = 0; c < hd; ++c) {
    if (std::isnan(row[c])) return false;
  }
  return true;
}

void AppendEntry(model::KvHead& out, const model::KvHead& from, int64_t row, int64_t hd) {
  out.keys.insert(out.keys.end(), from.keys.begin() + row * hd, from.keys.begin() + (row + 1) * hd);
  out.values.insert(out.values.end(), from.values.begin() + row * hd,
                    from.values.begin() + (row + 1) * hd);
  out.positions.push_back(from.positions[row]);
}

int64_t HeadDim(const model::KvHead& head) {
  return head.size() == 0 ? 0 : static_cast<int64_t>(head.keys.size()) / head.size();
}

}  // namespace

float PageBound(const model::KvHead& cold, int64_t begin, int64_t end,
                const RecallQueries& queries) {
  const int64_t hd = queries.head_dim;
  std::vector<float> lo(hd, std::numeric_limits<float>::infinity());   // [hd] summary min
  std::vector<float> hi(hd, -std::numeric_limits<float>::infinity());  // [hd] summary max
  for (int64_t j = begin; j < end; ++j) {
    const float* k = cold.keys.data() + j * hd;
    for (int64_t c = 0; c < hd; ++c) {
      lo[c] = std::min(lo[c], k[c]);
      hi[c] = std::max(hi[c], k[c]);
    }
  }
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < queries.rows; ++r) {
    const float* q = queries.data + r * hd;
    if (!Present(q, hd)) continue;
    float bound = 0.0f;
    for (int64_t c = 0; c < hd; ++c) bound += std::max(q[c] * lo[c], q[c] * hi[c]);
    best = std::max(best, bound);
  }
  return best;
}

std::vector<int64_t> PickCandidates(const model::KvHead& cold, const RecallQueries& queries,
                                    int64_t candidate_tokens, int64_t page_tokens) {
  std::vector<int64_t> rows;
  if (candidate_tokens <= 0 || cold.size() == 0 || page_tokens <= 0) return rows;
  std::vector<std::pair<float, int64_t>> pages;  // (bound, first row)
  for (int64_t begin = 0; begin < cold.size(); begin += page_tokens) {
    const float bound = PageBound(cold, begin, std::min(begin + page_tokens, cold.size()), queries);
    if (bound == -std::numeric_limits<float>::infinity()) return rows;  // no query row present
    pages.push_back({bound, begin});
  }
  // Best bound first; among equals the later page (recency breaks ties).
  std::sort(pages.begin(), pages.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  const int64_t want = std::min(candidate_tokens, cold.size());
  for (const auto& [bound, begin] : pages) {
    if (static_cast<int64_t>(rows.size()) >= want) break;
    for (int64_t j = begin; j < std::min(begin + page_tokens, cold.size()); ++j) rows.push_back(j);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

model::KvHead Rows(const model::KvHead& from, std::span<const int64_t> rows) {
  model::KvHead out;
  const int64_t hd = HeadDim(from);
  for (int64_t row : rows) AppendEntry(out, from, row, hd);
  return out;
}

void AddMissingEntries(model::KvHead& into, const model::KvHead& from,
                       const model::KvHead& exclude) {
  if (from.size() == 0) return;
  const int64_t hd = HeadDim(from);
  model::KvHead merged;
  merged.positions.reserve(into.size() + from.size());
  int64_t i = 0, x = 0;
  for (int64_t f = 0; f < from.size(); ++f) {
    const int32_t p = from.positions[f];
    while (i < into.size() && into.positions[i] < p) AppendEntry(merged, into, i++, hd);
    while (x < exclude.size() && exclude.positions[x] < p) ++x;
    const bool held = (i < into.size() && into.positions[i] == p) ||
                      (x < exclude.size() && exclude.positions[x] == p);
    if (!held) AppendEntry(merged, from, f, hd);
  }
  while (i < into.size()) AppendEntry(merged, into, i++, hd);
  into = std::move(merged);
}

}  // namespace glimpse::eviction
