#include "core/model/unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace glimpse::model {
namespace {

struct CpRange {
  uint32_t first;
  CpClass cls;
};

constexpr CpRange kCpRanges[] = {
#include "core/model/unicode_tables.inc"
};

constexpr uint32_t kReplacement = 0xFFFD;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// ASCII is most of real text; a flat table avoids the binary search there.
std::array<CpClass, 128> MakeAsciiClasses() {
  std::array<CpClass, 128> table{};
  size_t r = 0;
  for (uint32_t cp = 0; cp < 128; ++cp) {
    while (r + 1 < std::size(kCpRanges) && kCpRanges[r + 1].first <= cp) ++r;
    table[cp] = kCpRanges[r].cls;
  }
  return table;
}

// Reads one sequence starting at `*pos` exactly as llama.cpp's unicode_cpt_from_utf8: the lead
// byte decides the length, continuation bytes must be 10xxxxxx, nothing else is checked.
// Returns false (consuming nothing) when the sequence is invalid.
bool ReadUtf8(std::string_view s, size_t* pos, uint32_t* cp) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  const size_t i = *pos;
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    *pos += 1;
  } else if ((b0 & 0x40) == 0) {  // stray continuation byte
    return false;
  } else if ((b0 & 0x20) == 0) {
    if (!cont(i + 1)) return false;
    *cp = ((b0 & 0x1Fu) << 6) | (byte(i + 1) & 0x3Fu);
    *pos += 2;
  } else if ((b0 & 0x10) == 0) {
    if (!cont(i + 1) || !cont(i + 2)) return false;
    *cp = ((b0 & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
    *pos += 3;
  } else if ((b0 & 0x08) == 0) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return false;
    *cp = ((b0 & 0x07u) << 18) | ((byte(i + 1) & 0x3Fu) << 12) | ((byte(i + 2) & 0x3Fu) << 6) |
          (byte(i + 3) & 0x3Fu);
    *pos += 4;
  } else {
    return false;
  }
  return true;
}

// ---- Pre-tokenizer machinery (mirrors unicode_regex_split) ----

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

// A piece [ini, end) of the codepoints being split further. Positions outside it read as
// kOutOfRange / "no class", as llama.cpp's _get_cpt / _get_flags do.
struct Fragment {
  const std::vector<uint32_t>& cps;
  size_t ini;
  size_t end;

  bool In(size_t pos) const { return pos >= ini && pos < end; }
  uint32_t Cp(size_t pos) const { return In(pos) ? cps[pos] : kOutOfRange; }
  bool Is(size_t pos, CpClass cls) const { return In(pos) && ClassifyCodepoint(cps[pos]) == cls; }
  bool Letter(size_t pos) const { return Is(pos, CpClass::kLetter); }
  bool Number(size_t pos) const { return Is(pos, CpClass::kNumber); }
  bool Space(size_t pos) const { return Is(pos, CpClass::kWhitespace); }
  // [^\s\p{L}\p{N}]: in range and none of the three.
  bool Symbol(size_t pos) const { return In(pos) && !Letter(pos) && !Number(pos) && !Space(pos); }
  bool CrLf(size_t pos) const { return Cp(pos) == '\r' || Cp(pos) == '\n'; }
};

// Appends the lengths of consecutive words ending at the given positions.
class WordSink {
 public:
  WordSink(std::vector<size_t>* out, size_t start) : out_(out), prev_end_(start) {}
  // Ends the current word at `end`; returns its length (0 adds nothing).
  size_t Add(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) out_->push_back(len);
    prev_end_ = end;
    return len;
  }

 private:
  std::vector<size_t>* out_;
  size_t prev_end_;
};

