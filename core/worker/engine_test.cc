// The engine on the real default model: sequences decoded together give their solo tokens, work
// runs between steps and concurrent jobs take turns chunk by chunk, a consumer that stops stops its
// sequence, a full pool parks the youngest and brings it back with its solo tokens.
#include "core/worker/engine.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/common/status_macros.h"
#include "core/eviction/decode_eviction.h"
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
  // Runs `prompt` through `session` as the engine's work; the logits of its last token.
  static std::vector<float> Prefill(Engine& engine, model::Sequence& session,
                                    const std::vector<int32_t>& prompt) {
    std::vector<float> logits;
    EXPECT_TRUE(engine
                    .Run([&]() -> absl::Status {
                      absl::StatusOr<std::vector<float>> l = session.Forward(prompt);
                      if (!l.ok()) return l.status();
                      logits = *std::move(l);
                      return absl::OkStatus();
                    })
                    .ok());
    return logits;
  }
  // Greedy tokens of a session decoding alone.
  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    model::Sequence s(*model_, model::testing::SharedPool());
    auto sampler = model::Sampler::Create({});
    auto r = model::Generate(s, *sampler, prompt, max_tokens);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  }
  // From inside a job (the engine thread is held): starts decoding `session` from `logits` on a
  // thread of its own, expecting `want`, and returns once the sequence waits to join, so that
  // its first step is in the job's next pass.
  static std::thread JoinWhileHeld(Engine& engine, model::Sequence& session,
                                   const std::vector<float>& logits, int32_t max_tokens,
                                   const std::vector<int32_t>& want) {
    std::thread decode([&engine, &session, &logits, max_tokens, &want] {
      auto sampler = model::Sampler::Create({});
      auto r = engine.Decode(session, *sampler, logits, max_tokens, {});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->tokens, want);
    });
    while (engine.Stats().joining == 0) std::this_thread::yield();
    return decode;
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
      model::Sequence session(*model_, model::testing::SharedPool());
      const std::vector<float> logits = Prefill(engine, session, prompt);
      ASSERT_FALSE(logits.empty());
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

// Each sequence's decode-time eviction runs between its steps, on its own cache: decoded together,
// sequences give the tokens each gives alone through model::DecodeFrom with the same eviction,
// and an observer that fails stops its own sequence with its error, not the others.
TEST_F(EngineTest, DecodeTimeEvictionRunsPerSequenceAndAFailingObserverStopsOnlyItsOwn) {
  constexpr int kSessions = 3;
  constexpr int32_t kMax = 40;
  auto scorer = eviction::CreateScorer({.method = "streamingllm",
                                        .window = 0,
                                        .kernel = 0,
                                        .pooling = "",
                                        .weights_path = "",
                                        .module_path = ""});
  ASSERT_TRUE(scorer.ok());
  eviction::DecodeEvictionOptions options;
  options.budget_tokens = 20;
  options.interval = 4;
  options.selection.window = 4;
  auto solo = [&](const std::vector<int32_t>& prompt) {
    model::Sequence s(*model_, model::testing::SharedPool());
    auto eviction = eviction::DecodeEviction::Create(s.model(), **scorer, options);
    EXPECT_TRUE(eviction.ok());
    auto logits = s.Forward(prompt);
    auto sampler = model::Sampler::Create({});
    auto r = model::DecodeFrom(s, *sampler, *logits, kMax, {}, eviction->get());
    EXPECT_TRUE(r.ok());
    EXPECT_GT((*eviction)->stats().evictions, 0);
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  };
  // Fails on its fourth token.
  class Failing : public model::DecodeObserver {
   public:
    void OnLayer(int32_t, const model::LayerActivations&) override {}
    absl::Status AfterToken(model::Sequence&) override {
      return ++fed_ == 4 ? absl::DataLossError("observer failed on purpose") : absl::OkStatus();
    }

   private:
    int fed_ = 0;
  };
  Engine engine(*model_, model::testing::SharedPool());
  std::vector<std::vector<int32_t>> got(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      model::Sequence session(*model_, model::testing::SharedPool());
      auto eviction = eviction::DecodeEviction::Create(session.model(), **scorer, options);
      ASSERT_TRUE(eviction.ok());
      const std::vector<float> logits = Prefill(engine, session, Prompt(kTexts[i]));
      auto sampler = model::Sampler::Create({});
      auto r = engine.Decode(session, *sampler, logits, kMax, {}, {}, eviction->get());
      ASSERT_TRUE(r.ok()) << r.status();
      got[i] = r->tokens;
    });
  }
  threads.emplace_back([&] {
    model::Sequence session(*model_, model::testing::SharedPool());
    Failing failing;
    const std::vector<float> logits = Prefill(engine, session, Prompt(kTexts[3]));
    auto sampler = model::Sampler::Create({});
    auto r = engine.Decode(session, *sampler, logits, kMax, {}, {}, &failing);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) EXPECT_EQ(got[i], solo(Prompt(kTexts[i]))) << kTexts[i];
  EXPECT_EQ(engine.Stats().running, 0);
}

