// Byte-level BPE as llama.cpp does it (src/llama-vocab.cpp: tokenizer_st_partition,
// llm_tokenizer_bpe_session), on raw bytes instead of byte-encoded strings: a word's symbols start
// as single bytes, and the lowest-rank adjacent pair (leftmost on ties) is merged until no pair
// has a rank.
#include "core/model/tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/model/tokenizer_internal.h"
#include "core/model/unicode.h"

namespace glimpse::model {
namespace tokenizer_internal {

std::string ByteEncode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (const char c : raw) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

}  // namespace tokenizer_internal

namespace {

using tokenizer_internal::ByteEncode;
using tokenizer_internal::kTypeControl;
using tokenizer_internal::kTypeNormal;
using tokenizer_internal::kTypeUnknown;
using tokenizer_internal::kTypeUserDefined;
using tokenizer_internal::VocabSpec;

// Texts that end a turn in the chat templates we know, besides the eos id.
constexpr std::string_view kEndOfGenerationTexts[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>",
                                                      "<|end_of_text|>"};

constexpr char kImStart[] = "<|im_start|>";
constexpr char kImEnd[] = "<|im_end|>";

// Inverse of ByteEncode. Codepoints outside the byte image are kept as their UTF-8 (llama.cpp
// marks them [UNK_BYTE_…]; no real GPT-2 vocabulary has them).
std::string ByteDecode(std::string_view encoded) {
  std::string out;
  out.reserve(encoded.size());
  for (const uint32_t cp : DecodeUtf8Lenient(encoded)) {
    const int byte = UnicodeToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      AppendUtf8(cp, &out);
    }
  }
  return out;
}

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A piece of the input: literal special token, or raw text still to be pre-tokenized.
struct Fragment {
  int32_t special_id;  // -1 for raw text
  size_t offset;
  size_t length;
};

// Returns the default system prompt of a ChatML template that adds one when the first message is
// not "system" (SmolLM2: `{% if loop.first and messages[0]['role'] != 'system' %}{{
// '<|im_start|>system\nYou are ...<|im_end|>\n' }}`), or "" when it has none.
std::string DefaultSystemPrompt(std::string_view tmpl) {
  if (tmpl.find("messages[0]['role'] != 'system'") == std::string_view::npos) return "";
  const std::string open = absl::StrCat(kImStart, "system\n");
  const size_t start = tmpl.find(open);
  if (start == std::string_view::npos) return "";
  const size_t body = start + open.size();
  const size_t end = tmpl.find(kImEnd, body);
  if (end == std::string_view::npos) return "";
  const std::string_view text = tmpl.substr(body, end - body);
  // A Jinja expression here means the prompt is computed, not a literal we can copy.
  if (text.find("{{") != std::string_view::npos || text.find('\'') != std::string_view::npos) {
    return "";
  }
  return std::string(text);
}

class BpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(VocabSpec spec);

  std::vector<int32_t> Encode(std::string_view text) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& tokens) const override;
  absl::StatusOr<std::string> TokenText(int32_t token) const override;
  std::string ApplyChatTemplate(const std::vector<ChatTurn>& turns,
                                bool add_generation_prompt) const override;

  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool IsEndOfGeneration(int32_t token) const override {
    return token >= 0 && token < vocab_size() && end_of_generation_[token];
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged text
  };

  BpeTokenizer() = default;
  absl::Status LoadVocab(const VocabSpec& spec);
  void LoadMerges(const VocabSpec& spec);
  absl::Status LoadSpecialIds(const VocabSpec& spec);
  // Id of an encoded string: its token id, or a fresh id >= vocab_size() for merge operands and
  // results that are not tokens (llama.cpp compares strings, so those can still merge further).
  int32_t SymbolId(const std::string& encoded);

  std::vector<Fragment> PartitionSpecials(std::string_view text) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  void EmitSymbol(int32_t symbol, std::vector<int32_t>* out) const;

  // All members are constant after construction.
  std::vector<std::string> token_bytes_;  // [vocab] raw bytes Decode() emits for each token
  std::vector<int64_t> token_types_;      // [vocab]
  std::unordered_map<std::string, int32_t> symbol_ids_;  // encoded text -> symbol id
  std::vector<std::string> extra_symbols_;               // encoded text of ids >= vocab_size()
  std::array<int32_t, 256> byte_symbol_{};               // symbol id of each single raw byte
  std::unordered_map<uint64_t, Merge> merges_;           // PairKey(left, right) -> merge
  std::vector<int32_t> specials_;                        // matched literally, longest first
  std::vector<bool> end_of_generation_;                  // [vocab]
  PreTokenizer pre_ = PreTokenizer::kDefault;
  bool ignore_merges_ = false;  // llama3: a word that is a whole token is emitted as is
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::string default_system_prompt_;
};

