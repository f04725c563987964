#include "core/kvstate/manifest.h"

#include <cmath>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/kvpage/crc32c.h"
#include "core/kvpage/page.h"

namespace glimpse::kvstate {
namespace {

// Storage record, little-endian:
//   u32 magic "GKVM", u16 version 1, u16 reserved 0, state_key[16], namespace_key[16], model[16],
//   u32 arch_len, arch bytes, u32 token_count, i64 created_unix_micros, u32 n_pages,
//   n_pages × {u32 layer, u32 kv_head, u32 index, i32 first, i32 last, u32 n_tokens,
//              f32 importance, u8 tier, u32 bytes, u32 crc32c}   (37 bytes each),
//   u32 CRC32C of everything before it.
constexpr uint32_t kMagic = 0x4D564B47;  // "GKVM"
constexpr uint16_t kVersion = 1;
constexpr size_t kPageRecordBytes = 37;
constexpr size_t kMaxArchitectureBytes = 256;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void PutBytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetBytes(void* p, size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

auto Order(const PageRef& p) { return std::tie(p.layer, p.kv_head, p.index); }

}  // namespace

uint64_t Manifest::total_page_bytes() const {
  uint64_t total = 0;
  for (const PageRef& p : pages) total += p.bytes;
  return total;
}

bool Manifest::SameContent(const Manifest& o) const {
  return state_key == o.state_key && namespace_key == o.namespace_key && model == o.model &&
         architecture == o.architecture && token_count == o.token_count && pages == o.pages;
}

std::string PageName(const PageRef& ref) {
  return absl::StrCat("(layer ", ref.layer, ", kv_head ", ref.kv_head, ", index ", ref.index, ")");
}

absl::Status ValidateManifest(const Manifest& m, const ManifestLimits& limits) {
  if (m.token_count == 0) return absl::InvalidArgumentError("manifest token_count is 0");
  if (m.architecture.size() > kMaxArchitectureBytes) {
    return absl::InvalidArgumentError(absl::StrCat("manifest architecture is ",
                                                   m.architecture.size(), " bytes, limit ",
                                                   kMaxArchitectureBytes));
  }
  if (m.pages.empty()) return absl::InvalidArgumentError("manifest lists no pages");
  if (m.pages.size() > limits.max_pages) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest lists ", m.pages.size(), " pages, limit ", limits.max_pages));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < m.pages.size(); ++i) {
    const PageRef& p = m.pages[i];
    const std::string where = absl::StrCat("page ", i, " ", PageName(p));
    if (i > 0 && !(Order(m.pages[i - 1]) < Order(p))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is out of order or repeated after ", PageName(m.pages[i - 1]),
                       "; pages must be sorted by (layer, kv_head, index) and unique"));
    }
    if (p.first_position < 0 || p.last_position < p.first_position ||
        static_cast<uint32_t>(p.last_position) >= m.token_count) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": positions range [", p.first_position, ", ", p.last_position,
                       "] is invalid for a prefix of ", m.token_count, " tokens"));
    }
    const int64_t span = int64_t{p.last_position} - p.first_position + 1;
    if (p.n_tokens == 0 || p.n_tokens > span || p.n_tokens > kvpage::kMaxPageTokens) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": n_tokens ", p.n_tokens,
                                                     " does not fit positions [", p.first_position,
                                                     ", ", p.last_position, "]"));
    }
    if (!std::isfinite(p.importance) || p.importance < 0.0f || p.importance > 1.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": importance ", p.importance, " is not in [0, 1]"));
    }
    if (p.tier != Tier::kRetained && p.tier != Tier::kEvicted) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown tier ", static_cast<int>(p.tier)));
    }
    if (p.bytes <= kvpage::kPageHeaderBytes || p.bytes > limits.max_page_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": size ", p.bytes, " bytes is outside (64, ", limits.max_page_bytes, "]"));
    }
    total += p.bytes;
  }
  if (total > limits.max_state_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state of ", total, " bytes exceeds the limit of ", limits.max_state_bytes, " bytes"));
  }
  return absl::OkStatus();
}