// KIVI sessions seal their full pages after every step: decoded together, each gives the tokens
// it gives decoded alone in the same format (sealing depends only on the sequence's own rows),
// and pages were sealed on the way.
TEST_F(EngineTest, KiviSequencesDecodedTogetherGiveTheirSoloTokens) {
  constexpr int32_t kMax = 48;  // prompts of about 30 tokens cross a 64-token page
  const model::ModelConfig& c = model_->config();
  model::KvPool pool({.page_tokens = 64, .head_dim = c.head_dim});
  const model::SequenceOptions kivi{.kv_pool = &pool, .kv_dtype = kernels::KvDType::kKivi4};
  auto decode = [&](Engine& engine, const std::vector<int32_t>& prompt) {
    model::Sequence session(*model_, model::testing::SharedPool(), kivi);
    const std::vector<float> logits = Prefill(engine, session, prompt);
    auto sampler = model::Sampler::Create({});
    auto r = engine.Decode(session, *sampler, logits, kMax, [](int32_t) { return true; });
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  };
  std::vector<std::vector<int32_t>> alone;
  for (const char* text : {kTexts[0], kTexts[1], kTexts[2]}) {
    Engine solo(*model_, model::testing::SharedPool());
    alone.push_back(decode(solo, Prompt(text)));
  }
  Engine engine(*model_, model::testing::SharedPool());
  std::vector<std::vector<int32_t>> together(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { together[i] = decode(engine, Prompt(kTexts[i])); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(together[i], alone[i]) << kTexts[i];
  // One more, held open: its full pages are KIVI.
  model::Sequence held(*model_, model::testing::SharedPool(), kivi);
  const std::vector<float> logits = Prefill(engine, held, Prompt(kTexts[2]));
  auto sampler = model::Sampler::Create({});
  ASSERT_TRUE(engine.Decode(held, *sampler, logits, kMax, [](int32_t) { return true; }).ok());
  ASSERT_GE(held.next_position(), 64);
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(kernels::KvDType::kKivi4)],
            heads * (held.next_position() / 64));
  held.Reset();
  EXPECT_EQ(pool.stats().used_bytes, 0);
}

TEST_F(EngineTest, AConsumerThatStopsStopsItsSequenceAndTheStateStaysConsistent) {
  Engine engine(*model_, model::testing::SharedPool());
  const std::vector<int32_t> prompt = Prompt(kTexts[2]);
  model::Sequence session(*model_, model::testing::SharedPool());
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
  const model::SequenceOptions f16{.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16};
  auto idle = std::make_unique<model::Sequence>(*model_, model::testing::SharedPool(), f16);
  int64_t asked = 0;
  Engine engine(*model_, model::testing::SharedPool(), {.make_room = [&](int64_t bytes) {
    asked += bytes;
    idle.reset();  // its pages go back to the pool
  }});
  model::Sequence sa(*model_, model::testing::SharedPool(), f16);
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
  model::Sequence st(*model_, model::testing::SharedPool(),
                     {.kv_pool = &tiny, .kv_dtype = kernels::KvDType::kF16});
  ASSERT_TRUE(engine.Run([&]() -> absl::Status { return st.Forward(a).status(); }).ok());
  auto rt = engine.Decode(st, *sampler, la, kMax, {});
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kResourceExhausted) << rt.status();
  EXPECT_GE(engine.Stats().failed_for_memory, 1);
  EXPECT_EQ(st.next_position(), static_cast<int32_t>(a.size()) + kPage - 1 -
                                    (static_cast<int32_t>(a.size()) - 1) % kPage);
}

