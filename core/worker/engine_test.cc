// The engine on the real default model: sequences decoded together give their solo tokens, work
// runs between steps, a consumer that stops stops its sequence, a full pool fails the youngest.
#include "core/worker/engine.h"

#include <thread>

#include "core/model/test_model.h"
#include "gtest/gtest.h"

namespace glimpse::worker {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
  }
  std::vector<int32_t> Prompt(const std::string& text) const {
    const model::Tokenizer& tok = model_->tokenizer();
    return tok.Encode(tok.ApplyChatTemplate({{"user", text}}, true));
  }
  // Greedy tokens of a session decoding alone.
  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    model::Session s(*model_, model::testing::SharedPool());
    auto sampler = model::Sampler::Create({});
    auto r = model::Generate(s, *sampler, prompt, max_tokens);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  }
  static const model::Model* model_;
};

const model::Model* EngineTest::model_ = nullptr;

const char* const kTexts[] = {"What is the capital of France?", "Name three primes.",
                              "Tell me about lighthouses.", "Hi!"};

TEST_F(EngineTest, ConcurrentSequencesDecodeTogetherAndGiveTheirSoloTokens) {
  constexpr int kSessions = 4;
  constexpr int32_t kMax = 12;
  Engine engine(*model_, model::testing::SharedPool());
  std::vector<std::vector<int32_t>> got(kSessions), streamed(kSessions);
  std::vector<model::StopReason> stops(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      const std::vector<int32_t> prompt = Prompt(kTexts[i]);
      model::Session session(*model_, model::testing::SharedPool());
      std::vector<float> logits;
      ASSERT_TRUE(engine
                      .Run([&]() -> absl::Status {
                        absl::StatusOr<std::vector<float>> l = session.Forward(prompt);
                        if (!l.ok()) return l.status();
                        logits = *std::move(l);
                        return absl::OkStatus();
                      })
                      .ok());
      auto sampler = model::Sampler::Create({});
      auto r = engine.Decode(session, *sampler, logits, kMax, [&](int32_t t) {
        streamed[i].push_back(t);
        return true;
      });
      ASSERT_TRUE(r.ok()) << r.status();
      got[i] = r->tokens;
      stops[i] = r->stop;
      // The last sampled token is not fed (as DecodeFrom).
      EXPECT_EQ(session.next_position(),
                static_cast<int32_t>(prompt.size() + r->tokens.size()) -
                    (r->stop == model::StopReason::kEndOfGeneration ? 0 : 1));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_EQ(got[i], Alone(Prompt(kTexts[i]), kMax)) << kTexts[i];
    EXPECT_EQ(streamed[i], got[i]);
  }
  const EngineStats stats = engine.Stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.work_done, kSessions);
  EXPECT_GT(stats.rows, stats.steps);  // some steps held several sequences
  std::printf("[engine] %lld steps, %.2f rows per step\n", static_cast<long long>(stats.steps),
              static_cast<double>(stats.rows) / std::max<int64_t>(stats.steps, 1));
}

TEST_F(EngineTest, AConsumerThatStopsStopsItsSequenceAndTheStateStaysConsistent) {
  Engine engine(*model_, model::testing::SharedPool());
  const std::vector<int32_t> prompt = Prompt(kTexts[2]);
  model::Session session(*model_, model::testing::SharedPool());
  std::vector<float> logits;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    logits = *session.Forward(prompt);
                    return absl::OkStatus();
                  })
                  .ok());
  auto sampler = model::Sampler::Create({});
  int seen = 0;
  auto r = engine.Decode(session, *sampler, logits, 40, [&](int32_t) { return ++seen < 3; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(r->stop, model::StopReason::kCancelled);
  ASSERT_GE(r->tokens.size(), 3u);
  EXPECT_LE(r->tokens.size(), 3u + 64u);
  // Every token but the last sampled one is in the session, and they are the solo run's.
  EXPECT_EQ(session.next_position(), static_cast<int32_t>(prompt.size() + r->tokens.size() - 1));
  const std::vector<int32_t> alone = Alone(prompt, static_cast<int32_t>(r->tokens.size()));
  EXPECT_EQ(r->tokens, alone);
}

// When a step does not fit the pool, make_room frees memory (here: an idle session goes) and the
// step runs again; a sequence that alone does not fit fails with ResourceExhausted.
TEST_F(EngineTest, AStepThatDoesNotFitMakesRoomFirstAndASequenceAloneTooBigFails) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  constexpr int32_t kPage = 16;
  constexpr int32_t kMax = 20;  // feeds 19 tokens: at least one new page, at most two
  const std::vector<int32_t> a = Prompt(kTexts[2]);  // a long answer
  const int64_t prompt_pages = (static_cast<int64_t>(a.size()) + kPage - 1) / kPage;
  model::KvPool probe({.page_tokens = kPage, .head_dim = c.head_dim});
  const int64_t page = probe.PageBytes(kernels::KvDType::kF16);
  // Room for a's prompt and two more pages per head, which the idle session takes.
  model::KvPool pool({.budget_bytes = heads * (prompt_pages + 2) * page,
                      .page_tokens = kPage,
                      .head_dim = c.head_dim});
  const model::SessionOptions f16{.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16};
  auto idle = std::make_unique<model::Session>(*model_, model::testing::SharedPool(), f16);
  int64_t asked = 0;
  Engine engine(*model_, model::testing::SharedPool(), {.make_room = [&](int64_t bytes) {
    asked += bytes;
    idle.reset();  // its pages go back to the pool
  }});
  model::Session sa(*model_, model::testing::SharedPool(), f16);
  std::vector<float> la;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    la = *sa.Forward(a);
                    return idle->Forward(std::span(a).first(2 * kPage)).status();
                  })
                  .ok());
  ASSERT_EQ(pool.stats().used_bytes, pool.budget_bytes());
  auto sampler = model::Sampler::Create({});
  auto ra = engine.Decode(sa, *sampler, la, kMax, {});
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_GT(asked, 0);
  EXPECT_EQ(idle, nullptr);
  EXPECT_EQ(ra->tokens, Alone(a, kMax));

  // A sequence alone whose next page the pool cannot give.
  model::KvPool tiny(
      {.budget_bytes = heads * prompt_pages * page, .page_tokens = kPage, .head_dim = c.head_dim});
  model::Session st(*model_, model::testing::SharedPool(),
                    {.kv_pool = &tiny, .kv_dtype = kernels::KvDType::kF16});
  ASSERT_TRUE(engine.Run([&]() -> absl::Status { return st.Forward(a).status(); }).ok());
  auto rt = engine.Decode(st, *sampler, la, kMax, {});
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kResourceExhausted) << rt.status();
  EXPECT_GE(engine.Stats().failed_for_memory, 1);
  EXPECT_EQ(st.next_position(), static_cast<int32_t>(a.size()) + kPage - 1 -
                                    (static_cast<int32_t>(a.size()) - 1) % kPage);
}

}  // namespace
}  // namespace glimpse::worker