namespace {

// The checks shared by both forms of CheckPage: the decoded header against the manifest entry.
absl::Status CheckHeaderMatches(const Manifest& m, const PageRef& ref, const kvpage::PageHeader& h,
                                const std::string& where) {
  if (h.layer != ref.layer || h.kv_head != ref.kv_head) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": header says layer ", h.layer, ", kv_head ", h.kv_head));
  }
  if (h.n_tokens != ref.n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": header says ", h.n_tokens, " tokens, manifest ", ref.n_tokens));
  }
  if (h.crc32c != ref.crc32c) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": CRC32C 0x", absl::Hex(h.crc32c),
                                                   " differs from the manifest's 0x",
                                                   absl::Hex(ref.crc32c)));
  }
  if (h.state_key != m.state_key) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": state key ", kvpage::ToHex(h.state_key),
                     " differs from the manifest's ", kvpage::ToHex(m.state_key)));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const PageRef& ref, std::span<const uint8_t> bytes,
                       const std::string& where) {
  if (bytes.size() != ref.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is ", bytes.size(), " bytes, manifest says ", ref.bytes));
  }
  return absl::OkStatus();
}

// Header, CRC and model of a page without decoding its payload.
absl::Status CheckPageHeaderAndCrc(const Manifest& m, const PageRef& ref,
                                   std::span<const uint8_t> bytes, const std::string& where) {
  absl::StatusOr<kvpage::PageHeader> parsed = kvpage::ParsePageHeader(bytes);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(where, ": ", parsed.status().message()));
  }
  const kvpage::PageHeader& h = *parsed;
  if (h.total_bytes() != bytes.size()) {
    return absl::DataLossError(
        absl::StrCat(where, ": header implies ", h.total_bytes(), " bytes, have ", bytes.size()));
  }
  const uint32_t crc = kvpage::Crc32cExtend(kvpage::Crc32cExtend(0, bytes.data(), 60),
                                            bytes.data() + kvpage::kPageHeaderBytes,
                                            bytes.size() - kvpage::kPageHeaderBytes);
  if (crc != h.crc32c) {
    return absl::DataLossError(absl::StrCat(where, ": CRC32C mismatch: stored 0x",
                                            absl::Hex(h.crc32c), ", computed 0x", absl::Hex(crc)));
  }
  if (h.model != m.model) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": model fingerprint ", kvpage::ToHex(h.model),
                     " differs from the expected ", kvpage::ToHex(m.model)));
  }
  return CheckHeaderMatches(m, ref, h, where);
}

}  // namespace

absl::StatusOr<kvpage::Page> DecodeCheckedPage(const Manifest& m, const PageRef& ref,
                                               std::span<const uint8_t> bytes) {
  const std::string where = absl::StrCat("page ", PageName(ref));
  RETURN_IF_ERROR(CheckSize(ref, bytes, where));
  kvpage::DecodeOptions options;
  options.expected_model = m.model;
  absl::StatusOr<kvpage::Page> page = kvpage::DecodePage(bytes, options);
  if (!page.ok()) {
    return absl::Status(page.status().code(), absl::StrCat(where, ": ", page.status().message()));
  }
  if (page->positions.front() != ref.first_position ||
      page->positions.back() != ref.last_position) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": positions [", page->positions.front(), ", ", page->positions.back(),
        "] differ from the manifest's [", ref.first_position, ", ", ref.last_position, "]"));
  }
  RETURN_IF_ERROR(CheckHeaderMatches(m, ref, page->header, where));
  return page;
}

absl::Status CheckPage(const Manifest& m, const PageRef& ref, std::span<const uint8_t> bytes,
                       bool full_decode) {
  if (full_decode) return DecodeCheckedPage(m, ref, bytes).status();
  const std::string where = absl::StrCat("page ", PageName(ref));
  RETURN_IF_ERROR(CheckSize(ref, bytes, where));
  return CheckPageHeaderAndCrc(m, ref, bytes, where);
}

