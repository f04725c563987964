#include "core/model/text_stream.h"

#include "core/model/generator.h"
#include "core/model/sequence.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

TEST(TextStreamTest, PiecesAreWholeCharactersAndAddUpToTheText) {
  const Model* model = testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const std::string text = "Grüße aus Köln — 日本語のテキスト 🚀 done.";
  const std::vector<int32_t> tokens = model->tokenizer().Encode(text);
  TextStream stream(model->tokenizer());
  std::string joined;
  for (int32_t t : tokens) {
    auto piece = stream.Push(t);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_EQ(CompleteUtf8Prefix(*piece), piece->size()) << *piece;
    joined += *piece;
  }
  auto rest = stream.Finish();
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(joined + *rest, text);
}

// A model can generate bytes that make no character: each becomes U+FFFD, every piece is valid
// UTF-8 (a protobuf string field refuses anything else), and a character cut short waits for the
// next token before it is replaced.
TEST(TextStreamTest, BytesThatFormNoCharacterBecomeReplacementCharacters) {
  const Model* model = testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const Tokenizer& tok = model->tokenizer();
  auto byte_token = [&](char byte) {
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      absl::StatusOr<std::string> text = tok.TokenText(id);
      if (text.ok() && *text == std::string(1, byte)) return id;
    }
    return -1;
  };
  const int32_t lead = byte_token('\xE6'), continuation = byte_token('\x97');
  const int32_t a = tok.Encode("A")[0];
  ASSERT_GE(lead, 0);
  ASSERT_GE(continuation, 0);
  const std::string fffd = "\xEF\xBF\xBD";
  TextStream stream(tok);
  EXPECT_EQ(*stream.Push(continuation), fffd);  // a stray continuation byte
  EXPECT_EQ(*stream.Push(lead), "");            // may still become a character
  EXPECT_EQ(*stream.Push(a), fffd + "A");       // it did not
  EXPECT_EQ(*stream.Push(lead), "");
  EXPECT_EQ(*stream.Finish(), fffd);                      // cut short by the end
  EXPECT_EQ(ValidUtf8("ok \xED\xA0\x80"), "ok " + fffd);  // an encoded surrogate
  // Ids the tokenizer has no text for (embedding rows past its vocabulary) read as U+FFFD too,
  // also when they cut a character short.
  EXPECT_EQ(*stream.Push(tok.vocab_size()), fffd);
  EXPECT_EQ(*stream.Push(lead), "");
  EXPECT_EQ(*stream.Push(-1), fffd + fffd);
}

TEST(TextStreamTest, CompleteUtf8PrefixStopsBeforeASplitCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE6\x97"), 2u);      // 3-byte character cut after 2
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE6\x97\xA5"), 5u);  // complete
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x9A"), 0u);    // 4-byte character cut after 3
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

TEST(DecodeFromTest, StopsWhenTheCallbackSaysSoAndMatchesGenerate) {
  const Model* model = testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const auto prompt = model->tokenizer().Encode("One, two, three, four,");
  Sequence a(*model, testing::SharedPool()), b(*model, testing::SharedPool());
  auto sa = Sampler::Create({});
  auto sb = Sampler::Create({});
  ASSERT_TRUE(sa.ok() && sb.ok());
  auto full = Generate(a, *sa, prompt, 6);
  ASSERT_TRUE(full.ok());
  auto logits = b.Forward(prompt);
  ASSERT_TRUE(logits.ok());
  int seen = 0;
  auto cut = DecodeFrom(b, *sb, *logits, 6, [&](int32_t) { return ++seen < 3; });
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->stop, StopReason::kCancelled);
  ASSERT_EQ(cut->tokens.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(full->tokens.begin(), full->tokens.begin() + 3), cut->tokens);
  EXPECT_EQ(cut->unfed_token, cut->tokens.back());
  EXPECT_EQ(b.next_position(), static_cast<int32_t>(prompt.size()) + 2);
}

}  // namespace
}  // namespace glimpse::model
