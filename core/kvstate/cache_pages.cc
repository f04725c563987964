#include "core/kvstate/cache_pages.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/kvpage/page.h"

namespace glimpse::kvstate {
namespace {

// One page to encode: rows [begin, begin + n) of one tier of one head.
struct PagePlan {
  uint32_t layer = 0;
  uint32_t kv_head = 0;
  Tier tier = Tier::kRetained;
  const model::KvHead* head = nullptr;
  int64_t begin = 0;
  int64_t n = 0;
  int64_t residual_rows = 0;
  float importance = 0.0f;
  size_t bytes = 0;
  kvpage::PageSections stored;  // a sealed pool page stored as it is (empty: encode the rows)
};

// Whether a cache's retained pages are stored as the pool holds them: encoded in its own format's
// codec, in pages of the pool's size.
bool StoresAsHeld(const model::KvCache& cache, const EncodeStateOptions& o) {
  const bool seals = !model::KvGrouped(cache.dtype()) || o.page_tokens % kvpage::kKiviGroup == 0;
  return seals && o.codec == model::RowCodec(cache.dtype()) &&
         o.page_tokens == cache.pool().page_tokens();
}

// A head's pages as the pool holds them, in order, up to the first one that is not (a KIVI
// head's fp16 pages).
struct HeldPages {
  std::vector<std::vector<uint8_t>> keys, values;
  size_t size() const { return keys.size(); }
  kvpage::PageSections operator[](size_t i) const { return {.keys = keys[i], .values = values[i]}; }
};

HeldPages HeldOf(const model::KvCache& cache, int32_t layer, int32_t kv_head) {
  HeldPages held;
  const size_t pages = cache.Pages(layer, kv_head).size();
  for (size_t p = 0; p < pages; ++p) {
    std::vector<uint8_t> k, v;
    if (!cache.HeldSections(layer, kv_head, p, &k, &v)) break;
    held.keys.push_back(std::move(k));
    held.values.push_back(std::move(v));
  }
  return held;
}

std::string HeadName(size_t index, int32_t n_kv_heads) {
  return absl::StrCat("(layer ", index / n_kv_heads, ", kv_head ", index % n_kv_heads, ")");
}

absl::Status CheckHead(const model::KvHead& head, int64_t head_dim, const std::string& what) {
  const int64_t n = head.size();
  if (static_cast<int64_t>(head.keys.size()) != n * head_dim ||
      static_cast<int64_t>(head.values.size()) != n * head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", n, " positions but ",
                                                   head.keys.size(), " key and ",
                                                   head.values.size(), " value floats"));
  }
  return absl::OkStatus();
}