int32_t BpeTokenizer::SymbolId(const std::string& encoded) {
  const auto [it, inserted] = symbol_ids_.emplace(
      encoded, static_cast<int32_t>(token_bytes_.size() + extra_symbols_.size()));
  if (inserted) extra_symbols_.push_back(encoded);
  return it->second;
}

absl::Status BpeTokenizer::LoadVocab(const VocabSpec& spec) {
  const std::vector<std::string>& tokens = spec.tokens;
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(spec.tokens_field, " is empty"));
  }
  token_types_ = spec.token_types;
  if (token_types_.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d token types for %d tokens", spec.tokens_field, token_types_.size(), tokens.size()));
  }
  token_bytes_.resize(tokens.size());
  symbol_ids_.reserve(tokens.size() * 2);
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty()) continue;  // a hole: never produced, decodes to ""
    const auto [it, inserted] = symbol_ids_.emplace(tokens[id], static_cast<int32_t>(id));
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: duplicate token \"%s\" (ids %d and %d)", spec.tokens_field,
                          tokens[id], it->second, id));
    }
    const int64_t type = token_types_[id];
    if (type == kTypeNormal) {
      token_bytes_[id] = ByteDecode(tokens[id]);
    } else if (type == kTypeUnknown || type == kTypeControl || type == kTypeUserDefined) {
      // Stored as raw text, and matched literally in the input (cache_special_tokens).
      token_bytes_[id] = tokens[id];
      specials_.push_back(static_cast<int32_t>(id));
    }
    // Other types (unused, byte) decode to nothing, as llama.cpp's token_to_piece does.
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[a].size() > token_bytes_[b].size();
  });
  for (int b = 0; b < 256; ++b) {
    byte_symbol_[b] = SymbolId(ByteEncode(std::string(1, static_cast<char>(b))));
  }
  return absl::OkStatus();
}

void BpeTokenizer::LoadMerges(const VocabSpec& spec) {
  merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const int32_t left_id = SymbolId(left);
    const int32_t right_id = SymbolId(right);
    const int32_t result_id = SymbolId(left + right);
    // The first occurrence of a pair keeps its rank (llama.cpp's bpe_ranks.emplace).
    merges_.emplace(PairKey(left_id, right_id), Merge{static_cast<int32_t>(rank), result_id});
  }
}

