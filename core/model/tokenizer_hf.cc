// Tokenizer::FromHfDirectory: translates a Hugging Face tokenizer.json (the `tokenizers` library's
// format) into the VocabSpec that FromGguf also fills, the way llama.cpp's convert_hf_to_gguf.py
// does: vocab entries become normal tokens, added_tokens become control (special) or
// user-defined tokens matched literally, and the pre_tokenizer is recognised by structure and
// exact regex text as one of the PreTokenizer modes. Nothing here throws: the JSON is parsed
// without exceptions and every field's type is checked before it is read.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_internal.h"
#include "nlohmann/json.hpp"

namespace glimpse::model {
namespace {

using json = nlohmann::json;
using tokenizer_internal::VocabSpec;

// Ids past this are rejected rather than allocated (the largest real vocabularies are ~256k).
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// The Split regexes of the pre-tokenizers we support, exactly as tokenizer.json spells them
// (transformers' convert_slow_tokenizer.py: TikTokenConverter for llama3, Qwen2Converter).
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Kind { kString, kBool, kInteger, kArray, kObject };

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kString:
      return "a string";
    case Kind::kBool:
      return "a boolean";
    case Kind::kInteger:
      return "an integer";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "?";
}

bool IsKind(const json& value, Kind kind) {
  switch (kind) {
    case Kind::kString:
      return value.is_string();
    case Kind::kBool:
      return value.is_boolean();
    case Kind::kInteger:
      return value.is_number_integer();
    case Kind::kArray:
      return value.is_array();
    case Kind::kObject:
      return value.is_object();
  }
  return false;
}

// A compact rendering of a JSON value for error messages.
std::string Show(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

// One parsed JSON file. Errors read "<path>: <field> <what>".
class JsonFile {
 public:
  // NotFound when the file does not exist; InvalidArgument when it is not a JSON object.
  static absl::StatusOr<JsonFile> Read(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || in.bad()) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot read: ", std::strerror(errno)));
    }
    JsonFile file;
    file.path_ = path;
    file.root_ = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (file.root_.is_discarded()) return absl::InvalidArgumentError(path + ": not valid JSON");
    if (!file.root_.is_object()) {
      return absl::InvalidArgumentError(path + ": the top level is not a JSON object");
    }
    return file;
  }

  const json& root() const { return root_; }

  absl::Status Invalid(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": ", std::string(field), " ", std::string(what)));
  }
  absl::Status Unsupported(std::string_view field, std::string_view what) const {
    return absl::UnimplementedError(
        absl::StrCat(path_, ": ", std::string(field), " ", std::string(what)));
  }

  // Member `key` of `obj` (an object named `field`, "" for the root): nullptr when it is absent or
  // null and not `required`; InvalidArgument when it is missing but required, or not of `kind`.
  absl::StatusOr<const json*> Get(const json& obj, const std::string& field, const char* key,
                                  Kind kind, bool required = false) const {
    const std::string name = field.empty() ? key : absl::StrCat(field, ".", key);
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) return Invalid(name, "is missing");
      return nullptr;
    }
    if (!IsKind(*it, kind)) {
      return Invalid(name, absl::StrCat("is ", Show(*it), ", not ", KindName(kind)));
    }
    return &*it;
  }

  // A token id: an integer in [0, kMaxTokenId).
  absl::StatusOr<int32_t> Id(const json& value, std::string_view field) const {
    if (value.is_number_unsigned() && value.get<uint64_t>() < static_cast<uint64_t>(kMaxTokenId)) {
      return static_cast<int32_t>(value.get<uint64_t>());
    }
    if (value.is_number_integer() && value.get<int64_t>() >= 0 &&
        value.get<int64_t>() < kMaxTokenId) {
      return static_cast<int32_t>(value.get<int64_t>());
    }
    return Invalid(field,
                   absl::StrCat("is ", Show(value), ", not a token id in [0, ", kMaxTokenId, ")"));
  }

 private:
  std::string path_;
  json root_;
};

// ---- Structural matching of pre-tokenizers (never throws: find and == are total) ----

bool Has(const json& obj, const char* key, const json& value) {
  if (!obj.is_object()) return false;
  const auto it = obj.find(key);
  return it != obj.end() && *it == value;
}

bool AbsentOr(const json& obj, const char* key, const json& value) {
  if (!obj.is_object()) return false;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() || *it == value;
}

