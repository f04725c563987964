// Tests of Tokenizer::FromHfDirectory. The SmolLM2 tests write a tokenizer.json in Hugging Face's
// format from the real model's GGUF metadata and require the same ids as FromGguf (which matches
// llama.cpp); the synthetic tests need no model file; the fixture test compares with ids that the
// `tokenizers` library produced for tests/fixtures/tiny/<arch>/ when those fixtures exist.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/model/gguf.h"
#include "core/model/model_store.h"
#include "core/model/tokenizer.h"
#include "core/model/unicode.h"
#include "nlohmann/json.hpp"

namespace glimpse::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string SourceDir() {
  const char* dir = std::getenv("GLIMPSE_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

std::string ModelPath() {
  const char* env = std::getenv("GLIMPSE_MODEL_PATH");
  return env != nullptr && *env != '\0' ? std::string(env) : DefaultModelPath();
}

// A fresh directory under the test temp dir.
std::string MakeDir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("glimpse_tokhf_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

json SmollmPreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Digits"}, {"individual_digits", true}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", true}}}}};
}

// The Split regexes of tokenizer.json for Llama 3 and Qwen2.
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json SplitPreTokenizer(const char* regex, bool trim_offsets) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", trim_offsets},
             {"use_regex", false}}}}};
}

// A split "left right" merge as tokenizer.json writes it: a string or a [left, right] pair.
json MergeEntry(const std::string& merge, bool as_pair) {
  if (!as_pair) return merge;
  const size_t space = merge.find(' ', 1);
  return json::array({merge.substr(0, space), merge.substr(space + 1)});
}

// tokenizer.json with the fields and defaults that `tokenizers` writes for a BPE model.
json TokenizerJson(json vocab, json merges, json added_tokens, json pre_tokenizer) {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", std::move(added_tokens)},
          {"normalizer", nullptr},
          {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)}}}};
}