// A long prefill job carries the running decodes in its chunks' passes: they do not wait for the
// whole prompt, and both give what they give alone.
TEST_F(EngineTest, RunningSequencesStepInThePassesOfALongPrefillsChunks) {
  constexpr int32_t kChunk = 32;
  constexpr int32_t kMax = 120;
  Engine engine(*model_, model::testing::SharedPool());
  const std::vector<int32_t> a = Prompt(kTexts[2]);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "The lighthouse keeper wrote in the log every night. ";
  const std::vector<int32_t> b = Prompt(text + "What did the keeper write in?");
  const int64_t chunks = (static_cast<int64_t>(b.size()) + kChunk - 1) / kChunk;
  ASSERT_GE(chunks, 6);

  model::Sequence sa(*model_, model::testing::SharedPool());
  std::vector<float> la;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    la = *sa.Forward(a);
                    return absl::OkStatus();
                  })
                  .ok());
  // The model's thread pool serves one caller at a time: the solo run goes before the threads.
  const std::vector<int32_t> alone = Alone(a, kMax);
  model::Sequence sb(*model_, model::testing::SharedPool(), {.prefill_chunk = kChunk});
  std::vector<float> lb;
  int64_t steps_during = 0;
  std::thread decode;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    // a joins while this job holds the engine: it cannot finish before b's
                    // prefill starts, and steps first in b's first chunk.
                    decode = JoinWhileHeld(engine, sa, la, kMax, alone);
                    const int64_t before = engine.Stats().steps_with_prefill;
                    ASSIGN_OR_RETURN(lb, sb.Forward(b));
                    steps_during = engine.Stats().steps_with_prefill - before;
                    return absl::OkStatus();
                  })
                  .ok());
  decode.join();
  // Every chunk carried a step (the decode's consumer takes its tokens as they come, far below
  // max_pending; the answer is longer than the prompt's chunks).
  EXPECT_EQ(steps_during, chunks);
  model::Sequence solo(*model_, model::testing::SharedPool(), {.prefill_chunk = kChunk});
  EXPECT_EQ(lb, *solo.Forward(b));
}

// Concurrent prefill jobs take turns chunk by chunk: a short prompt that arrives during a long one
// is done before the long one's prefill is, and both give their solo logits.
TEST_F(EngineTest, AShortPrefillGoesBetweenTheChunksOfALongOne) {
  constexpr int32_t kChunk = 32;
  Engine engine(*model_, model::testing::SharedPool());
  std::string text;
  for (int i = 0; i < 20; ++i) text += "The lighthouse keeper wrote in the log every night. ";
  const std::vector<int32_t> long_prompt = Prompt(text + "What did the keeper write in?");
  const std::vector<int32_t> short_prompt = Prompt(kTexts[3]);
  ASSERT_GE(long_prompt.size(), 6 * kChunk);
  ASSERT_LE(short_prompt.size(), kChunk);
  const model::SequenceOptions chunked{.prefill_chunk = kChunk};
  model::Sequence solo_long(*model_, model::testing::SharedPool(), chunked);
  model::Sequence solo_short(*model_, model::testing::SharedPool(), chunked);
  const std::vector<float> long_alone = *solo_long.Forward(long_prompt);
  const std::vector<float> short_alone = *solo_short.Forward(short_prompt);

  model::Sequence sl(*model_, model::testing::SharedPool(), chunked);
  model::Sequence ss(*model_, model::testing::SharedPool(), chunked);
  std::vector<float> ll, ls;
  std::atomic<bool> short_done = false;
  bool short_done_first = false;
  std::thread short_job;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    // The short job arrives while this one holds the model.
                    short_job = std::thread([&] {
                      ls = Prefill(engine, ss, short_prompt);
                      short_done = true;
                    });
                    while (engine.Stats().queued_work == 0) std::this_thread::yield();
                    ASSIGN_OR_RETURN(ll, sl.Forward(long_prompt));
                    short_done_first = short_done;
                    return absl::OkStatus();
                  })
                  .ok());
  short_job.join();
  EXPECT_TRUE(short_done_first);
  EXPECT_GE(engine.Stats().work_yields, 1);
  EXPECT_EQ(ll, long_alone);
  EXPECT_EQ(ls, short_alone);
  const EngineStats stats = engine.Stats();
  EXPECT_EQ(stats.working, 0);
  EXPECT_EQ(stats.queued_work, 0);
  EXPECT_EQ(stats.work_done, 2);
}