absl::Status CheckScores(std::span<const std::vector<float>> scores, size_t index, int64_t n,
                         const std::string& what) {
  if (scores.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(scores[index].size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", n, " entries but ", scores[index].size(), " scores"));
  }
  for (float s : scores[index]) {
    if (std::isnan(s)) return absl::InvalidArgumentError(absl::StrCat(what, " has a NaN score"));
  }
  return absl::OkStatus();
}

absl::Status ValidateContent(const StateContent& c, const EncodeStateOptions& options) {
  if (c.retained == nullptr) return absl::InvalidArgumentError("no retained cache to encode");
  if (options.page_tokens < 1 || options.page_tokens > kvpage::kMaxPageTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_tokens ", options.page_tokens, " is outside [1, ", kvpage::kMaxPageTokens, "]"));
  }
  const size_t heads = static_cast<size_t>(c.retained->n_layers()) * c.retained->n_kv_heads();
  auto check_size = [&](size_t size, const std::string& what) -> absl::Status {
    if (size != 0 && size != heads) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " lists ", size, " heads, the cache has ", heads, " (layers × kv_heads)"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_size(c.evicted.size(), "evicted"));
  RETURN_IF_ERROR(check_size(c.retained_scores.size(), "retained_scores"));
  RETURN_IF_ERROR(check_size(c.evicted_scores.size(), "evicted_scores"));
  if (!c.evicted_scores.empty() && (c.retained_scores.empty() || c.evicted.empty())) {
    return absl::InvalidArgumentError("evicted_scores need evicted entries and retained_scores");
  }
  const int32_t hkv = c.retained->n_kv_heads();
  const int64_t hd = c.retained->head_dim();
  for (size_t i = 0; i < heads; ++i) {
    const int64_t kept = c.retained->size(i / hkv, i % hkv);
    RETURN_IF_ERROR(CheckScores(c.retained_scores, i, kept, "retained head " + HeadName(i, hkv)));
    if (c.evicted.empty()) continue;
    RETURN_IF_ERROR(CheckHead(c.evicted[i], hd, "evicted head " + HeadName(i, hkv)));
    RETURN_IF_ERROR(
        CheckScores(c.evicted_scores, i, c.evicted[i].size(), "evicted head " + HeadName(i, hkv)));
  }
  return absl::OkStatus();
}

// Min–max normalisation of one head's scores (both tiers); +inf maps to 1, −inf to 0.
struct ScoreScale {
  float lo = 0.0f;
  float range = 0.0f;  // 0: every finite score is equal, so none ranks above another

  float Normalise(float s) const {
    if (std::isinf(s)) return s > 0 ? 1.0f : 0.0f;
    return range > 0.0f ? (s - lo) / range : 1.0f;
  }
};

ScoreScale ScaleOf(std::span<const float> a, std::span<const float> b) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (std::span<const float> scores : {a, b}) {
    for (float s : scores) {
      if (std::isinf(s)) continue;
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
  }
  if (lo > hi) return {};
  return {lo, hi - lo};
}

float MeanImportance(std::span<const float> scores, const ScoreScale& scale) {
  double sum = 0.0;
  for (float s : scores) sum += scale.Normalise(s);
  return std::clamp(static_cast<float>(sum / scores.size()), 0.0f, 1.0f);
}

// Appends the pages of one tier of one head to `plans`. `held` (retained tier of a cache that
// StoresAsHeld, else null): the head's pool pages, stored as they are, and any rows after them
// (a KIVI head's fp16 rows) all residual, so the state holds exactly what the cache held.
void PlanTier(uint32_t layer, uint32_t kv_head, Tier tier, const model::KvHead& head,
              std::span<const float> scores, const ScoreScale& scale, const EncodeStateOptions& o,
              const HeldPages* held, std::vector<PagePlan>* plans) {
  const int64_t n = head.size();
  const kvpage::CodecInfo* codec = kvpage::FindCodec(static_cast<uint8_t>(o.codec));
  const bool kivi = codec != nullptr && codec->supports_residual;
  for (int64_t begin = 0; begin < n; begin += o.page_tokens) {
    PagePlan p;
    p.layer = layer;
    p.kv_head = kv_head;
    p.tier = tier;
    p.head = &head;
    p.begin = begin;
    p.n = std::min(o.page_tokens, n - begin);
    const size_t index = static_cast<size_t>(begin / o.page_tokens);
    if (held != nullptr && index < held->size()) {
      p.stored = (*held)[index];
    } else if (held != nullptr && kivi) {
      p.residual_rows = p.n;
    } else if (kivi && tier == Tier::kRetained) {
      p.residual_rows = kvpage::KiviResidualRows(begin, p.n, n);
    }
    if (scores.empty()) {
      p.importance = tier == Tier::kRetained ? 1.0f : 0.0f;
    } else {
      p.importance = MeanImportance(scores.subspan(begin, p.n), scale);
    }
    plans->push_back(p);
  }
}

kvpage::PageView ViewOf(const PagePlan& p, int64_t head_dim, const StateIdentity& id) {
  kvpage::PageView v;
  v.layer = p.layer;
  v.kv_head = p.kv_head;
  v.n_tokens = p.n;
  v.head_dim = head_dim;
  v.keys = p.head->keys.data() + p.begin * head_dim;
  v.values = p.head->values.data() + p.begin * head_dim;
  v.positions = p.head->positions.data() + p.begin;
  v.model = id.model;
  v.state_key = id.state_key;
  return v;
}

std::span<const float> ScoresOf(std::span<const std::vector<float>> scores, size_t i) {
  if (scores.empty()) return {};
  return scores[i];
}

}  // namespace

std::vector<std::span<const uint8_t>> EncodedState::pages() const {
  std::vector<std::span<const uint8_t>> out;
  out.reserve(manifest.pages.size());
  size_t offset = 0;
  for (const PageRef& ref : manifest.pages) {
    out.emplace_back(bytes.data() + offset, ref.bytes);
    offset += ref.bytes;
  }
  return out;
}