json AddedToken(int32_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

// Writes tokenizer.json (and tokenizer_config.json unless null) and loads the directory.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHf(const std::string& name,
                                                  const std::string& tokenizer_json,
                                                  const json& config = nullptr) {
  const std::string dir = MakeDir(name);
  WriteFile(dir + "/tokenizer.json", tokenizer_json);
  if (!config.is_null()) WriteFile(dir + "/tokenizer_config.json", config.dump());
  return Tokenizer::FromHfDirectory(dir);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHf(const std::string& name, const json& tok,
                                                  const json& config = nullptr) {
  return LoadHf(name, tok.dump(), config);
}

using Ids = std::vector<int32_t>;

// ---- SmolLM2: tokenizer.json written from the GGUF metadata ----

class SmolLmHfTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto gguf = GgufFile::Open(ModelPath());
    if (!gguf.ok()) {
      error_ = new std::string(
          "cannot open the SmolLM2 model at " + ModelPath() +
          " (set GLIMPSE_MODEL_PATH or run `make test`): " + gguf.status().ToString());
      return;
    }
    auto from_gguf = Tokenizer::FromGguf(**gguf);
    if (!from_gguf.ok()) {
      error_ = new std::string(from_gguf.status().ToString());
      return;
    }
    gguf_ = from_gguf->release();
    for (const bool pairs : {true, false}) {
      const std::string dir = WriteHfDirectory(**gguf, pairs);
      auto from_hf = Tokenizer::FromHfDirectory(dir);
      if (!from_hf.ok()) {
        error_ = new std::string(from_hf.status().ToString());
        return;
      }
      (pairs ? hf_pairs_ : hf_strings_) = from_hf->release();
    }
  }
  static void TearDownTestSuite() {
    for (Tokenizer** t : {&gguf_, &hf_pairs_, &hf_strings_}) {
      delete *t;
      *t = nullptr;
    }
    delete error_;
    error_ = nullptr;
    delete tokenizer_json_;
    tokenizer_json_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(error_, nullptr) << *error_;
    ASSERT_NE(hf_strings_, nullptr);
  }

  // tokenizer.json (merges as pairs or as strings) and tokenizer_config.json, as transformers
  // saves SmolLM2-135M-Instruct, but with the hub's Digits+ByteLevel pre-tokenizer.
  static std::string WriteHfDirectory(const GgufFile& gguf, bool merges_as_pairs) {
    const std::vector<std::string> tokens = *gguf.GetStringArray("tokenizer.ggml.tokens");
    const std::vector<int64_t> types = *gguf.GetIntArray("tokenizer.ggml.token_type");
    json vocab = json::object();
    json added = json::array();
    for (size_t id = 0; id < tokens.size(); ++id) {
      vocab[tokens[id]] = id;
      if (types[id] == 3 || types[id] == 4) {
        added.push_back(AddedToken(static_cast<int32_t>(id), tokens[id], types[id] == 3));
      }
    }
    json merges = json::array();
    const std::vector<std::string> gguf_merges = *gguf.GetStringArray("tokenizer.ggml.merges");
    for (const std::string& m : gguf_merges) {
      merges.push_back(MergeEntry(m, merges_as_pairs));
    }
    const std::string dir = MakeDir(merges_as_pairs ? "smollm_pairs" : "smollm_strings");
    json tokenizer_json = TokenizerJson(vocab, merges, added, SmollmPreTokenizer());
    WriteFile(dir + "/tokenizer.json", tokenizer_json.dump(2));
    if (merges_as_pairs) tokenizer_json_ = new json(std::move(tokenizer_json));
    const json config = {{"bos_token", tokens[*gguf.GetUint("tokenizer.ggml.bos_token_id")]},
                         {"eos_token",
                          {{"__type", "AddedToken"},
                           {"content", tokens[*gguf.GetUint("tokenizer.ggml.eos_token_id")]}}},
                         {"chat_template", *gguf.GetString("tokenizer.chat_template")},
                         {"tokenizer_class", "GPT2Tokenizer"}};
    WriteFile(dir + "/tokenizer_config.json", config.dump(2));
    return dir;
  }

  static Tokenizer* gguf_;
  static Tokenizer* hf_pairs_;
  static Tokenizer* hf_strings_;
  static std::string* error_;
  static json* tokenizer_json_;  // the SmolLM2 tokenizer.json, merges as pairs
};
Tokenizer* SmolLmHfTokenizerTest::gguf_ = nullptr;
Tokenizer* SmolLmHfTokenizerTest::hf_pairs_ = nullptr;
Tokenizer* SmolLmHfTokenizerTest::hf_strings_ = nullptr;
std::string* SmolLmHfTokenizerTest::error_ = nullptr;
json* SmolLmHfTokenizerTest::tokenizer_json_ = nullptr;

// tests/fixtures/golden/tokenizer.json: ids from llama.cpp.
TEST_F(SmolLmHfTokenizerTest, MatchesGgufAndGoldenFixtures) {
  const std::string path = SourceDir() + "/tests/fixtures/golden/tokenizer.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden fixtures " << path;
  const json golden = json::parse(in);
  int compared = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> ids = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(hf_pairs_->Encode(text), ids) << "text: " << text;
    EXPECT_EQ(hf_strings_->Encode(text), ids) << "text: " << text;
    EXPECT_EQ(gguf_->Encode(text), ids) << "text: " << text;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST_F(SmolLmHfTokenizerTest, SameVocabularyAndSpecialTokensAsGguf) {
  ASSERT_EQ(hf_pairs_->vocab_size(), gguf_->vocab_size());
  EXPECT_EQ(hf_pairs_->bos_id(), gguf_->bos_id());
  EXPECT_EQ(hf_pairs_->eos_id(), gguf_->eos_id());
  EXPECT_EQ(hf_pairs_->eos_id(), 2);
  for (int32_t id = 0; id < gguf_->vocab_size(); ++id) {
    ASSERT_EQ(*hf_pairs_->TokenText(id), *gguf_->TokenText(id)) << "id " << id;
    ASSERT_EQ(hf_pairs_->IsEndOfGeneration(id), gguf_->IsEndOfGeneration(id)) << "id " << id;
  }
}

TEST_F(SmolLmHfTokenizerTest, ChatTemplateRendersLikeGguf) {
  const std::vector<std::vector<ChatTurn>> conversations = {
      {},
      {{"user", "Hi"}},
      {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}},
  };
  for (const auto& turns : conversations) {
    for (const bool prompt : {false, true}) {
      EXPECT_EQ(hf_pairs_->ApplyChatTemplate(turns, prompt),
                gguf_->ApplyChatTemplate(turns, prompt));
    }
  }
  EXPECT_NE(hf_pairs_->ApplyChatTemplate({{"user", "Hi"}}, true).find("named SmolLM"),
            std::string::npos);
}