// 's|'t|'re|'ve|'m|'ll|'d at `pos`: returns the match length or 0. `fold` also accepts the
// upper-case letters (llama3's (?i:...); no non-ASCII codepoint lower-cases to these letters).
size_t MatchContraction(const Fragment& f, size_t pos, bool fold) {
  if (f.Cp(pos) != '\'' || pos + 1 >= f.end) return 0;
  const auto lower = [&](size_t p) {
    const uint32_t c = f.Cp(p);
    return (fold && c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
  };
  const uint32_t c1 = lower(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= f.end) return 0;
  const uint32_t c2 = lower(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// Handles the whitespace alternatives shared by both families at `pos`; returns the new position
// or `pos` when no whitespace starts there. With `newline_rule`, \s*[\r\n]+ comes first (llama3).
size_t MatchWhitespace(const Fragment& f, size_t pos, bool newline_rule) {
  size_t n = 0;
  size_t last_crlf_end = 0;
  while (f.Space(pos + n)) {
    if (f.CrLf(pos + n)) last_crlf_end = pos + n + 1;
    ++n;
  }
  if (newline_rule && last_crlf_end > 0) return last_crlf_end;  // \s*[\r\n]+
  // \s+(?!\S): keep the last whitespace for the next word unless the run ends the fragment.
  if (n > 1 && f.Cp(pos + n) != kOutOfRange) return pos + n - 1;
  return pos + n;  // \s+ (or nothing when n == 0)
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (unicode_regex_split_custom_gpt2).
void SplitGpt2(const Fragment& f, std::vector<size_t>* out) {
  WordSink sink(out, f.ini);
  for (size_t pos = f.ini; pos < f.end;) {
    if (const size_t len = MatchContraction(f, pos, /*fold=*/false); len > 0) {
      pos += len;
      sink.Add(pos);
      continue;
    }
    // An optional leading space joins the letter / number / symbol run that follows it.
    const size_t body = f.Cp(pos) == ' ' ? pos + 1 : pos;
    bool (Fragment::*run_class)(size_t) const = nullptr;
    if (f.Letter(body)) {
      run_class = &Fragment::Letter;
    } else if (f.Number(body)) {
      run_class = &Fragment::Number;
    } else if (f.Symbol(body)) {
      run_class = &Fragment::Symbol;
    }
    if (run_class != nullptr) {
      pos = body;
      while ((f.*run_class)(pos)) ++pos;
      sink.Add(pos);
      continue;
    }
    const size_t next = MatchWhitespace(f, pos, /*newline_rule=*/false);
    pos = next > pos ? next : pos + 1;  // no alternative matched: a word of one codepoint
    sink.Add(pos);
  }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (unicode_regex_split_custom_llama3)
void SplitLlama3(const Fragment& f, size_t max_digits, std::vector<size_t>* out) {
  WordSink sink(out, f.ini);
  for (size_t pos = f.ini; pos < f.end;) {
    if (const size_t len = MatchContraction(f, pos, /*fold=*/true); len > 0) {
      pos += len;
      sink.Add(pos);
      continue;
    }
    if (!f.CrLf(pos) && !f.Number(pos) && (f.Letter(pos) || f.Letter(pos + 1))) {
      ++pos;  // the optional prefix, or the first letter
      while (f.Letter(pos)) ++pos;
      sink.Add(pos);
      continue;
    }
    if (f.Number(pos)) {
      const size_t start = pos;
      while (f.Number(pos) && pos - start < max_digits) ++pos;
      sink.Add(pos);
      continue;
    }
    const size_t body = f.Cp(pos) == ' ' ? pos + 1 : pos;
    if (f.Symbol(body)) {
      pos = body;
      while (f.Symbol(pos)) ++pos;
      while (f.CrLf(pos)) ++pos;
      sink.Add(pos);
      continue;
    }
    const size_t next = MatchWhitespace(f, pos, /*newline_rule=*/true);
    pos = next > pos ? next : pos + 1;
    sink.Add(pos);
  }
}

// A simple regex applied with std::regex_iterator semantics: leftmost match, then continue after
// it; matches and the gaps between them become words. `match(f, pos)` returns the match length
// at `pos` (0: none).
template <typename MatchFn>
void SplitMatches(const Fragment& f, MatchFn match, std::vector<size_t>* out) {
  WordSink sink(out, f.ini);
  for (size_t pos = f.ini; pos < f.end;) {
    const size_t len = match(f, pos);
    if (len == 0) {
      ++pos;
      continue;
    }
    sink.Add(pos);  // the gap before the match, if any
    pos += len;
    sink.Add(pos);
  }
  sink.Add(f.end);
}

// Runs one regex over every current word and replaces the list with the finer split.
template <typename SplitFn>
std::vector<size_t> ApplyPass(const std::vector<uint32_t>& cps, const std::vector<size_t>& words,
                              SplitFn split) {
  std::vector<size_t> out;
  out.reserve(words.size());
  size_t start = 0;
  for (const size_t len : words) {
    split(Fragment{cps, start, start + len}, &out);
    start += len;
  }
  return out;
}

size_t RunLength(const Fragment& f, size_t pos, bool (*pred)(uint32_t)) {
  size_t n = 0;
  while (f.In(pos + n) && pred(f.cps[pos + n])) ++n;
  return n;
}

bool IsNumberCp(uint32_t cp) { return ClassifyCodepoint(cp) == CpClass::kNumber; }

// [\p{P}\$\+<=>\^~\|] of the "default" pre-tokenizer.
bool IsDefaultPunct(uint32_t cp) {
  if (ClassifyCodepoint(cp) == CpClass::kPunct) return true;
  return cp < 128 &&
         std::string_view("$+<=>^~|").find(static_cast<char>(cp)) != std::string_view::npos;
}

bool IsAsciiDigit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

}  // namespace

CpClass ClassifyCodepoint(uint32_t cp) {
  static const std::array<CpClass, 128> kAscii = MakeAsciiClasses();
  if (cp < 128) return kAscii[cp];
  if (cp > kMaxCodepoint) return CpClass::kOther;
  const auto it = std::upper_bound(std::begin(kCpRanges), std::end(kCpRanges), cp,
                                   [](uint32_t c, const CpRange& r) { return c < r.first; });
  return std::prev(it)->cls;
}

std::vector<uint32_t> DecodeUtf8Lenient(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    if (!ReadUtf8(text, &pos, &cp)) {
      ++pos;  // llama.cpp skips one byte per failure
      cp = kReplacement;
    }
    // NOTE: llama.cpp would throw while re-encoding a value past U+10FFFF; we substitute instead.
    cps.push_back(cp > kMaxCodepoint ? kReplacement : cp);
  }
  return cps;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp <= 0x7F) {
    out->push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's bytes_to_unicode(): bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF keep their value; the
// remaining 68 bytes take U+0100, U+0101, ... in increasing byte order.
uint32_t ByteToUnicode(uint8_t byte) {
  static const std::array<uint32_t, 256> kMap = [] {
    std::array<uint32_t, 256> map{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      map[b] = keep ? b : next++;
    }
    return map;
  }();
  return kMap[byte];
}

int UnicodeToByte(uint32_t cp) {
  static const std::array<int16_t, 324> kInverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    for (uint32_t b = 0; b < 256; ++b) inv[ByteToUnicode(static_cast<uint8_t>(b))] = b;
    return inv;
  }();
  return cp < kInverse.size() ? kInverse[cp] : -1;
}

absl::StatusOr<PreTokenizer> PreTokenizerFromName(std::string_view name) {
  if (name == "default") return PreTokenizer::kDefault;
  if (name == "gpt-2" || name == "gpt2") return PreTokenizer::kGpt2;
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r") {
    return PreTokenizer::kSmollm;
  }
  if (name == "llama3" || name == "llama-bpe" || name == "llama-v3") return PreTokenizer::kLlama3;
  if (name == "qwen2") return PreTokenizer::kQwen2;
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.ggml.pre: unsupported pre-tokenizer \"", std::string(name),
                   "\" (supported: default, gpt2, smollm, llama3/llama-bpe, qwen2)"));
}