absl::StatusOr<EncodedState> EncodeState(const StateContent& content, const StateIdentity& id,
                                         const EncodeStateOptions& options) {
  RETURN_IF_ERROR(ValidateContent(content, options));
  const model::KvCache& cache = *content.retained;
  const int32_t hkv = cache.n_kv_heads();
  const int64_t hd = cache.head_dim();
  const size_t heads = static_cast<size_t>(cache.n_layers()) * hkv;

  std::vector<PagePlan> plans;
  std::vector<model::KvHead> retained(heads);  // decoded once; the plans point into them
  std::vector<HeldPages> held(heads);          // pool pages as they are
  const bool as_held = StoresAsHeld(cache, options);
  for (size_t i = 0; i < heads; ++i) {
    const uint32_t layer = static_cast<uint32_t>(i / hkv), kv_head = static_cast<uint32_t>(i % hkv);
    retained[i] = cache.Read(static_cast<int32_t>(layer), static_cast<int32_t>(kv_head));
    if (as_held) held[i] = HeldOf(cache, layer, kv_head);
    std::span<const float> kept_scores = ScoresOf(content.retained_scores, i);
    std::span<const float> evicted_scores = ScoresOf(content.evicted_scores, i);
    const ScoreScale scale = ScaleOf(kept_scores, evicted_scores);
    PlanTier(layer, kv_head, Tier::kRetained, retained[i], kept_scores, scale, options,
             as_held ? &held[i] : nullptr, &plans);
    if (content.evicted.empty()) continue;
    // Without evicted scores an evicted page still ranks below every retained one.
    PlanTier(layer, kv_head, Tier::kEvicted, content.evicted[i], evicted_scores, scale, options,
             nullptr, &plans);
  }

  size_t total = 0;
  for (PagePlan& p : plans) {
    kvpage::EncodeOptions eo;
    eo.residual_rows = p.residual_rows;
    ASSIGN_OR_RETURN(p.bytes, kvpage::EncodedSize(ViewOf(p, hd, id), options.codec, eo));
    total += p.bytes;
  }

  EncodedState out;
  out.bytes.resize(total);
  Manifest& m = out.manifest;
  m.state_key = id.state_key;
  m.namespace_key = id.namespace_key;
  m.model = id.model;
  m.architecture = id.architecture;
  m.token_count = id.token_count;
  m.pages.reserve(plans.size());
  size_t offset = 0;
  uint32_t index = 0;
  for (size_t k = 0; k < plans.size(); ++k) {
    const PagePlan& p = plans[k];
    if (k == 0 || plans[k - 1].layer != p.layer || plans[k - 1].kv_head != p.kv_head) index = 0;
    kvpage::EncodeOptions eo;
    eo.residual_rows = p.residual_rows;
    eo.keys_section = p.stored.keys;
    eo.values_section = p.stored.values;
    std::span<uint8_t> dst(out.bytes.data() + offset, p.bytes);
    RETURN_IF_ERROR(kvpage::EncodePage(ViewOf(p, hd, id), options.codec, dst, eo).status());
    ASSIGN_OR_RETURN(kvpage::PageHeader header, kvpage::ParsePageHeader(dst));
    PageRef ref;
    ref.layer = p.layer;
    ref.kv_head = p.kv_head;
    ref.index = index++;
    ref.first_position = p.head->positions[p.begin];
    ref.last_position = p.head->positions[p.begin + p.n - 1];
    ref.n_tokens = static_cast<uint32_t>(p.n);
    ref.importance = p.importance;
    ref.tier = p.tier;
    ref.bytes = static_cast<uint32_t>(p.bytes);
    ref.crc32c = header.crc32c;
    m.pages.push_back(ref);
    offset += p.bytes;
  }
  RETURN_IF_ERROR(ValidateManifest(m));
  return out;
}

namespace {

// The entries of one head after a merge, built before the cache is touched.
struct MergedHead {
  size_t index = 0;  // layer · n_kv_heads + kv_head
  model::KvHead head;
};

// One sorted run of entries: the cache's current head or one decoded page.
struct Run {
  const float* keys = nullptr;
  const float* values = nullptr;
  const int32_t* positions = nullptr;
  int64_t n = 0;
};

absl::StatusOr<model::KvHead> MergeRuns(std::vector<Run> runs, int64_t hd,
                                        const std::string& where) {
  std::vector<std::pair<int32_t, std::pair<size_t, int64_t>>> order;  // (position, (run, row))
  for (size_t r = 0; r < runs.size(); ++r) {
    for (int64_t j = 0; j < runs[r].n; ++j) order.push_back({runs[r].positions[j], {r, j}});
  }
  std::sort(order.begin(), order.end());
  model::KvHead out;
  out.positions.reserve(order.size());
  out.keys.reserve(order.size() * hd);
  out.values.reserve(order.size() * hd);
  for (size_t k = 0; k < order.size(); ++k) {
    if (k > 0 && order[k].first == order[k - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": position ", order[k].first, " appears twice"));
    }
    const Run& run = runs[order[k].second.first];
    const int64_t row = order[k].second.second;
    out.positions.push_back(order[k].first);
    out.keys.insert(out.keys.end(), run.keys + row * hd, run.keys + (row + 1) * hd);
    out.values.insert(out.values.end(), run.values + row * hd, run.values + (row + 1) * hd);
  }
  return out;
}

// One decoded page and its bytes.
struct LoadedPage {
  kvpage::Page page;
  std::span<const uint8_t> bytes;
};