// The SmolLM2 vocabulary under Llama 3's and Qwen2's Split+ByteLevel pre-tokenizers. Ids from the
// `tokenizers` library 0.23.3 (Tokenizer.from_file(...).encode(text, add_special_tokens=False)).
TEST_F(SmolLmHfTokenizerTest, SplitPreTokenizersMatchTokenizersLibrary) {
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"12345 ab IT'S\n\n x", {33, 34, 35, 36, 37, 453, 9627, 23, 67, 1116, 1792}},
      {"x = 1234567;  // \u00c4\u00d6\u00dc 'll\r\n\r\n",
       {104, 446,   216,  33,  34,  35,  36,  37,  38,  39,  43,
        216, 13241, 5549, 222, 142, 240, 142, 246, 637, 764, 18682}},
      {"I'M HERE'LL 'Re<|im_end|>", {57, 23, 61, 27873, 23, 16421, 637, 3733, 2}},
  };
  for (const bool llama3 : {true, false}) {
    json tj = *tokenizer_json_;
    tj["pre_tokenizer"] = SplitPreTokenizer(llama3 ? kLlama3Regex : kQwen2Regex, llama3);
    tj["model"]["ignore_merges"] = llama3;
    auto tok = LoadHf(llama3 ? "smollm_llama3" : "smollm_qwen2", tj);
    ASSERT_TRUE(tok.ok()) << tok.status();
    for (const auto& [text, ids] : cases) {
      EXPECT_EQ((*tok)->Encode(text), ids) << (llama3 ? "llama3" : "qwen2") << " text: " << text;
    }
  }
}

// ---- Synthetic vocabularies ----

std::string Encoded(const std::string& raw) {
  std::string out;
  for (const char c : raw) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

// Every single byte (ids 0..255), then "ab" 256, "abc" 257, " a" 258, "bc" 259, "12" 260, and
// the added token "<s>" 261 (special). Merge ranks as in tokenizer_test.cc's TinyVocab.
json TinyTokenizerJson(json pre_tokenizer = SmollmPreTokenizer()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Encoded(std::string(1, static_cast<char>(b)))] = b;
  int32_t id = 256;
  for (const char* t : {"ab", "abc", " a", "bc", "12"}) vocab[Encoded(t)] = id++;
  vocab["<s>"] = 261;
  const json merges = {Encoded("b") + " " + Encoded("c"), Encoded("a") + " " + Encoded("b"),
                       Encoded(" ") + " " + Encoded("a"), Encoded("ab") + " " + Encoded("c"),
                       json::array({"1", "2"})};
  return TokenizerJson(vocab, merges, json::array({AddedToken(261, "<s>", true)}),
                       std::move(pre_tokenizer));
}

TEST(HfTokenizerTest, LoadsTinyVocabulary) {
  auto tok = LoadHf("tiny", TinyTokenizerJson(),
                    {{"eos_token", "<s>"}, {"bos_token", nullptr}, {"chat_template", "x"}});
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 262);
  EXPECT_EQ((*tok)->eos_id(), 261);
  EXPECT_EQ((*tok)->bos_id(), -1);
  EXPECT_EQ((*tok)->Encode("abc"), (Ids{'a', 259}));
  EXPECT_EQ((*tok)->Encode(" ab"), (Ids{' ', 256}));
  EXPECT_EQ((*tok)->Encode("x<s>y12"), (Ids{'x', 261, 'y', '1', '2'}));  // digits split
  EXPECT_EQ(*(*tok)->Decode({' ', 256, 261}), " ab<s>");
  EXPECT_TRUE((*tok)->IsEndOfGeneration(261));
}