std::vector<size_t> PreTokenize(const std::vector<uint32_t>& cps, PreTokenizer pre) {
  std::vector<size_t> words;
  if (cps.empty()) return words;
  words.push_back(cps.size());
  const auto gpt2 = [](const Fragment& f, std::vector<size_t>* out) { SplitGpt2(f, out); };
  const auto runs_of = [](bool (*pred)(uint32_t)) {
    return [pred](const Fragment& f, std::vector<size_t>* out) {
      SplitMatches(
          f, [pred](const Fragment& g, size_t p) { return RunLength(g, p, pred); }, out);
    };
  };
  switch (pre) {
    case PreTokenizer::kDefault:
      words = ApplyPass(cps, words, runs_of(IsDefaultPunct));
      words = ApplyPass(cps, words, gpt2);
      words = ApplyPass(cps, words, runs_of(IsNumberCp));
      return ApplyPass(cps, words, [](const Fragment& f, std::vector<size_t>* out) {
        SplitMatches(
            f,
            [](const Fragment& g, size_t p) -> size_t {
              return RunLength(g, p, IsAsciiDigit) >= 3 ? 3 : 0;
            },
            out);
      });
    case PreTokenizer::kGpt2:
      return ApplyPass(cps, words, gpt2);
    case PreTokenizer::kSmollm:
      words = ApplyPass(cps, words, [](const Fragment& f, std::vector<size_t>* out) {
        SplitMatches(
            f, [](const Fragment& g, size_t p) -> size_t { return g.Number(p) ? 1 : 0; }, out);
      });
      return ApplyPass(cps, words, gpt2);
    case PreTokenizer::kLlama3:
    case PreTokenizer::kQwen2: {
      const size_t max_digits = pre == PreTokenizer::kLlama3 ? 3 : 1;
      return ApplyPass(cps, words, [max_digits](const Fragment& f, std::vector<size_t>* out) {
        SplitLlama3(f, max_digits, out);
      });
    }
  }
  return words;
}

}  // namespace glimpse::model