// Pages in position order that do not interleave, into an empty head: each appended as it is,
// its sections straight into pool pages when they are the cache's format (KvCache::
// TakesSections: no decode, no re-encode), any other by its decoded rows. False when they
// interleave (the caller merges).
bool PagewiseLoadable(std::vector<LoadedPage>& pages, const model::KvCache& cache, int32_t layer,
                      int32_t kv_head) {
  if (cache.size(layer, kv_head) != 0) return false;
  std::sort(pages.begin(), pages.end(), [](const LoadedPage& a, const LoadedPage& b) {
    return a.page.positions.front() < b.page.positions.front();
  });
  for (size_t k = 1; k < pages.size(); ++k) {
    if (pages[k].page.positions.front() <= pages[k - 1].page.positions.back()) return false;
  }
  return true;
}

absl::Status LoadPagewise(const std::vector<LoadedPage>& pages, int32_t layer, int32_t kv_head,
                          model::KvCache* cache) {
  for (const LoadedPage& p : pages) {
    const kvpage::PageHeader& h = p.page.header;
    if (cache->TakesSections(layer, kv_head, h.codec, h.residual_rows, h.n_tokens)) {
      const kvpage::PageSections s = kvpage::SectionsOf(p.bytes, h);
      RETURN_IF_ERROR(cache->AppendSections(layer, kv_head, h.codec, s.keys, s.values,
                                            p.page.positions.data(), h.n_tokens));
      continue;
    }
    RETURN_IF_ERROR(cache->Append(layer, kv_head, p.page.keys.data(), p.page.values.data(),
                                  p.page.positions.data(), h.n_tokens));
  }
  return absl::OkStatus();
}

bool Wanted(Tier tier, LoadTiers tiers) {
  switch (tiers) {
    case LoadTiers::kRetained:
      return tier == Tier::kRetained;
    case LoadTiers::kEvicted:
      return tier == Tier::kEvicted;
    case LoadTiers::kAll:
      return true;
  }
  return false;
}

}  // namespace

absl::Status LoadPages(const Manifest& manifest, std::span<const std::span<const uint8_t>> pages,
                       LoadTiers tiers, model::KvCache* cache) {
  if (pages.size() != manifest.pages.size()) {
    return absl::InvalidArgumentError(absl::StrCat("have ", pages.size(), " pages for ",
                                                   manifest.pages.size(), " manifest entries"));
  }
  const int32_t hkv = cache->n_kv_heads();
  const int64_t hd = cache->head_dim();
  std::vector<std::vector<LoadedPage>> decoded(static_cast<size_t>(cache->n_layers()) * hkv);
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageRef& ref = manifest.pages[i];
    if (!Wanted(ref.tier, tiers)) continue;
    if (ref.layer >= static_cast<uint32_t>(cache->n_layers()) ||
        ref.kv_head >= static_cast<uint32_t>(hkv)) {
      return absl::InvalidArgumentError(absl::StrCat("page ", PageName(ref), " is outside the ",
                                                     cache->n_layers(), " layers × ", hkv,
                                                     " kv-heads of the model"));
    }
    ASSIGN_OR_RETURN(kvpage::Page page, DecodeCheckedPage(manifest, ref, pages[i]));
    if (page.header.head_dim != hd) {
      return absl::InvalidArgumentError(absl::StrCat("page ", PageName(ref), " has head_dim ",
                                                     page.header.head_dim, ", the model ", hd));
    }
    decoded[static_cast<size_t>(ref.layer) * hkv + ref.kv_head].push_back(
        {std::move(page), pages[i]});
  }

  std::vector<MergedHead> merged;
  std::vector<size_t> pagewise;  // heads whose pages append as they are
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (decoded[i].empty()) continue;
    if (PagewiseLoadable(decoded[i], *cache, i / hkv, i % hkv)) {
      pagewise.push_back(i);
      continue;
    }
    const model::KvHead current = cache->Read(i / hkv, i % hkv);
    std::vector<Run> runs{
        {current.keys.data(), current.values.data(), current.positions.data(), current.size()}};
    for (const LoadedPage& p : decoded[i]) {
      runs.push_back({p.page.keys.data(), p.page.values.data(), p.page.positions.data(),
                      p.page.header.n_tokens});
    }
    ASSIGN_OR_RETURN(model::KvHead head, MergeRuns(std::move(runs), hd, HeadName(i, hkv)));
    merged.push_back({i, std::move(head)});
  }
  for (size_t i : pagewise) {
    if (absl::Status st = LoadPagewise(decoded[i], i / hkv, i % hkv, cache); !st.ok()) {
      cache->Truncate(i / hkv, i % hkv, 0);  // the head was empty
      return st;
    }
  }
  for (const MergedHead& m : merged) {
    RETURN_IF_ERROR(cache->Assign(m.index / hkv, m.index % hkv, m.head));
  }
  return absl::OkStatus();
}

}  // namespace glimpse::kvstate
