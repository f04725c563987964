// Turns on the real default model against a real cache node (in-process, gRPC + loopback
// transport): a decode worker's turns (worker::TurnRunner::Decode) — recompute, hot and warm
// starts, the turn's states, eviction with its evicted pages stored, and bad input that leaves the
// hot copy alone.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache-node/test_cache_node.h"
#include "core/common/clock.h"
#include "core/common/grpc/server.h"
#include "core/eviction/decode_eviction.h"
#include "core/model/generator.h"
#include "core/model/test_model.h"
#include "core/transport/loopback/loopback_transport.h"
#include "core/worker/turn_runner.h"
#include "gtest/gtest.h"

namespace glimpse::decode_worker {
namespace {

class DecodeTurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    auto node = cache_node::testing::TestCacheNode::Start("turn_runner");
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    auto client = node_->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    cache_ = *std::move(client);
    hot_ = std::make_unique<worker::HotSessions>(int64_t{1} << 30, /*reencode_idle=*/true);
    runner_ = std::make_unique<worker::TurnRunner>(
        *model_, model::testing::SharedPool(),
        worker::TurnParts{.cache = cache_.get(), .hot = hot_.get()}, worker::TurnRunnerOptions{});
  }
  void TearDown() override {
    runner_.reset();
    cache_.reset();
    node_.reset();
  }

  std::vector<int32_t> Chat(const std::string& user) const {
    const model::Tokenizer& tok = model_->tokenizer();
    return tok.Encode(tok.ApplyChatTemplate({{"user", user}}, true));
  }
  std::vector<int32_t> Encode(const std::string& text) const {
    return model_->tokenizer().Encode(text);
  }

  worker::TurnRequest Request(std::vector<int32_t> tokens, const std::string& method = "",
                              double ratio = 1.0, const std::string& codec = "fp16") const {
    worker::TurnRequest r;
    r.session_id = "s1";
    r.namespace_key = kvstate::MakeNamespaceKey(
        "tenant", *kvstate::FingerprintFromHex(model_->fingerprint()), method + codec);
    r.tokens = std::move(tokens);
    r.max_tokens = 6;
    r.policy = *worker::ParsePolicy(method, ratio, codec);
    return r;
  }

  // Runs a turn, collecting the streamed ids and text.
  absl::StatusOr<worker::TurnResult> Run(const worker::TurnRequest& r,
                                         std::vector<int32_t>* ids = nullptr,
                                         std::string* text = nullptr, int stop_after = 0) {
    int seen = 0;
    worker::TurnCallbacks cb;
    cb.tokens = [&](std::span<const int32_t> got, const std::string& piece) {
      if (ids) ids->insert(ids->end(), got.begin(), got.end());
      if (text) *text += piece;
      seen += static_cast<int>(got.size());
      return stop_after == 0 || seen < stop_after;
    };
    return runner_->Decode(r, cb);
  }

  const model::Model* model_ = nullptr;
  std::unique_ptr<model::KvPool> kv_pool_;  // declared before hot_: outlives its sessions
  std::unique_ptr<cache_node::testing::TestCacheNode> node_;
  std::unique_ptr<cache_client::CacheClient> cache_;
  std::unique_ptr<worker::HotSessions> hot_;
  std::unique_ptr<worker::TurnRunner> runner_;
};

TEST_F(DecodeTurnTest, RecomputeGeneratesWhatAPlainSessionGenerates) {
  const auto prompt = Chat("What is the capital of France?");
  std::vector<int32_t> ids;
  std::string text;
  auto turn = Run(Request(prompt), &ids, &text);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->start.source, worker::Source::kRecompute);
  EXPECT_EQ(turn->start.prefilled_tokens, static_cast<int32_t>(prompt.size()));

  model::Sequence plain(*model_, model::testing::SharedPool());
  auto sampler = model::Sampler::Create({});
  auto want = model::Generate(plain, *sampler, prompt, 6);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(ids, want->tokens);
  EXPECT_EQ(text, *model_->tokenizer().Decode(want->tokens));
  // The stored state summarises the prompt and every generated token but the last sampled one.
  ASSERT_TRUE(turn->state_key.has_value());
  EXPECT_EQ(turn->kv_tokens, static_cast<int64_t>(prompt.size() + ids.size() - 1));
  EXPECT_GT(turn->state_bytes, 0u);
  EXPECT_EQ(turn->start.kept_entries, turn->start.total_entries);
}