// When a chunk's pass with the running decodes does not fit the pool, the chunk runs alone and
// the decodes take a step of their own, which makes room first: here the pool has one free page
// per head, the chunk and the joining decode each need one, and an idle session holds one more.
TEST_F(EngineTest, AChunkWhosePassWithTheDecodesDoesNotFitRunsAloneAndTheDecodesStepAfter) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  constexpr int32_t kMax = 12;
  const std::vector<int32_t> a = Prompt(kTexts[2]);
  const std::vector<int32_t> b = Prompt(kTexts[3]);
  const int32_t page_tokens = static_cast<int32_t>(a.size());  // a's prompt fills one page
  ASSERT_LE(b.size(), a.size());
  model::KvPool probe({.page_tokens = page_tokens, .head_dim = c.head_dim});
  const int64_t page = probe.PageBytes(kernels::KvDType::kF16);
  model::KvPool pool(
      {.budget_bytes = heads * 3 * page, .page_tokens = page_tokens, .head_dim = c.head_dim});
  const model::SequenceOptions f16{.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16};
  auto idle = std::make_unique<model::Sequence>(*model_, model::testing::SharedPool(), f16);
  int made_room = 0;
  Engine engine(*model_, model::testing::SharedPool(), {.make_room = [&](int64_t) {
    ++made_room;
    idle.reset();
  }});
  model::Sequence sa(*model_, model::testing::SharedPool(), f16);
  std::vector<float> la;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    la = *sa.Forward(a);
                    return idle->Forward(std::span(b).first(1)).status();
                  })
                  .ok());
  ASSERT_EQ(pool.stats().used_bytes, heads * 2 * page);
  const std::vector<int32_t> alone = Alone(a, kMax);  // before the threads, as above
  model::Sequence solo(*model_, model::testing::SharedPool(),
                       {.kv_pool = &probe, .kv_dtype = kernels::KvDType::kF16});
  const std::vector<float> lb_alone = *solo.Forward(b);

  std::thread decode;
  model::Sequence sb(*model_, model::testing::SharedPool(), f16);
  std::vector<float> lb;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    // a joins while this job holds the engine: its first step is b's pass.
                    decode = JoinWhileHeld(engine, sa, la, kMax, alone);
                    ASSIGN_OR_RETURN(lb, sb.Forward(b));
                    return absl::OkStatus();
                  })
                  .ok());
  decode.join();
  EXPECT_EQ(lb, lb_alone);
  EXPECT_EQ(made_room, 1);
  EXPECT_EQ(idle, nullptr);
  EXPECT_EQ(engine.Stats().steps_with_prefill, 0);
}

