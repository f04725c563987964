// Unicode text segmentation for the byte-level BPE tokenizer: UTF-8 decoding, codepoint classes,
// the GPT-2 byte<->unicode mapping and the pre-tokenizers ("pre" in GGUF) that split text into
// words before BPE.
//
// Everything here reproduces llama.cpp (src/unicode.cpp, src/llama-vocab.cpp), which is our
// oracle, including its quirks:
//   - UTF-8 decoding does not reject overlong forms or surrogates; each byte that cannot start or
//     continue a sequence becomes U+FFFD (llama.cpp's unicode_cpts_from_utf8).
//   - Classes come from Unicode 15.1 (tools/gen_unicode_tables.py), "whitespace" is the explicit
//     White_Space list, and unassigned codepoints count as "other" (matched by [^\s\p{L}\p{N}]).
//   - The GPT-2 regex is the hand-written splitter of unicode_regex_split_custom_gpt2, whose
//     \s+(?!\S) leaves the last whitespace of a run for the next word.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::model {

// One class per codepoint; kWhitespace overrides the general category (U+0009 is Cc but space).
enum class CpClass : uint8_t { kOther, kLetter, kNumber, kWhitespace, kPunct };

// Codepoints past U+10FFFF are kOther.
CpClass ClassifyCodepoint(uint32_t cp);

// Decodes like llama.cpp: never fails; see the header comment for how bad bytes are handled.
// Values above U+10FFFF (lead bytes F5..F7) also become U+FFFD.
std::vector<uint32_t> DecodeUtf8Lenient(std::string_view text);

// Appends the UTF-8 encoding of `cp` (<= U+10FFFF; surrogates are encoded as-is, as llama.cpp
// does).
void AppendUtf8(uint32_t cp, std::string* out);

// GPT-2 bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order. UnicodeToByte returns -1 for codepoints outside that image.
uint32_t ByteToUnicode(uint8_t byte);
int UnicodeToByte(uint32_t cp);

// The regex families of llama.cpp's LLAMA_VOCAB_PRE_TYPE_* that we support.
enum class PreTokenizer {
  kDefault,  // "default": [\p{P}$+<=>^~|]+ , GPT-2 , \p{N}+ , [0-9][0-9][0-9]
  kGpt2,     // "gpt-2"/"gpt2": the GPT-2 regex alone
  kSmollm,   // "smollm" (and starcoder/refact/command-r): \p{N} then the GPT-2 regex
  kLlama3,   // "llama3"/"llama-bpe"/"llama-v3": llama3 regex, \p{N}{1,3}; merges may be skipped
  kQwen2,    // "qwen2": the llama3 regex with single digits (\p{N})
};

// InvalidArgument naming `name` when it is not one of the above.
absl::StatusOr<PreTokenizer> PreTokenizerFromName(std::string_view name);

// Splits `cps` into words; returns each word's length in codepoints (all > 0, summing to
// cps.size()). The regexes of `pre` are applied in sequence, each one within the pieces of the
// previous, with both matches and the gaps between them becoming pieces (unicode_regex_split).
std::vector<size_t> PreTokenize(const std::vector<uint32_t>& cps, PreTokenizer pre);

}  // namespace glimpse::model