absl::Status BpeTokenizer::LoadSpecialIds(const VocabSpec& spec) {
  for (const int32_t id : {spec.bos_id, spec.eos_id}) {
    if (id < -1 || id >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: special token id %d is outside the vocabulary of %d tokens",
                          spec.tokens_field, id, vocab_size()));
    }
  }
  bos_id_ = spec.bos_id;
  eos_id_ = spec.eos_id;
  end_of_generation_.assign(token_bytes_.size(), false);
  if (eos_id_ >= 0) end_of_generation_[eos_id_] = true;
  for (const int32_t id : specials_) {
    for (const std::string_view text : kEndOfGenerationTexts) {
      if (token_bytes_[id] == text) end_of_generation_[id] = true;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(VocabSpec spec) {
  auto tokenizer = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  tokenizer->pre_ = spec.pre;
  tokenizer->ignore_merges_ = spec.ignore_merges;
  RETURN_IF_ERROR(tokenizer->LoadVocab(spec));
  tokenizer->LoadMerges(spec);
  RETURN_IF_ERROR(tokenizer->LoadSpecialIds(spec));
  tokenizer->default_system_prompt_ = DefaultSystemPrompt(spec.chat_template);
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

// ---- GGUF front-end ----

absl::Status ReadGgufMerges(const GgufFile& gguf, VocabSpec* spec) {
  ASSIGN_OR_RETURN(const std::vector<std::string> merges,
                   gguf.GetStringArray("tokenizer.ggml.merges"));
  spec->merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // Split at the first space after the first character, as llama.cpp does (find(' ', 1)).
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tokenizer.ggml.merges[%d] = \"%s\" is not \"left right\"", rank, merge));
    }
    spec->merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
  }
  return absl::OkStatus();
}

// Reads an optional token id key into *id, checking it against the vocabulary size.
absl::Status ReadGgufTokenId(const GgufFile& gguf, std::string_view key, size_t vocab,
                             int32_t* id) {
  if (!gguf.HasKey(key)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const uint64_t value, gguf.GetUint(key));
  if (value >= vocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %d is outside the vocabulary of %d tokens", key, value, vocab));
  }
  *id = static_cast<int32_t>(value);
  return absl::OkStatus();
}

absl::StatusOr<VocabSpec> ReadGgufSpec(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(const std::string model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.model: unsupported tokenizer model \"", model, "\" (supported: gpt2)"));
  }
  VocabSpec spec;
  spec.tokens_field = "tokenizer.ggml.tokens";
  std::string pre_name = "default";  // llama.cpp's fallback for files without the key
  if (gguf.HasKey("tokenizer.ggml.pre")) {
    ASSIGN_OR_RETURN(pre_name, gguf.GetString("tokenizer.ggml.pre"));
  }
  ASSIGN_OR_RETURN(spec.pre, PreTokenizerFromName(pre_name));
  spec.ignore_merges = spec.pre == PreTokenizer::kLlama3;
  ASSIGN_OR_RETURN(spec.tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  spec.token_types.assign(spec.tokens.size(), kTypeNormal);
  if (gguf.HasKey("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(spec.token_types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    if (spec.token_types.size() != spec.tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tokenizer.ggml.token_type has %d entries, tokenizer.ggml.tokens has %d",
                          spec.token_types.size(), spec.tokens.size()));
    }
  }
  RETURN_IF_ERROR(ReadGgufMerges(gguf, &spec));
  const size_t vocab = spec.tokens.size();
  int32_t pad_id = -1;  // validated, unused
  RETURN_IF_ERROR(ReadGgufTokenId(gguf, "tokenizer.ggml.bos_token_id", vocab, &spec.bos_id));
  RETURN_IF_ERROR(ReadGgufTokenId(gguf, "tokenizer.ggml.eos_token_id", vocab, &spec.eos_id));
  RETURN_IF_ERROR(ReadGgufTokenId(gguf, "tokenizer.ggml.padding_token_id", vocab, &pad_id));
  if (gguf.HasKey("tokenizer.chat_template")) {
    ASSIGN_OR_RETURN(spec.chat_template, gguf.GetString("tokenizer.chat_template"));
  }
  return spec;
}