// ByteLevel without a prefix space; use_regex defaults to true in `tokenizers`.
bool IsByteLevel(const json& p, bool use_regex) {
  return Has(p, "type", "ByteLevel") && AbsentOr(p, "add_prefix_space", false) &&
         (use_regex ? AbsentOr(p, "use_regex", true) : Has(p, "use_regex", false));
}

bool IsSplit(const json& p, const char* regex) {
  return Has(p, "type", "Split") && p.contains("pattern") && Has(p["pattern"], "Regex", regex) &&
         Has(p, "behavior", "Isolated") && AbsentOr(p, "invert", false);
}

// The two steps of a Sequence pre-tokenizer, or nullopt when `p` is not a two-step Sequence.
std::optional<std::pair<const json*, const json*>> TwoSteps(const json& p) {
  if (!Has(p, "type", "Sequence") || !p.contains("pretokenizers")) return std::nullopt;
  const json& steps = p["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2) return std::nullopt;
  return std::make_pair(&steps[0], &steps[1]);
}

absl::StatusOr<PreTokenizer> ReadPreTokenizer(const JsonFile& file) {
  ASSIGN_OR_RETURN(const json* p, file.Get(file.root(), "", "pre_tokenizer", Kind::kObject));
  if (p != nullptr) {
    if (IsByteLevel(*p, /*use_regex=*/true)) return PreTokenizer::kGpt2;
    if (const auto steps = TwoSteps(*p)) {
      const auto [first, second] = *steps;
      if (Has(*first, "type", "Digits") && Has(*first, "individual_digits", true) &&
          IsByteLevel(*second, /*use_regex=*/true)) {
        return PreTokenizer::kSmollm;
      }
      if (IsByteLevel(*second, /*use_regex=*/false)) {
        if (IsSplit(*first, kLlama3Regex)) return PreTokenizer::kLlama3;
        if (IsSplit(*first, kQwen2Regex)) return PreTokenizer::kQwen2;
      }
    }
  }
  return file.Invalid(
      "pre_tokenizer",
      absl::StrCat("is unsupported: ", p == nullptr ? "none" : Show(*p),
                   " (supported: ByteLevel; Sequence[Digits(individual_digits), ByteLevel]; "
                   "Sequence[Split(llama3 or qwen2 regex), ByteLevel(use_regex=false)], all "
                   "without add_prefix_space)"));
}

// ---- tokenizer.json ----

// Rejects BPE options that change tokenization in ways we do not implement.
absl::Status CheckBpeOptions(const JsonFile& file, const json& model) {
  ASSIGN_OR_RETURN(const json* byte_fallback,
                   file.Get(model, "model", "byte_fallback", Kind::kBool));
  if (byte_fallback != nullptr && byte_fallback->get<bool>()) {
    return file.Unsupported("model.byte_fallback",
                            "is true: byte-fallback (SentencePiece-style) BPE is not supported");
  }
  const auto it = model.find("dropout");
  if (it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    return file.Unsupported("model.dropout", absl::StrCat("is ", Show(*it), ": not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    ASSIGN_OR_RETURN(const json* affix, file.Get(model, "model", key, Kind::kString));
    if (affix != nullptr && !affix->get_ref<const std::string&>().empty()) {
      return file.Unsupported(absl::StrCat("model.", key),
                              absl::StrCat("is ", Show(*affix), ": not supported"));
    }
  }
  ASSIGN_OR_RETURN(const json* normalizer, file.Get(file.root(), "", "normalizer", Kind::kObject));
  // NFC (Qwen2) is accepted but not applied, as llama.cpp does: only non-NFC input differs.
  if (normalizer != nullptr && !Has(*normalizer, "type", "NFC")) {
    return file.Unsupported(
        "normalizer", absl::StrCat("is ", Show(*normalizer), ": only none or NFC is supported"));
  }
  ASSIGN_OR_RETURN(const json* decoder,
                   file.Get(file.root(), "", "decoder", Kind::kObject, /*required=*/true));
  if (!Has(*decoder, "type", "ByteLevel")) {
    return file.Invalid("decoder", absl::StrCat("is ", Show(*decoder), ", expected ByteLevel"));
  }
  return absl::OkStatus();
}

// Places token `text` at `id`, growing the vocabulary; a second vocab entry for an id is an error.
absl::Status PlaceToken(const JsonFile& file, std::string_view field, int32_t id, std::string text,
                        int64_t type, VocabSpec* spec) {
  if (static_cast<size_t>(id) >= spec->tokens.size()) {
    spec->tokens.resize(id + 1);
    spec->token_types.resize(id + 1, tokenizer_internal::kTypeUnused);
  }
  if (type == tokenizer_internal::kTypeNormal && !spec->tokens[id].empty()) {
    return file.Invalid(field, absl::StrFormat("gives id %d to both \"%s\" and \"%s\"", id,
                                               spec->tokens[id], text));
  }
  spec->tokens[id] = std::move(text);
  spec->token_types[id] = type;
  return absl::OkStatus();
}

absl::Status ReadVocab(const JsonFile& file, const json& model, VocabSpec* spec) {
  ASSIGN_OR_RETURN(const json* vocab,
                   file.Get(model, "model", "vocab", Kind::kObject, /*required=*/true));
  if (vocab->empty()) return file.Invalid("model.vocab", "is empty");
  for (const auto& [text, value] : vocab->items()) {
    const std::string field = absl::StrCat("model.vocab[\"", text, "\"]");
    ASSIGN_OR_RETURN(const int32_t id, file.Id(value, field));
    if (text.empty()) return file.Invalid(field, "is an empty token");
    RETURN_IF_ERROR(
        PlaceToken(file, "model.vocab", id, text, tokenizer_internal::kTypeNormal, spec));
  }
  return absl::OkStatus();
}

// Both formats of `tokenizers`: "left right" strings (split at the one space) and [left, right].
absl::Status ReadMerges(const JsonFile& file, const json& model, VocabSpec* spec) {
  ASSIGN_OR_RETURN(const json* merges,
                   file.Get(model, "model", "merges", Kind::kArray, /*required=*/true));
  spec->merges.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& merge = (*merges)[rank];
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space != std::string::npos && space > 0 && space + 1 < text.size() &&
          text.find(' ', space + 1) == std::string::npos) {
        spec->merges.emplace_back(text.substr(0, space), text.substr(space + 1));
        continue;
      }
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string() && !merge[0].get_ref<const std::string&>().empty() &&
               !merge[1].get_ref<const std::string&>().empty()) {
      spec->merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    return file.Invalid(absl::StrCat("model.merges[", rank, "]"),
                        absl::StrCat("is ", Show(merge), ", not \"left right\" or [left, right]"));
  }
  return absl::OkStatus();
}

absl::Status ReadAddedToken(const JsonFile& file, const json& entry, const std::string& field,
                            VocabSpec* spec) {
  if (!entry.is_object())
    return file.Invalid(field, absl::StrCat("is ", Show(entry), ", not an object"));
  ASSIGN_OR_RETURN(const json* id_json, file.Get(entry, field, "id", Kind::kInteger, true));
  ASSIGN_OR_RETURN(const int32_t id, file.Id(*id_json, absl::StrCat(field, ".id")));
  ASSIGN_OR_RETURN(const json* content, file.Get(entry, field, "content", Kind::kString, true));
  if (content->get_ref<const std::string&>().empty()) {
    return file.Invalid(absl::StrCat(field, ".content"), "is empty");
  }
  ASSIGN_OR_RETURN(const json* special, file.Get(entry, field, "special", Kind::kBool));
  for (const char* key : {"lstrip", "rstrip", "single_word"}) {
    ASSIGN_OR_RETURN(const json* flag, file.Get(entry, field, key, Kind::kBool));
    if (flag != nullptr && flag->get<bool>()) {
      return file.Unsupported(absl::StrCat(field, ".", key), "is true: not supported");
    }
  }
  const bool is_special = special != nullptr && special->get<bool>();
  return PlaceToken(
      file, field, id, content->get<std::string>(),
      is_special ? tokenizer_internal::kTypeControl : tokenizer_internal::kTypeUserDefined, spec);
}

absl::StatusOr<VocabSpec> ReadTokenizerJson(const std::string& path) {
  ASSIGN_OR_RETURN(const JsonFile file, JsonFile::Read(path));
  ASSIGN_OR_RETURN(const json* model,
                   file.Get(file.root(), "", "model", Kind::kObject, /*required=*/true));
  ASSIGN_OR_RETURN(const json* type, file.Get(*model, "model", "type", Kind::kString, true));
  if (type->get_ref<const std::string&>() != "BPE") {
    return file.Invalid("model.type", absl::StrCat("is ", Show(*type), " (supported: \"BPE\")"));
  }
  RETURN_IF_ERROR(CheckBpeOptions(file, *model));
  VocabSpec spec;
  spec.tokens_field = absl::StrCat(path, ": model.vocab and added_tokens");
  ASSIGN_OR_RETURN(spec.pre, ReadPreTokenizer(file));
  ASSIGN_OR_RETURN(const json* ignore_merges,
                   file.Get(*model, "model", "ignore_merges", Kind::kBool));
  spec.ignore_merges = ignore_merges != nullptr && ignore_merges->get<bool>();
  RETURN_IF_ERROR(ReadVocab(file, *model, &spec));
  RETURN_IF_ERROR(ReadMerges(file, *model, &spec));
  ASSIGN_OR_RETURN(const json* added, file.Get(file.root(), "", "added_tokens", Kind::kArray));
  for (size_t i = 0; added != nullptr && i < added->size(); ++i) {
    RETURN_IF_ERROR(
        ReadAddedToken(file, (*added)[i], absl::StrCat("added_tokens[", i, "]"), &spec));
  }
  return spec;
}

// ---- tokenizer_config.json ----

// Id of a token given by its text: an added (literal) token, else a normal token.
std::optional<int32_t> FindToken(const VocabSpec& spec, const std::string& text) {
  const std::string encoded = tokenizer_internal::ByteEncode(text);
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const bool normal = spec.token_types[id] == tokenizer_internal::kTypeNormal;
    if (spec.tokens[id] == (normal ? encoded : text)) return static_cast<int32_t>(id);
  }
  return std::nullopt;
}