// A prefill job that needs more of the pool than is free waits while the running sequence holds
// its pages, and starts once they are back; without that wait it would fail for memory.
TEST_F(EngineTest, AJobWaitsForRoomInThePoolWhileASequenceHoldsIt) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  constexpr int32_t kPage = 16;
  constexpr int32_t kMax = 40;
  const std::vector<int32_t> a = Prompt(kTexts[2]);
  std::string text;
  for (int i = 0; i < 12; ++i) text += "The lighthouse keeper wrote in the log every night. ";
  const std::vector<int32_t> b = Prompt(text + "What did the keeper write in?");
  auto pages = [&](int64_t tokens) { return (tokens + kPage - 1) / kPage; };
  const int64_t first_a = pages(a.size()), last_a = pages(a.size() + kMax - 1);
  const int64_t first_b = pages(b.size());
  ASSERT_GE(first_b, last_a);
  ASSERT_GE(first_a, 2);
  model::KvPool probe({.page_tokens = kPage, .head_dim = c.head_dim});
  const int64_t page = probe.PageBytes(kernels::KvDType::kF16);
  // b's prompt fits an empty pool, not beside a's pages.
  model::KvPool pool(
      {.budget_bytes = heads * page * (first_b + 1), .page_tokens = kPage, .head_dim = c.head_dim});
  const model::SequenceOptions f16{.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16};
  Engine engine(*model_, model::testing::SharedPool(),
                {.max_pending = 2, .make_room = {}, .kv_pool = &pool});

  auto sa = std::make_unique<model::Sequence>(*model_, model::testing::SharedPool(), f16);
  std::vector<float> la;
  ASSERT_TRUE(engine
                  .Run([&]() -> absl::Status {
                    la = *sa->Forward(a);
                    return absl::OkStatus();
                  })
                  .ok());
  const std::vector<int32_t> alone = Alone(a, kMax);  // before the threads, as above
  std::atomic<bool> a_freed = false;
  std::thread decode([&] {
    auto sampler = model::Sampler::Create({});
    int seen = 0;
    // The consumer holds its second token until b's job is queued: a is running then.
    auto r = engine.Decode(*sa, *sampler, la, kMax, [&](int32_t) {
      if (++seen == 2) {
        while (engine.Stats().queued_work == 0) std::this_thread::yield();
      }
      return true;
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, alone);
    sa.reset();  // a's pages go back to the pool
    a_freed = true;
  });
  model::Sequence sb(*model_, model::testing::SharedPool(), f16);
  bool a_was_freed = false;
  const absl::Status ran = engine.Run(
      [&]() -> absl::Status {
        a_was_freed = a_freed;
        return sb.Forward(b).status();
      },
      heads* page* first_b);
  decode.join();
  EXPECT_TRUE(ran.ok()) << ran;
  EXPECT_TRUE(a_was_freed);
  EXPECT_EQ(engine.Stats().work_waited_for_memory, 1);
}

// The test's Parking: a session's KV moved to host memory and back (a decode worker's goes to the
// cache node), checked against the tokens the engine says the cache holds.
class HostParking {
 public:
  HostParking(model::Sequence& session, std::span<const int32_t> prompt)
      : session_(session), prompt_size_(static_cast<int32_t>(prompt.size())) {}
  Parking Hooks() {
    return {.park = [this](std::span<const int32_t> generated) { return Park(generated); },
            .unpark = [this] { return Unpark(); }};
  }
  int parks() const { return parks_; }

 private:
  absl::Status Park(std::span<const int32_t> generated) {
    EXPECT_EQ(session_.next_position(), prompt_size_ + static_cast<int32_t>(generated.size()));
    model::KvCache& cache = session_.cache();
    heads_.clear();
    for (int32_t l = 0; l < cache.n_layers(); ++l) {
      for (int32_t h = 0; h < cache.n_kv_heads(); ++h) heads_.push_back(cache.Read(l, h));
    }
    position_ = session_.next_position();
    session_.Reset();
    ++parks_;
    return absl::OkStatus();
  }
  absl::Status Unpark() {
    model::KvCache& cache = session_.cache();
    for (int32_t l = 0; l < cache.n_layers(); ++l) {
      for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
        if (absl::Status st = cache.Assign(l, h, heads_[l * cache.n_kv_heads() + h]); !st.ok()) {
          session_.Reset();
          return st;
        }
      }
    }
    heads_.clear();
    return session_.Resume(position_);
  }

  model::Sequence& session_;
  const int32_t prompt_size_;
  std::vector<model::KvHead> heads_;
  int32_t position_ = 0;
  int parks_ = 0;
};