TEST(HfTokenizerTest, RecognisesEachPreTokenizer) {
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  // "12" separates the digit rules; "abc" with ignore_merges (llama3) is the whole token.
  struct Case {
    json pre;
    bool ignore_merges;
    Ids digits;
    Ids abc;
  };
  const std::vector<Case> cases = {
      {SmollmPreTokenizer(), false, {'1', '2'}, {'a', 259}},
      {byte_level, false, {260}, {'a', 259}},
      {SplitPreTokenizer(kLlama3Regex, true), true, {260}, {257}},
      {SplitPreTokenizer(kQwen2Regex, false), false, {'1', '2'}, {'a', 259}},
  };
  for (const Case& c : cases) {
    json tj = TinyTokenizerJson(c.pre);
    tj["model"]["ignore_merges"] = c.ignore_merges;
    auto tok = LoadHf("pre", tj);
    ASSERT_TRUE(tok.ok()) << tok.status() << " for " << c.pre.dump();
    EXPECT_EQ((*tok)->Encode("12"), c.digits) << c.pre.dump();
    EXPECT_EQ((*tok)->Encode("abc"), c.abc) << c.pre.dump();
  }
}

TEST(HfTokenizerTest, VocabularySizeCoversHolesAndAddedTokens) {
  json tj = TinyTokenizerJson();
  tj["added_tokens"].push_back(AddedToken(300, "<|extra|>", false));
  auto tok = LoadHf("holes", tj);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 301);
  EXPECT_EQ((*tok)->Encode("a<|extra|>"), (Ids{'a', 300}));
  EXPECT_EQ(*(*tok)->TokenText(280), "");  // a hole
  EXPECT_EQ(*(*tok)->Decode({300}), "<|extra|>");
}

TEST(HfTokenizerTest, ReadsChatTemplateJinjaAndListTemplates) {
  const std::string smol_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\nBe nice.<|im_end|>\n' }}{% endif %}{% endfor %}";
  const std::string dir = MakeDir("jinja");
  WriteFile(dir + "/tokenizer.json", TinyTokenizerJson().dump());
  WriteFile(dir + "/chat_template.jinja", smol_template);
  auto tok = Tokenizer::FromHfDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->ApplyChatTemplate({{"user", "Hi"}}, false),
            "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");

  const json list = {{"chat_template",
                      {{{"name", "tool_use"}, {"template", "x"}},
                       {{"name", "default"}, {"template", smol_template}}}}};
  auto listed = LoadHf("list_template", TinyTokenizerJson(), list);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ((*listed)->ApplyChatTemplate({{"user", "Hi"}}, false),
            (*tok)->ApplyChatTemplate({{"user", "Hi"}}, false));
}

// ---- Malformed files: a clear error naming the file and the field, never a crash ----

void ExpectError(const absl::StatusOr<std::unique_ptr<Tokenizer>>& tok, absl::StatusCode code,
                 const std::string& file, const std::string& field) {
  ASSERT_FALSE(tok.ok()) << "expected an error naming " << field;
  EXPECT_EQ(tok.status().code(), code) << tok.status();
  EXPECT_NE(tok.status().message().find(file), std::string::npos) << tok.status();
  EXPECT_NE(tok.status().message().find(field), std::string::npos) << tok.status();
}

TEST(HfTokenizerErrorTest, MissingOrUnparsableFiles) {
  const std::string empty_dir = MakeDir("empty");
  ExpectError(Tokenizer::FromHfDirectory(empty_dir), absl::StatusCode::kNotFound,
              empty_dir + "/tokenizer.json", "no such file");
  ExpectError(Tokenizer::FromHfDirectory(empty_dir + "/nope"), absl::StatusCode::kNotFound,
              "tokenizer.json", "no such file");
  ExpectError(LoadHf("truncated", TinyTokenizerJson().dump().substr(0, 100)),
              absl::StatusCode::kInvalidArgument, "tokenizer.json", "not valid JSON");
  ExpectError(LoadHf("array", std::string("[1, 2]")), absl::StatusCode::kInvalidArgument,
              "tokenizer.json", "not a JSON object");
  const std::string dir = MakeDir("bad_config_text");
  WriteFile(dir + "/tokenizer.json", TinyTokenizerJson().dump());
  WriteFile(dir + "/tokenizer_config.json", "{\"eos_token\": ");
  ExpectError(Tokenizer::FromHfDirectory(dir), absl::StatusCode::kInvalidArgument,
              "tokenizer_config.json", "not valid JSON");
}