// bos_token / eos_token: a string, an AddedToken object {"content": ...}, or null.
absl::Status ReadSpecialToken(const JsonFile& file, const char* key, const VocabSpec& spec,
                              int32_t* id) {
  const auto it = file.root().find(key);
  if (it == file.root().end() || it->is_null()) return absl::OkStatus();
  const json* text = &*it;
  if (it->is_object()) {
    ASSIGN_OR_RETURN(text, file.Get(*it, key, "content", Kind::kString, true));
  }
  if (!text->is_string()) {
    return file.Invalid(key,
                        absl::StrCat("is ", Show(*it), ", not a string or {\"content\": ...}"));
  }
  const std::optional<int32_t> found = FindToken(spec, text->get<std::string>());
  if (!found.has_value()) {
    return file.Invalid(key, absl::StrCat(Show(*text), " is not in the vocabulary"));
  }
  *id = *found;
  return absl::OkStatus();
}

// chat_template: a string, or a list of {name, template} of which "default" is used.
absl::Status ReadChatTemplate(const JsonFile& file, VocabSpec* spec) {
  const auto it = file.root().find("chat_template");
  if (it == file.root().end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    spec->chat_template = it->get<std::string>();
    return absl::OkStatus();
  }
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string field = absl::StrCat("chat_template[", i, "]");
      if (!(*it)[i].is_object()) return file.Invalid(field, "is not an object");
      ASSIGN_OR_RETURN(const json* name, file.Get((*it)[i], field, "name", Kind::kString, true));
      ASSIGN_OR_RETURN(const json* tmpl,
                       file.Get((*it)[i], field, "template", Kind::kString, true));
      if (*name == "default") spec->chat_template = tmpl->get<std::string>();
    }
    return absl::OkStatus();
  }
  return file.Invalid("chat_template", "is neither a string nor a list of {name, template}");
}