std::string EncodeManifest(const Manifest& m) {
  Writer w;
  w.Put<uint32_t>(kMagic);
  w.Put<uint16_t>(kVersion);
  w.Put<uint16_t>(0);
  w.PutBytes(m.state_key.data(), 16);
  w.PutBytes(m.namespace_key.data(), 16);
  w.PutBytes(m.model.data(), 16);
  w.Put<uint32_t>(static_cast<uint32_t>(m.architecture.size()));
  w.PutBytes(m.architecture.data(), m.architecture.size());
  w.Put<uint32_t>(m.token_count);
  w.Put<int64_t>(m.created_unix_micros);
  w.Put<uint32_t>(static_cast<uint32_t>(m.pages.size()));
  for (const PageRef& p : m.pages) {
    w.Put(p.layer);
    w.Put(p.kv_head);
    w.Put(p.index);
    w.Put(p.first_position);
    w.Put(p.last_position);
    w.Put(p.n_tokens);
    w.Put(p.importance);
    w.Put(static_cast<uint8_t>(p.tier));
    w.Put(p.bytes);
    w.Put(p.crc32c);
  }
  const std::string& s = w.out();
  w.Put<uint32_t>(kvpage::Crc32c({reinterpret_cast<const uint8_t*>(s.data()), s.size()}));
  return std::move(w.out());
}

absl::StatusOr<Manifest> DecodeManifest(std::string_view bytes) {
  if (bytes.size() < 4) return absl::DataLossError("manifest record shorter than 4 bytes");
  const size_t body = bytes.size() - 4;
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + body, 4);
  const uint32_t crc = kvpage::Crc32c({reinterpret_cast<const uint8_t*>(bytes.data()), body});
  if (crc != stored_crc) {
    return absl::DataLossError(absl::StrCat("manifest record CRC32C mismatch: stored 0x",
                                            absl::Hex(stored_crc), ", computed 0x",
                                            absl::Hex(crc)));
  }
  Reader r(bytes.substr(0, body));
  const auto truncated = [] { return absl::DataLossError("manifest record truncated"); };
  uint32_t magic, arch_len, n_pages;
  uint16_t version, reserved;
  Manifest m;
  if (!r.Get(&magic) || !r.Get(&version) || !r.Get(&reserved)) return truncated();
  if (magic != kMagic)
    return absl::DataLossError(absl::StrCat("bad manifest magic 0x", absl::Hex(magic)));
  if (version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "manifest format version ", version, " is not readable (this build reads ", kVersion, ")"));
  }
  if (!r.GetBytes(m.state_key.data(), 16) || !r.GetBytes(m.namespace_key.data(), 16) ||
      !r.GetBytes(m.model.data(), 16) || !r.Get(&arch_len)) {
    return truncated();
  }
  if (arch_len > kMaxArchitectureBytes || arch_len > r.remaining()) return truncated();
  m.architecture.resize(arch_len);
  if (!r.GetBytes(m.architecture.data(), arch_len) || !r.Get(&m.token_count) ||
      !r.Get(&m.created_unix_micros) || !r.Get(&n_pages)) {
    return truncated();
  }
  if (r.remaining() != size_t{n_pages} * kPageRecordBytes) {
    return absl::DataLossError(absl::StrCat("manifest record lists ", n_pages, " pages but holds ",
                                            r.remaining(), " bytes of them"));
  }
  m.pages.resize(n_pages);
  for (PageRef& p : m.pages) {
    uint8_t tier = 0;
    r.Get(&p.layer);
    r.Get(&p.kv_head);
    r.Get(&p.index);
    r.Get(&p.first_position);
    r.Get(&p.last_position);
    r.Get(&p.n_tokens);
    r.Get(&p.importance);
    r.Get(&tier);
    r.Get(&p.bytes);
    r.Get(&p.crc32c);
    p.tier = static_cast<Tier>(tier);
  }
  if (absl::Status s = ValidateManifest(m); !s.ok()) {
    return absl::DataLossError(absl::StrCat("stored manifest is invalid: ", s.message()));
  }
  return m;
}

}  // namespace glimpse::kvstate