TEST(HfTokenizerErrorTest, WrongFieldsInTokenizerJson) {
  using Edit = std::function<void(json&)>;
  struct BadCase {
    Edit edit;
    absl::StatusCode code;
    std::string field;
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  constexpr auto kUnimplemented = absl::StatusCode::kUnimplemented;
  const std::vector<BadCase> cases = {
      {[](json& j) { j.erase("model"); }, kInvalid, "model is missing"},
      {[](json& j) { j["model"] = "BPE"; }, kInvalid, "model is \"BPE\", not an object"},
      {[](json& j) { j["model"]["type"] = "Unigram"; }, kInvalid, "model.type is \"Unigram\""},
      {[](json& j) { j["model"]["type"] = 3; }, kInvalid, "model.type is 3, not a string"},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, kUnimplemented, "model.byte_fallback"},
      {[](json& j) { j["model"]["byte_fallback"] = "no"; }, kInvalid, "model.byte_fallback"},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, kUnimplemented, "model.dropout"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, kUnimplemented,
       "model.continuing_subword_prefix"},
      {[](json& j) { j["model"]["vocab"] = json::array(); }, kInvalid, "model.vocab is []"},
      {[](json& j) { j["model"]["vocab"]["a"] = "97"; }, kInvalid, "model.vocab[\"a\"]"},
      {[](json& j) { j["model"]["vocab"]["a"] = -1; }, kInvalid, "model.vocab[\"a\"]"},
      {[](json& j) { j["model"]["vocab"]["a"] = 1.5; }, kInvalid, "model.vocab[\"a\"]"},
      {[](json& j) { j["model"]["vocab"]["a"] = 1u << 30; }, kInvalid, "model.vocab[\"a\"]"},
      {[](json& j) { j["model"]["vocab"]["zz"] = 97; }, kInvalid, "gives id 97 to both"},
      {[](json& j) { j["model"]["vocab"] = json::object(); }, kInvalid, "model.vocab is empty"},
      {[](json& j) { j["model"].erase("merges"); }, kInvalid, "model.merges is missing"},
      {[](json& j) { j["model"]["merges"][1] = "ab"; }, kInvalid, "model.merges[1]"},
      {[](json& j) { j["model"]["merges"][1] = "a b c"; }, kInvalid, "model.merges[1]"},
      {[](json& j) {
         j["model"]["merges"][4] = {"1", 2};
       },
       kInvalid, "model.merges[4]"},
      {[](json& j) { j["model"]["merges"][4] = {"1"}; }, kInvalid, "model.merges[4]"},
      {[](json& j) { j["added_tokens"] = json::object(); }, kInvalid, "added_tokens is {}"},
      {[](json& j) { j["added_tokens"][0] = 261; }, kInvalid, "added_tokens[0] is 261"},
      {[](json& j) { j["added_tokens"][0]["id"] = "261"; }, kInvalid, "added_tokens[0].id"},
      {[](json& j) { j["added_tokens"][0].erase("content"); }, kInvalid,
       "added_tokens[0].content is missing"},
      {[](json& j) { j["added_tokens"][0]["content"] = ""; }, kInvalid,
       "added_tokens[0].content is empty"},
      {[](json& j) { j["added_tokens"][0]["special"] = 1; }, kInvalid, "added_tokens[0].special"},
      {[](json& j) { j["added_tokens"][0]["lstrip"] = true; }, kUnimplemented,
       "added_tokens[0].lstrip"},
      {[](json& j) { j["added_tokens"][0]["content"] = "ab"; }, kInvalid, "duplicate token"},
      {[](json& j) { j.erase("pre_tokenizer"); }, kInvalid, "pre_tokenizer is unsupported: none"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       kInvalid, "pre_tokenizer is unsupported: {\"type\":\"Metaspace\"}"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }, kInvalid,
       "pre_tokenizer is unsupported"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false; },
       kInvalid, "pre_tokenizer is unsupported"},
      {[](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0] = {
             {"type", "Split"}, {"pattern", {{"Regex", "\\p{N}+"}}}, {"behavior", "Isolated"}};
         j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = false;
       },
       kInvalid, "pre_tokenizer is unsupported"},
      {[](json& j) { j["pre_tokenizer"] = "ByteLevel"; }, kInvalid, "pre_tokenizer is"},
      {[](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       kUnimplemented, "normalizer"},
      {[](json& j) { j.erase("decoder"); }, kInvalid, "decoder is missing"},
      {[](json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       kInvalid, "decoder is {\"type\":\"Metaspace\"}, expected ByteLevel"},
  };
  for (const BadCase& c : cases) {
    json tj = TinyTokenizerJson();
    c.edit(tj);
    ExpectError(LoadHf("bad", tj), c.code, "tokenizer.json", c.field);
  }
}