// tokenizer_st_partition: each special token, longest first, is cut out of every raw fragment
// left to right. (Not the same as longest-match-at-each-position when specials overlap.)
std::vector<Fragment> BpeTokenizer::PartitionSpecials(std::string_view text) const {
  std::vector<Fragment> fragments = {{-1, 0, text.size()}};
  for (const int32_t id : specials_) {
    const std::string& special = token_bytes_[id];
    std::vector<Fragment> next;
    next.reserve(fragments.size());
    for (const Fragment& f : fragments) {
      if (f.special_id >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.offset, f.length);
      size_t pos = 0;
      for (size_t hit; (hit = raw.find(special, pos)) != std::string_view::npos;) {
        if (hit > pos) next.push_back({-1, f.offset + pos, hit - pos});
        next.push_back({id, f.offset + hit, special.size()});
        pos = hit + special.size();
      }
      if (pos < raw.size()) next.push_back({-1, f.offset + pos, raw.size() - pos});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::string word;
  for (const Fragment& f : PartitionSpecials(text)) {
    if (f.special_id >= 0) {
      out.push_back(f.special_id);
      continue;
    }
    const std::vector<uint32_t> cps = DecodeUtf8Lenient(text.substr(f.offset, f.length));
    size_t start = 0;
    for (const size_t len : PreTokenize(cps, pre_)) {
      // Re-encoding (not slicing the input) is what turns invalid bytes into U+FFFD.
      word.clear();
      for (size_t i = start; i < start + len; ++i) AppendUtf8(cps[i], &word);
      EncodeWord(word, &out);
      start += len;
    }
  }
  return out;
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    const auto it = symbol_ids_.find(ByteEncode(word));
    if (it != symbol_ids_.end() && it->second < vocab_size()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank;
    int32_t left;  // symbol index; right is symbols[left].next at push time
    int32_t left_id;
    int32_t right_id;
    int32_t result_id;
    // std::priority_queue pops the largest: invert to get (lowest rank, leftmost) first.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_symbol_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[l.next];
    const auto it = merges_.find(PairKey(l.id, r.id));
    if (it != merges_.end()) queue.push({it->second.rank, left, l.id, r.id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Stale when either side has changed since the push (ids only change by growing, so equal
    // ids mean equal text, which is llama.cpp's check).
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result_id;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) EmitSymbol(symbols[i].id, out);
}

// A final symbol that is not a token falls back to the single-byte tokens of its encoded text,
// dropping bytes that have none (llm_tokenizer_bpe_session::tokenize).
void BpeTokenizer::EmitSymbol(int32_t symbol, std::vector<int32_t>* out) const {
  if (symbol < vocab_size()) {
    out->push_back(symbol);
    return;
  }
  for (const char c : extra_symbols_[symbol - vocab_size()]) {
    const auto it = symbol_ids_.find(std::string(1, c));
    if (it != symbol_ids_.end() && it->second < vocab_size()) out->push_back(it->second);
  }
}

absl::StatusOr<std::string> BpeTokenizer::TokenText(int32_t token) const {
  if (token < 0 || token >= vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token id %d is outside the vocabulary of %d tokens", token, vocab_size()));
  }
  return token_bytes_[token];
}

absl::StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& tokens) const {
  std::string out;
  for (const int32_t token : tokens) {
    ASSIGN_OR_RETURN(const std::string text, TokenText(token));
    out += text;
  }
  return out;
}

std::string BpeTokenizer::ApplyChatTemplate(const std::vector<ChatTurn>& turns,
                                            bool add_generation_prompt) const {
  std::string out;
  const auto append_turn = [&](const std::string& role, const std::string& content) {
    absl::StrAppend(&out, kImStart, role, "\n", content, kImEnd, "\n");
  };
  // The template adds its default system turn inside the message loop (loop.first), so an empty
  // conversation gets none.
  if (!default_system_prompt_.empty() && !turns.empty() && turns.front().role != "system") {
    append_turn("system", default_system_prompt_);
  }
  for (const ChatTurn& turn : turns) append_turn(turn.role, turn.content);
  if (add_generation_prompt) absl::StrAppend(&out, kImStart, "assistant\n");
  return out;
}

}  // namespace

namespace tokenizer_internal {

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildBpeTokenizer(VocabSpec spec) {
  return BpeTokenizer::Create(std::move(spec));
}

}  // namespace tokenizer_internal

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(VocabSpec spec, ReadGgufSpec(gguf));
  return BpeTokenizer::Create(std::move(spec));
}

}  // namespace glimpse::model