// Two sequences in a pool that holds either to its end but not both: the younger is parked when
// a step does not fit, comes back when the older one's pages are freed, and both give their solo
// tokens. Every page is back in the pool at the end.
TEST_F(EngineTest, AFullPoolParksTheYoungestSequenceAndItResumesWithItsSoloTokens) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  constexpr int32_t kPage = 16;
  constexpr int32_t kMax = 40;  // feeds 39 tokens: two or three pages per head
  const std::vector<int32_t> prompts[] = {Prompt(kTexts[2]),
                                          Prompt("Write a short story about a cat.")};
  const std::vector<int32_t> alone[] = {Alone(prompts[0], kMax), Alone(prompts[1], kMax)};
  auto pages = [&](int64_t tokens) { return (tokens + kPage - 1) / kPage; };
  const int64_t first[] = {pages(prompts[0].size()), pages(prompts[1].size())};
  // Neither ends early (an end-of-generation token): each grows by two pages per head or more.
  ASSERT_EQ(alone[0].size(), static_cast<size_t>(kMax));
  ASSERT_EQ(alone[1].size(), static_cast<size_t>(kMax));
  const int64_t last[] = {pages(prompts[0].size() + kMax - 1), pages(prompts[1].size() + kMax - 1)};
  model::KvPool probe({.page_tokens = kPage, .head_dim = c.head_dim});
  const int64_t page = probe.PageBytes(kernels::KvDType::kF16);
  model::KvPool pool(
      {.budget_bytes = heads * page * std::max(last[0] + first[1], last[1] + first[0]),
       .page_tokens = kPage,
       .head_dim = c.head_dim});
  const model::SequenceOptions f16{.kv_pool = &pool, .kv_dtype = kernels::KvDType::kF16};
  // max_pending 2 and a consumer that waits for the other's first token: neither runs ahead
  // to its end alone, so their pages meet in the pool.
  Engine engine(*model_, model::testing::SharedPool(), {.max_pending = 2, .make_room = {}});
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::vector<int32_t> got[2];
  absl::Status status[2];
  int parks[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      auto session = std::make_unique<model::Sequence>(*model_, model::testing::SharedPool(), f16);
      std::vector<float> logits;
      status[i] = engine.Run([&]() -> absl::Status {
        absl::StatusOr<std::vector<float>> l = session->Forward(prompts[i]);
        if (!l.ok()) return l.status();
        logits = *std::move(l);
        return absl::OkStatus();
      });
      if (!status[i].ok()) return;
      HostParking parking(*session, prompts[i]);
      bool first = true;
      auto on_token = [&](int32_t) {
        if (first) {
          first = false;
          std::unique_lock<std::mutex> lock(mu);
          ++started;
          cv.notify_all();
          cv.wait_for(lock, std::chrono::seconds(60), [&] { return started == 2; });
        }
        return true;
      };
      auto sampler = model::Sampler::Create({});
      auto r = engine.Decode(*session, *sampler, logits, kMax, on_token, parking.Hooks());
      status[i] = r.status();
      if (r.ok()) got[i] = r->tokens;
      parks[i] = parking.parks();
      session.reset();  // its pages go back: a parked sequence waits for them
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(status[i].ok()) << status[i];
    EXPECT_EQ(got[i], alone[i]) << "sequence " << i;
  }
  const EngineStats stats = engine.Stats();
  EXPECT_GE(stats.preemptions, 1);
  EXPECT_EQ(stats.resumes, stats.preemptions);
  EXPECT_EQ(parks[0] + parks[1], stats.preemptions);
  EXPECT_EQ(stats.parked, 0);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.failed_for_memory, 0);
  EXPECT_EQ(pool.stats().used_bytes, 0);
}

}  // namespace
}  // namespace glimpse::worker