// A turn is in one state at a time: prefilling until its first event, decoding while it streams,
// and counted done when it returns (failed ones too).
TEST_F(DecodeTurnTest, ATurnMovesThroughItsStatesAndIsDoneWhenItReturns) {
  using worker::TurnState;
  auto in = [&](TurnState s) { return runner_->stats().in_state[static_cast<size_t>(s)]; };
  std::vector<int64_t> prefilling_at_start, decoding_at_token;
  worker::TurnCallbacks cb;
  cb.started = [&](const worker::TurnStart&) {
    prefilling_at_start.push_back(in(TurnState::kPrefilling));
  };
  cb.tokens = [&](std::span<const int32_t>, const std::string&) {
    decoding_at_token.push_back(in(TurnState::kDecoding));
    return true;
  };
  ASSERT_TRUE(runner_->Decode(Request(Chat("Hi!")), cb).ok());
  EXPECT_EQ(prefilling_at_start, std::vector<int64_t>{1});
  ASSERT_FALSE(decoding_at_token.empty());
  EXPECT_EQ(decoding_at_token, std::vector<int64_t>(decoding_at_token.size(), 1));
  worker::TurnRequest bad = Request(Chat("Hi!"));
  bad.policy.method = "no-such-method";
  EXPECT_FALSE(runner_->Decode(bad, cb).ok());  // refused before it starts: not a turn
  const worker::TurnStats stats = runner_->stats();
  EXPECT_EQ(stats.in_state, (std::array<int64_t, worker::kTurnStates>{}));
  EXPECT_EQ(stats.done, 1);
}

TEST_F(DecodeTurnTest, NextTurnsContinueHotThenWarmAndGenerateTheSame) {
  std::vector<int32_t> conversation = Chat("Name three colours of the rainbow.");
  std::vector<int32_t> ids;
  auto t1 = Run(Request(conversation), &ids);
  ASSERT_TRUE(t1.ok()) << t1.status();
  conversation.insert(conversation.end(), ids.begin(), ids.end());
  const auto more = Encode(
      "<|im_end|>\n<|im_start|>user\nAnd two more?<|im_end|>\n"
      "<|im_start|>assistant\n");
  conversation.insert(conversation.end(), more.begin(), more.end());

  std::vector<int32_t> hot_ids;
  auto hot = Run(Request(conversation), &hot_ids);
  ASSERT_TRUE(hot.ok()) << hot.status();
  EXPECT_EQ(hot->start.source, worker::Source::kHot);
  EXPECT_EQ(hot->start.reused_tokens, t1->kv_tokens);

  // The same turn again after the hot copy is gone: from the cache node. Turn 2's stored state
  // holds tokens this request lacks (what turn 2 generated), so the longest stored prefix is
  // turn 1's state.
  hot_->Release("s1");
  std::vector<int32_t> warm_ids;
  auto warm = Run(Request(conversation), &warm_ids);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->start.source, worker::Source::kWarm);
  EXPECT_EQ(warm->start.reused_tokens, t1->kv_tokens);
  EXPECT_GT(warm->start.load_seconds, 0.0);
  EXPECT_EQ(warm_ids, hot_ids);  // fp16 pages of fp32 KV: the same greedy tokens here
}