// Optional files: tokenizer_config.json (bos/eos, chat_template) and chat_template.jinja, which
// newer transformers write instead of tokenizer_config.json's chat_template.
absl::Status ReadTokenizerConfig(const std::string& dir, VocabSpec* spec) {
  const std::string config_path = dir + "/tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(const JsonFile config, JsonFile::Read(config_path));
    RETURN_IF_ERROR(ReadSpecialToken(config, "bos_token", *spec, &spec->bos_id));
    RETURN_IF_ERROR(ReadSpecialToken(config, "eos_token", *spec, &spec->eos_id));
    RETURN_IF_ERROR(ReadChatTemplate(config, spec));
  }
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (spec->chat_template.empty() && std::filesystem::is_regular_file(jinja_path, ec)) {
    std::ifstream in(jinja_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return absl::NotFoundError(absl::StrCat(jinja_path, ": cannot read"));
    spec->chat_template = text.str();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfDirectory(const std::string& dir) {
  ASSIGN_OR_RETURN(VocabSpec spec, ReadTokenizerJson(dir + "/tokenizer.json"));
  RETURN_IF_ERROR(ReadTokenizerConfig(dir, &spec));
  return tokenizer_internal::BuildBpeTokenizer(std::move(spec));
}

}  // namespace glimpse::model