TEST(HfTokenizerErrorTest, WrongFieldsInTokenizerConfig) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"eos_token", "</s>"}}, "eos_token \"</s>\" is not in the vocabulary"},
      {{{"eos_token", 2}}, "eos_token is 2"},
      {{{"bos_token", {{"text", "<s>"}}}}, "bos_token.content is missing"},
      {{{"bos_token", {{"content", 5}}}}, "bos_token.content is 5, not a string"},
      {{{"chat_template", 7}}, "chat_template is neither"},
      {{{"chat_template", {{{"name", "default"}}}}}, "chat_template[0].template is missing"},
  };
  for (const auto& [config, field] : cases) {
    ExpectError(LoadHf("bad_config", TinyTokenizerJson(), config),
                absl::StatusCode::kInvalidArgument, "tokenizer_config.json", field);
  }
}

// Replaces every node of a valid file (the first entries of long lists) with values of each JSON
// type: loading may fail, but must return a Status and never crash or throw.
TEST(HfTokenizerErrorTest, AnyValueAnywhereIsAStatusNotACrash) {
  const json valid = TinyTokenizerJson();
  std::vector<json::json_pointer> nodes;
  std::function<void(const json&, const json::json_pointer&)> walk =
      [&](const json& node, const json::json_pointer& at) {
        nodes.push_back(at);
        if (node.is_object()) {
          int n = 0;
          for (const auto& [key, child] : node.items()) {
            if (n++ < 4) walk(child, at / key);
          }
        } else if (node.is_array()) {
          for (size_t i = 0; i < node.size() && i < 4; ++i) walk(node[i], at / i);
        }
      };
  walk(valid, json::json_pointer());
  const std::vector<json> replacements = {
      nullptr,       true, -1, 70000, 2.5, "x", "a b", json::array(), json::array({"a", "b"}),
      json::object()};
  int failures = 0;
  for (const auto& at : nodes) {
    for (const json& value : replacements) {
      json tj = valid;
      tj[at] = value;
      const auto tok = LoadHf("any", tj);
      if (!tok.ok()) ++failures;
    }
  }
  EXPECT_GT(failures, 0);
}

// ---- Independent oracle: ids from the `tokenizers` library (tests/fixtures/tiny/<arch>/) ----

TEST(HfTokenizerFixtureTest, MatchesTokenizersLibraryGoldenIds) {
  const fs::path root = fs::path(SourceDir()) / "tests/fixtures/tiny";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) GTEST_SKIP() << "no fixtures under " << root;
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const fs::path golden_path = entry.path() / "golden.json";
    if (!fs::exists(golden_path)) continue;
    std::ifstream in(golden_path);
    const json golden = json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(golden.is_discarded()) << golden_path;
    if (!golden.contains("tokenizer_cases")) continue;
    auto tok = Tokenizer::FromHfDirectory(entry.path().string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    for (const auto& c : golden.at("tokenizer_cases")) {
      const std::string text = c.at("text").get<std::string>();
      EXPECT_EQ((*tok)->Encode(text), c.at("ids").get<Ids>())
          << entry.path().filename() << " text: \"" << text << "\"";
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << "no golden.json with tokenizer_cases under " << root;
}

}  // namespace
}  // namespace glimpse::model