TEST_F(DecodeTurnTest, EvictionKeepsTheBudgetAndStoresTheEvictedPages) {
  std::string long_text;
  for (int i = 0; i < 12; ++i) long_text += "Paris is the capital of France and a city of art. ";
  const auto prompt = Chat(long_text + "Summarise.");
  const worker::TurnRequest request = Request(prompt, "streamingllm", 0.3, "int8");
  auto turn = Run(request);
  ASSERT_TRUE(turn.ok()) << turn.status();
  const int64_t heads = int64_t{model_->config().n_layers} * model_->config().n_kv_heads;
  // Budget max(ceil(0.3 · T), sinks 4 + window 32) per head.
  const int64_t budget = std::max<int64_t>(std::ceil(0.3 * prompt.size()), 36);
  EXPECT_EQ(turn->start.kept_entries, budget * heads);
  EXPECT_EQ(turn->start.total_entries, static_cast<int64_t>(prompt.size()) * heads);
  EXPECT_EQ(turn->kv_entries, turn->start.kept_entries + (turn->generated_tokens - 1) * heads);
  ASSERT_TRUE(turn->state_key.has_value());
  auto stored = cache_->Get(request.namespace_key, *turn->state_key,
                            *kvstate::FingerprintFromHex(model_->fingerprint()));
  ASSERT_TRUE(stored.ok()) << stored.status();
  // The key alone is not enough: under another namespace the state is unknown.
  const kvstate::NamespaceKey other = kvstate::MakeNamespaceKey(
      "another tenant", *kvstate::FingerprintFromHex(model_->fingerprint()), "streamingllmint8");
  EXPECT_EQ(
      cache_->Get(other, *turn->state_key, *kvstate::FingerprintFromHex(model_->fingerprint()))
          .status()
          .code(),
      absl::StatusCode::kNotFound);
  int64_t retained = 0, evicted = 0;
  for (const kvstate::PageRef& p : stored->manifest.pages) {
    (p.tier == kvstate::Tier::kRetained ? retained : evicted) += p.n_tokens;
  }
  EXPECT_EQ(retained, turn->kv_entries);
  EXPECT_EQ(evicted, turn->start.total_entries - turn->start.kept_entries);
  // int8 pages: about half of fp16 plus headers, summaries and scales; the retained pages hold
  // about budget / T of the entries.
  EXPECT_LT(turn->state_bytes, turn->full_fp16_bytes);
  EXPECT_LT(turn->retained_bytes, turn->state_bytes);
  EXPECT_GT(turn->full_fp16_bytes, 4 * turn->retained_bytes);
}

// Turn 1 evicts under SnapKV; turn 2 (hot) is offered turn 1's evicted entries back (recall) and
// still keeps its budget. Every position of the conversation is then either hot in the stored
// state or in the cold tier GatherColdEntries assembles from the stored states, never both.
TEST_F(DecodeTurnTest, RecallOffersEarlierEvictionsBackAndTheTiersCoverTheConversation) {
  std::string long_text;
  for (int i = 0; i < 10; ++i) {
    long_text += "Room " + std::to_string(i) + " has a blue door and a lamp. ";
  }
  std::vector<int32_t> conversation = Chat(long_text + "The code word is falcon. Say hello.");
  std::vector<int32_t> ids;
  auto t1 = Run(Request(conversation, "snapkv", 0.3), &ids);
  ASSERT_TRUE(t1.ok()) << t1.status();
  EXPECT_LT(t1->start.kept_entries, t1->start.total_entries);
  EXPECT_EQ(t1->start.recall_candidates, 0);  // nothing was evicted before turn 1
  conversation.insert(conversation.end(), ids.begin(), ids.end());
  const auto more = Encode(
      "<|im_end|>\n<|im_start|>user\nWhat was the code word?<|im_end|>\n<|im_start|>assistant\n");
  conversation.insert(conversation.end(), more.begin(), more.end());
  std::vector<int32_t> ids2;
  auto t2 = Run(Request(conversation, "snapkv", 0.3), &ids2);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ(t2->start.source, worker::Source::kHot);
  EXPECT_GT(t2->start.recall_candidates, 0);
  EXPECT_GE(t2->start.recalled_entries, 0);
  EXPECT_LE(t2->start.recalled_entries, t2->start.recall_candidates);
  const int64_t heads = int64_t{model_->config().n_layers} * model_->config().n_kv_heads;
  EXPECT_LE(t2->start.kept_entries, heads * static_cast<int64_t>(conversation.size()));

  // The tiers of turn 2's stored state and of the states before it.
  std::vector<int32_t> summarised = conversation;
  summarised.insert(summarised.end(), ids2.begin(), ids2.end() - 1);
  ASSERT_EQ(static_cast<int64_t>(summarised.size()), t2->kv_tokens);
  const worker::TurnRequest r = Request(summarised, "snapkv", 0.3);
  auto stored = worker::LoadStoredPrefix(*cache_, *model_, model::testing::SharedPool(), {},
                                         r.namespace_key, summarised, "s1", /*with_cold=*/true);
  ASSERT_TRUE(stored.has_value());
  ASSERT_EQ(stored->token_count, t2->kv_tokens);
  const model::KvCache& hot = stored->session->cache();
  const std::vector<model::KvHead> cold =
      worker::GatherColdEntries(*cache_, *model_, r.namespace_key, summarised, hot, "s1");
  ASSERT_EQ(static_cast<int64_t>(cold.size()), heads);
  int64_t cold_entries = 0;
  for (int64_t i = 0; i < heads; ++i) {
    const model::KvHead h = hot.Read(i / hot.n_kv_heads(), i % hot.n_kv_heads());
    std::vector<int32_t> all = h.positions;
    all.insert(all.end(), cold[i].positions.begin(), cold[i].positions.end());
    std::sort(all.begin(), all.end());
    ASSERT_EQ(static_cast<int64_t>(all.size()), t2->kv_tokens) << "head " << i;
    for (int32_t p = 0; p < t2->kv_tokens; ++p) ASSERT_EQ(all[p], p) << "head " << i;
    EXPECT_TRUE(std::is_sorted(cold[i].positions.begin(), cold[i].positions.end()));
    cold_entries += cold[i].size();
  }
  EXPECT_GT(cold_entries, 0);
  // The newest state's share, decoded with the warm load, stands in for fetching it again.
  const std::vector<model::KvHead> reused = worker::GatherColdEntries(
      *cache_, *model_, r.namespace_key, summarised, hot, "s1", std::move(stored->cold));
  ASSERT_EQ(reused.size(), cold.size());
  for (size_t i = 0; i < cold.size(); ++i) {
    EXPECT_EQ(reused[i].positions, cold[i].positions) << "head " << i;
    EXPECT_EQ(reused[i].keys, cold[i].keys) << "head " << i;
  }
}

TEST_F(DecodeTurnTest, ACancelledTurnStopsAndIsStillStored) {
  std::vector<int32_t> ids;
  auto turn = Run(Request(Chat("Count from one to ten.")), &ids, nullptr, /*stop_after=*/2);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->stop, model::StopReason::kCancelled);
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(turn->state_key.has_value());
}

TEST_F(DecodeTurnTest, AStopStringEndsTheTurnAndItsTextStopsBeforeIt) {
  const auto prompt = Chat("Count from one to ten, one number per line.");
  std::string full;
  worker::TurnRequest r = Request(prompt);
  r.max_tokens = 24;
  ASSERT_TRUE(Run(r, nullptr, &full).ok());
  // A stop string from the middle of what the turn generates unstopped (greedy: the same text).
  const size_t cut = full.size() / 2;
  ASSERT_GT(cut, 2u) << full;
  r.stop = {full.substr(cut, 2), "never generated"};
  r.session_id = "s2";
  std::vector<int32_t> ids;
  std::string text;
  auto turn = Run(r, &ids, &text);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(text, full.substr(0, full.find(r.stop[0])));
  EXPECT_EQ(turn->stop, model::StopReason::kEndOfGeneration);
  EXPECT_LT(turn->generated_tokens, 24);
  EXPECT_EQ(turn->generated_tokens, static_cast<int32_t>(ids.size()));

  r.stop = {""};
  EXPECT_EQ(Run(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DecodeTurnTest, BadInputIsRefusedAndTheHotCopyStays) {
  const auto prompt = Chat("Hello!");
  ASSERT_TRUE(Run(Request(prompt)).ok());
  ASSERT_EQ(hot_->Stats().sessions, 1);

  worker::TurnRequest bad = Request(prompt);
  bad.tokens.push_back(model_->config().vocab_size);
  EXPECT_EQ(Run(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Request(prompt);
  bad.max_tokens = 0;
  EXPECT_EQ(Run(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Request(std::vector<int32_t>(model_->config().context_length, 1));
  EXPECT_EQ(Run(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Request(prompt);
  bad.policy.method = "lookahead";  // this runner has no module
  EXPECT_EQ(Run(bad).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(hot_->Stats().sessions, 1);

  EXPECT_EQ(worker::ParsePolicy("nope", 0.5, "fp16").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::ParsePolicy("snapkv", 0.0, "fp16").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::ParsePolicy("snapkv", 0.5, "fp4").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DecodeTurnTest, AnUnreachableCacheNodeMeansRecomputeNotFailure) {
  std::vector<std::unique_ptr<transport::Transport>> transports;
  transports.push_back(*transport::CreateLoopbackTransport(node_->fabric()));
  auto dead = cache_client::CacheClient::Create({{"127.0.0.1:1"}, {}, absl::Seconds(2)},
                                                std::move(transports));
  ASSERT_TRUE(dead.ok());
  worker::HotSessions hot(int64_t{1} << 30, /*reencode_idle=*/true);
  worker::TurnRunner runner(*model_, model::testing::SharedPool(),
                            worker::TurnParts{.cache = dead->get(), .hot = &hot}, {});
  auto turn = runner.Decode(Request(Chat("Hi")), {});
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->start.source, worker::Source::kRecompute);
  EXPECT_FALSE(turn->state_key.has_value());
  EXPECT_EQ(hot.Stats().sessions, 1);
}

// A worker's KV pool holds sessions in their codec; when a turn needs room, idle hot copies go
// (least recently used first) and their sessions continue warm; greedy tokens are those of a
// session held in the same format.
TEST_F(DecodeTurnTest, APoolTooSmallForTwoSessionsDropsTheIdleOneAndTheTurnsStillAnswer) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  const auto prompt = Chat("What is the capital of France?");  // under 64 tokens with the answer
  model::KvPool probe({.head_dim = c.head_dim});
  // Room for one session's pages (one page per head) and a little more, not for two.
  kv_pool_ = std::make_unique<model::KvPool>(
      model::KvPool::Options{.budget_bytes = heads * probe.PageBytes(kernels::KvDType::kI8) * 3 / 2,
                             .head_dim = c.head_dim});
  model::KvPool& pool = *kv_pool_;
  worker::TurnRunnerOptions o;
  o.kv_pool = &pool;
  runner_ = std::make_unique<worker::TurnRunner>(
      *model_, model::testing::SharedPool(),
      worker::TurnParts{.cache = cache_.get(), .hot = hot_.get()}, o);
  worker::TurnRequest a = Request(prompt, "", 1.0, "int8");
  std::vector<int32_t> ids_a;
  auto ta = Run(a, &ids_a);
  ASSERT_TRUE(ta.ok()) << ta.status();
  EXPECT_EQ(pool.stats().used_pages[static_cast<size_t>(kernels::KvDType::kI8)], heads);

  worker::TurnRequest b = a;
  b.session_id = "s2";
  auto tb = Run(b);
  ASSERT_TRUE(tb.ok()) << tb.status();
  EXPECT_EQ(hot_->Stats().dropped_for_room, 1);  // s1's idle copy made room for s2
  EXPECT_EQ(hot_->Stats().sessions, 1);
  EXPECT_LE(pool.stats().used_bytes, pool.budget_bytes());

  // The same tokens as a session holding int8 pages on its own.
  model::KvPool own({.head_dim = c.head_dim});
  model::Sequence plain(*model_, model::testing::SharedPool(),
                        {.kv_pool = &own, .kv_dtype = kernels::KvDType::kI8});
  auto sampler = model::Sampler::Create({});
  auto want = model::Generate(plain, *sampler, prompt, 6);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(ids_a, want->tokens);
  runner_.reset();
  hot_.reset();  // the hot sessions' pages go back to `pool` before it goes
  EXPECT_EQ(pool.stats().used_bytes, 0);
}

// Turns of different sessions run at once (their decodes share the engine's steps) and each
// streams what it streams alone, with its own eviction.
TEST_F(DecodeTurnTest, ConcurrentTurnsOfDifferentSessionsStreamWhatTheyStreamAlone) {
  const char* const questions[] = {"What is the capital of France?", "Name three primes.",
                                   "Tell me about lighthouses."};
  constexpr int kTurns = 3;
  std::vector<worker::TurnRequest> requests;
  for (int i = 0; i < kTurns; ++i) {
    requests.push_back(Request(Chat(questions[i]), i == 1 ? "snapkv" : "", i == 1 ? 0.5 : 1.0));
    requests.back().session_id = "c" + std::to_string(i);
    requests.back().max_tokens = 10;
  }
  std::vector<std::vector<int32_t>> alone(kTurns), together(kTurns);
  for (int i = 0; i < kTurns; ++i) {
    worker::TurnRequest r = requests[i];
    r.session_id += "-alone";
    ASSERT_TRUE(Run(r, &alone[i]).ok());
  }
  std::vector<absl::Status> status(kTurns);
  std::vector<std::thread> threads;
  for (int i = 0; i < kTurns; ++i) {
    threads.emplace_back([&, i] { status[i] = Run(requests[i], &together[i]).status(); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kTurns; ++i) {
    EXPECT_TRUE(status[i].ok()) << status[i];
    EXPECT_EQ(together[i], alone[i]) << questions[i];
  }
  EXPECT_GE(runner_->engine_stats().steps, 10);
}

// Two turns in a pool that holds either to its end but not both: when a decode step does not
// fit, the younger decode is parked on the cache node and resumes when the older one's pages are
// free (its idle hot copy dropped), and both stream the tokens they stream alone.
TEST_F(DecodeTurnTest, AFullPoolParksADecodeOnTheCacheNodeAndItStreamsWhatItStreamsAlone) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  constexpr int32_t kPage = 16;
  constexpr int32_t kMax = 100;  // more than the engine lets a decode run ahead of its consumer
  const std::vector<int32_t> prompts[] = {Chat("Tell me about lighthouses."),
                                          Chat("Write a short story about a cat.")};
  std::vector<int32_t> alone[2];
  for (int i = 0; i < 2; ++i) {  // a session of its own, in the same format
    model::KvPool own({.head_dim = c.head_dim});
    model::Sequence plain(*model_, model::testing::SharedPool(),
                          {.kv_pool = &own, .kv_dtype = kernels::KvDType::kF16});
    auto sampler = model::Sampler::Create({});
    auto want = model::Generate(plain, *sampler, prompts[i], kMax);
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(want->tokens.size(), static_cast<size_t>(kMax));  // no early end: pages must meet
    alone[i] = want->tokens;
  }
  auto pages = [&](int64_t tokens) { return (tokens + kPage - 1) / kPage; };
  const int64_t first[] = {pages(prompts[0].size()), pages(prompts[1].size())};
  const int64_t last[] = {pages(prompts[0].size() + kMax - 1), pages(prompts[1].size() + kMax - 1)};
  model::KvPool probe({.page_tokens = kPage, .head_dim = c.head_dim});
  kv_pool_ = std::make_unique<model::KvPool>(
      model::KvPool::Options{.budget_bytes = heads * probe.PageBytes(kernels::KvDType::kF16) *
                                             std::max(last[0] + first[1], last[1] + first[0]),
                             .page_tokens = kPage,
                             .head_dim = c.head_dim});
  worker::TurnRunnerOptions o;
  o.kv_pool = kv_pool_.get();
  o.page_tokens = kPage;
  runner_ = std::make_unique<worker::TurnRunner>(
      *model_, model::testing::SharedPool(),
      worker::TurnParts{.cache = cache_.get(), .hot = hot_.get()}, o);
  // Each consumer waits at its first token for the other's: both decodes are running.
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::vector<int32_t> got[2];
  absl::Status status[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      worker::TurnRequest r = Request(prompts[i]);
      r.session_id = "p" + std::to_string(i);
      r.max_tokens = kMax;
      worker::TurnCallbacks cb;
      cb.tokens = [&](std::span<const int32_t> ids, const std::string&) {
        if (got[i].empty() && !ids.empty()) {
          std::unique_lock<std::mutex> lock(mu);
          ++started;
          cv.notify_all();
          cv.wait_for(lock, std::chrono::seconds(60), [&] { return started == 2; });
        }
        got[i].insert(got[i].end(), ids.begin(), ids.end());
        return true;
      };
      status[i] = runner_->Decode(r, cb).status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(status[i].ok()) << status[i];
    EXPECT_EQ(got[i], alone[i]) << "turn " << i;
  }
  const worker::EngineStats stats = runner_->engine_stats();
  EXPECT_GE(stats.preemptions, 1);
  EXPECT_EQ(stats.resumes, stats.preemptions);
  EXPECT_EQ(stats.parked, 0);
  EXPECT_EQ(stats.failed_for_memory, 0);
  EXPECT_GE(hot_->Stats().dropped_for_room, 1);
  // Every parked turn came back to decoding and ended.
  EXPECT_EQ(runner_->stats().in_state, (std::array<int64_t, worker::kTurnStates>{}));
  // The parked states are deleted: the node holds the two turns' states only.
  auto node_stats = cache_->Stats();
  ASSERT_TRUE(node_stats.ok()) << node_stats.status();
  EXPECT_EQ(node_stats->states(), 2u);
  runner_.reset();
  hot_.reset();
  EXPECT_EQ(kv_pool_->stats().used_bytes, 0);
}

// Room is made for what a turn may hold: with decode-time eviction that is budget + interval
// entries per head, not its prompt plus max_tokens, so an idle hot copy that fits beside it stays.
TEST_F(DecodeTurnTest, ATurnWithADecodeBudgetNeedsRoomOnlyForItsBound) {
  const model::ModelConfig& c = model_->config();
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  const auto prompt = Chat("What is the capital of France?");  // under 64 tokens
  model::KvPool probe({.head_dim = c.head_dim});
  // Three pages per head: the idle copy's one and a bounded turn's one fit, a 200-token turn not.
  kv_pool_ = std::make_unique<model::KvPool>(model::KvPool::Options{
      .budget_bytes = heads * probe.PageBytes(kernels::KvDType::kI8) * 3, .head_dim = c.head_dim});
  worker::TurnRunnerOptions o;
  o.kv_pool = kv_pool_.get();
  runner_ = std::make_unique<worker::TurnRunner>(
      *model_, model::testing::SharedPool(),
      worker::TurnParts{.cache = cache_.get(), .hot = hot_.get()}, o);
  worker::TurnRequest a = Request(prompt, "", 1.0, "int8");
  ASSERT_TRUE(Run(a).ok());
  worker::TurnRequest bounded = Request(prompt, "streamingllm", 1.0, "int8");
  ASSERT_TRUE(SetDecodeEviction(bounded.policy, 40, 8).ok());
  bounded.session_id = "bounded";
  bounded.max_tokens = 200;
  auto turn = Run(bounded);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(hot_->Stats().dropped_for_room, 0);
  EXPECT_EQ(hot_->Stats().sessions, 2);

  worker::TurnRequest unbounded = Request(prompt, "", 1.0, "int8");
  unbounded.session_id = "unbounded";
  unbounded.max_tokens = 200;
  ASSERT_TRUE(Run(unbounded).ok());
  EXPECT_GE(hot_->Stats().dropped_for_room, 1);  // its prompt + 200 tokens could need 4 pages
  runner_.reset();
  hot_.reset();
}

// Decode-time eviction keeps a turn's generation within budget + interval entries per head and
// gives the tokens an in-process decode with the same eviction gives; a method that cannot evict
// while decoding fails the turn before it runs.
TEST_F(DecodeTurnTest, DecodeTimeEvictionBoundsTheGenerationAndStoresWhatItEvicts) {
  const auto prompt = Chat("Write a long poem about the sea and the ships that sail on it.");
  constexpr int64_t kBudget = 40, kInterval = 8;
  worker::TurnRequest r = Request(prompt, "streamingllm", 1.0);
  ASSERT_TRUE(SetDecodeEviction(r.policy, kBudget, kInterval).ok());
  r.max_tokens = 48;
  std::vector<int32_t> ids;
  auto turn = Run(r, &ids);
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_GT(turn->decode_evicted_entries, 0);
  EXPECT_LE(turn->hot_tokens, kBudget + kInterval);
  EXPECT_GT(turn->state_bytes, turn->retained_bytes);  // the evicted entries' pages too

  model::Sequence plain(*model_, model::testing::SharedPool());
  auto settings = eviction::BuiltInSettings("streamingllm");
  ASSERT_TRUE(settings.ok());
  auto scorer = eviction::CreateScorer(settings->scorer);
  ASSERT_TRUE(scorer.ok());
  auto eviction = eviction::DecodeEviction::Create(
      *model_, **scorer, eviction::DecodeEvictionFor(*settings, kBudget, kInterval));
  ASSERT_TRUE(eviction.ok()) << eviction.status();
  auto logits = plain.Forward(prompt);
  ASSERT_TRUE(logits.ok());
  auto sampler = model::Sampler::Create({});
  auto want = model::DecodeFrom(plain, *sampler, *logits, 48, {}, eviction->get());
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(ids, want->tokens);

  worker::TurnRequest bad = Request(prompt, "expected_attention", 0.5);
  ASSERT_TRUE(SetDecodeEviction(bad.policy, kBudget, kInterval).ok());
  bad.session_id = "s2";
  EXPECT_EQ(Run(bad).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace glimpse::decode_worker
