// A prefill worker and a decode worker on the real default model, with a real cache node
// (in-process, gRPC + loopback transport): the decode worker continues from the delivery exactly
// as it would from the same state loaded warm; both tiers are stored; a later prefill starts from
// the decode worker's stored state; concurrent jobs interleave and ship what they ship alone; bad
// jobs are refused before any work.
#include <cmath>
#include <thread>

#include "cache-node/test_cache_node.h"
#include "core/common/status_macros.h"
#include "core/model/test_model.h"
#include "core/transport/loopback/loopback_transport.h"
#include "core/worker/turn_runner.h"
#include "gtest/gtest.h"

namespace glimpse::prefill_worker {
namespace {

using worker::Source;
using worker::TurnRequest;
using worker::TurnResult;

class PrefillTurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::testing::SharedDefaultModel();
    ASSERT_NE(model_, nullptr);
    auto node = cache_node::testing::TestCacheNode::Start("prefiller");
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    prefill_cache_ = NewCacheClient();
    decode_cache_ = NewCacheClient();
    ship_ = *transport::CreateLoopbackTransport(node_->fabric());
    inbox_ = std::make_unique<worker::DeliveryInbox>(
        *transport::CreateLoopbackTransport(node_->fabric()));
    prefiller_ = std::make_unique<worker::TurnRunner>(
        *model_, model::testing::SharedPool(),
        worker::TurnParts{.cache = prefill_cache_.get(), .ship = ship_.get()},
        worker::TurnRunnerOptions{});
    hot_ = std::make_unique<worker::HotSessions>(int64_t{1} << 30,
                                                 /*reencode_idle=*/true);
    worker::TurnRunnerOptions d;
    d.delivery_timeout = absl::Milliseconds(300);
    runner_ = std::make_unique<worker::TurnRunner>(
        *model_, model::testing::SharedPool(),
        worker::TurnParts{.cache = decode_cache_.get(), .hot = hot_.get(), .inbox = inbox_.get()},
        d);
  }
  void TearDown() override {
    runner_.reset();
    prefiller_.reset();
    inbox_.reset();
    prefill_cache_.reset();
    decode_cache_.reset();
    node_.reset();
  }
  std::unique_ptr<cache_client::CacheClient> NewCacheClient() {
    auto client = node_->NewClient();
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::vector<int32_t> Chat(const std::string& user) const {
    const model::Tokenizer& tok = model_->tokenizer();
    return tok.Encode(tok.ApplyChatTemplate({{"user", user}}, true));
  }
  kvstate::NamespaceKey Namespace() const {
    return kvstate::MakeNamespaceKey("tenant", *kvstate::FingerprintFromHex(model_->fingerprint()),
                                     "snapkv:0.3:int8");
  }
  worker::PrefillJob Job(std::vector<int32_t> tokens, uint64_t delivery) const {
    worker::PrefillJob j;
    j.session_id = "s1";
    j.namespace_key = Namespace();
    j.tokens = std::move(tokens);
    j.policy = *worker::ParsePolicy("snapkv", 0.3, "int8");
    j.decode_address = inbox_->address();
    j.delivery_id = delivery;
    return j;
  }
  worker::TurnRequest Decode(const std::string& session, std::vector<int32_t> tokens,
                             uint64_t delivery) const {
    worker::TurnRequest r;
    r.session_id = session;
    r.namespace_key = Namespace();
    r.tokens = std::move(tokens);
    r.max_tokens = 6;
    r.policy = *worker::ParsePolicy("snapkv", 0.3, "int8");
    r.delivery_id = delivery;
    return r;
  }
  absl::StatusOr<worker::TurnResult> RunDecode(const worker::TurnRequest& r,
                                               std::vector<int32_t>* ids) {
    worker::TurnCallbacks cb;
    cb.tokens = [&](std::span<const int32_t> got, const std::string&) {
      ids->insert(ids->end(), got.begin(), got.end());
      return true;
    };
    return runner_->Decode(r, cb);
  }

  // Turn 1 of session s1, prefilled here (delivery 1) and decoded; `conversation` then also holds
  // its answer and the user's `next` message, ready for turn 2.
  absl::StatusOr<worker::TurnResult> FirstTurn(std::vector<int32_t>& conversation,
                                               const std::string& next) {
    RETURN_IF_ERROR(prefiller_->Prefill(Job(conversation, 1)).status());
    std::vector<int32_t> ids;
    absl::StatusOr<worker::TurnResult> t1 = RunDecode(Decode("s1", conversation, 1), &ids);
    if (!t1.ok()) return t1;
    conversation.insert(conversation.end(), ids.begin(), ids.end());
    const std::vector<int32_t> more = model_->tokenizer().Encode(
        "<|im_end|>\n<|im_start|>user\n" + next + "<|im_end|>\n<|im_start|>assistant\n");
    conversation.insert(conversation.end(), more.begin(), more.end());
    return t1;
  }

  const model::Model* model_ = nullptr;
  std::unique_ptr<cache_node::testing::TestCacheNode> node_;
  std::unique_ptr<cache_client::CacheClient> prefill_cache_, decode_cache_;
  std::unique_ptr<transport::Transport> ship_;
  std::unique_ptr<worker::DeliveryInbox> inbox_;
  std::unique_ptr<worker::TurnRunner> prefiller_;  // the prefill worker's
  std::unique_ptr<worker::HotSessions> hot_;
  std::unique_ptr<worker::TurnRunner> runner_;
};

TEST_F(PrefillTurnTest, TheDecodeWorkerContinuesFromTheDeliveryAsFromTheSameStateLoadedWarm) {
  std::string text;
  for (int i = 0; i < 24; ++i) text += "The Seine flows through Paris to the sea. ";
  const std::vector<int32_t> prompt = Chat(text + "Where does it flow?");
  const int32_t n = static_cast<int32_t>(prompt.size());
  absl::StatusOr<worker::PrefillOutcome> p = prefiller_->Prefill(Job(prompt, 42));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->warm);
  EXPECT_EQ(p->prefilled_tokens, n - 1);
  EXPECT_EQ(p->delivered_tokens, n - 1);
  const int64_t heads = int64_t{model_->config().n_layers} * model_->config().n_kv_heads;
  EXPECT_EQ(p->total_entries, (n - 1) * heads);
  const int64_t budget = std::ceil(0.3 * (n - 1));  // over sinks + SnapKV's window (4 + 64)
  ASSERT_GT(budget, 68);
  EXPECT_EQ(p->kept_entries, budget * heads);
  EXPECT_GT(p->shipped_bytes, 0u);
  EXPECT_GT(p->stored_bytes, p->shipped_bytes);  // the evicted pages are stored too

  // Both tiers on the cache node under the state key of the n − 1 tokens.
  auto match = decode_cache_->Lookup(Namespace(), std::span(prompt.data(), n - 1));
  ASSERT_TRUE(match.ok() && match->found) << match.status();
  EXPECT_EQ(match->token_count, static_cast<uint32_t>(n - 1));
  auto stored = decode_cache_->Get(Namespace(), match->key,
                                   *kvstate::FingerprintFromHex(model_->fingerprint()));
  ASSERT_TRUE(stored.ok()) << stored.status();
  int evicted_pages = 0;
  for (const kvstate::PageRef& ref : stored->manifest.pages) {
    evicted_pages += ref.tier == kvstate::Tier::kEvicted;
  }
  EXPECT_GT(evicted_pages, 0);

  std::vector<int32_t> delivered_ids;
  absl::StatusOr<worker::TurnResult> delivered =
      RunDecode(Decode("s1", prompt, 42), &delivered_ids);
  ASSERT_TRUE(delivered.ok()) << delivered.status();
  EXPECT_EQ(delivered->start.source, worker::Source::kPrefillWorker);
  EXPECT_EQ(delivered->start.reused_tokens, n - 1);
  EXPECT_EQ(delivered->start.prefilled_tokens, 1);
  EXPECT_EQ(delivered->start.kept_entries, p->kept_entries + heads);

  // Another session, no delivery: warm from what the prefill worker stored; the same tokens.
  std::vector<int32_t> warm_ids;
  absl::StatusOr<worker::TurnResult> warm = RunDecode(Decode("s2", prompt, 0), &warm_ids);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->start.source, worker::Source::kWarm);
  EXPECT_EQ(warm->start.reused_tokens, n - 1);
  EXPECT_EQ(warm_ids, delivered_ids);
}

TEST_F(PrefillTurnTest, ALaterTurnsPrefillStartsFromTheDecodeWorkersStoredState) {
  std::vector<int32_t> conversation = Chat("Name three colours of the rainbow.");
  absl::StatusOr<worker::TurnResult> t1 = FirstTurn(conversation, "And two more?");
  ASSERT_TRUE(t1.ok()) << t1.status();
  absl::StatusOr<worker::PrefillOutcome> p2 = prefiller_->Prefill(Job(conversation, 2));
  ASSERT_TRUE(p2.ok()) << p2.status();
  EXPECT_TRUE(p2->warm);
  EXPECT_EQ(p2->reused_tokens, t1->kv_tokens);
  EXPECT_EQ(p2->prefilled_tokens, static_cast<int32_t>(conversation.size()) - 1 - t1->kv_tokens);
  // Turn 1 was shorter than SnapKV's 64-token window plus the sinks: nothing was evicted, so
  // there is nothing to recall.
  EXPECT_EQ(p2->recall_candidates, 0);
  std::vector<int32_t> ids2;
  absl::StatusOr<worker::TurnResult> t2 = RunDecode(Decode("s1", conversation, 2), &ids2);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ(t2->start.source,
            worker::Source::kPrefillWorker);  // the delivery wins over the hot copy
}

// A session hot on the decode worker gets only a delta: the prefill starts from the state the
// decode worker stored, ships what it lacks and what to drop, and the decode worker's hot copy
// ends holding the same entries a whole delivery of the same prefill gives a fresh session.
TEST_F(PrefillTurnTest, AHotSessionGetsADeltaThatEndsWhereAWholeDeliveryDoes) {
  std::string long_text;
  for (int i = 0; i < 12; ++i) long_text += "Shelf " + std::to_string(i) + " holds red books. ";
  std::vector<int32_t> conversation = Chat(long_text + "Which shelf is first?");
  absl::StatusOr<worker::TurnResult> t1 =
      FirstTurn(conversation, "And which shelf is last? Answer with its number and say why.");
  ASSERT_TRUE(t1.ok()) << t1.status();

  worker::PrefillJob whole_job = Job(conversation, 2);
  absl::StatusOr<worker::PrefillOutcome> whole = prefiller_->Prefill(whole_job);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_FALSE(whole->delta);
  std::vector<int32_t> whole_ids;
  absl::StatusOr<worker::TurnResult> fresh = RunDecode(Decode("s2", conversation, 2), &whole_ids);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_EQ(fresh->start.source, worker::Source::kPrefillWorker);

  worker::PrefillJob delta_job = Job(conversation, 3);
  delta_job.hot_tokens = static_cast<int32_t>(t1->kv_tokens);
  absl::StatusOr<worker::PrefillOutcome> delta = prefiller_->Prefill(delta_job);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_TRUE(delta->delta);
  EXPECT_EQ(delta->reused_tokens, t1->kv_tokens);
  EXPECT_LT(delta->shipped_bytes, whole->shipped_bytes);
  std::vector<int32_t> delta_ids;
  absl::StatusOr<worker::TurnResult> hot = RunDecode(Decode("s1", conversation, 3), &delta_ids);
  ASSERT_TRUE(hot.ok()) << hot.status();
  EXPECT_EQ(hot->start.source, worker::Source::kPrefillWorker);
  EXPECT_EQ(hot->start.kept_entries, fresh->start.kept_entries);
  EXPECT_EQ(hot->start.reused_tokens, fresh->start.reused_tokens);

  // A delta for a session this decode worker does not hold: logged, and the turn goes on without.
  worker::PrefillJob stray = Job(conversation, 4);
  stray.hot_tokens = static_cast<int32_t>(t1->kv_tokens);
  ASSERT_TRUE(prefiller_->Prefill(stray).ok());
  std::vector<int32_t> stray_ids;
  absl::StatusOr<worker::TurnResult> other = RunDecode(Decode("s3", conversation, 4), &stray_ids);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->start.source, worker::Source::kPrefillWorker);
}

TEST_F(PrefillTurnTest, ADeliveryThatNeverComesOrDoesNotFitLeavesTheTurnToStartWithoutIt) {
  const std::vector<int32_t> prompt = Chat("Hello there!");
  std::vector<int32_t> ids;
  absl::StatusOr<worker::TurnResult> never = RunDecode(Decode("s1", prompt, 7), &ids);
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_EQ(never->start.source, worker::Source::kRecompute);

  // A delivery of another conversation: refused by its state key.
  ASSERT_TRUE(prefiller_->Prefill(Job(Chat("Something else entirely."), 8)).ok());
  ids.clear();
  absl::StatusOr<worker::TurnResult> other = RunDecode(Decode("s2", prompt, 8), &ids);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->start.source, worker::Source::kPrefillWorker);
}

// A prefill worker whose pool holds KIVI ships its full pages as they are: a KIVI delivery
// without eviction is far smaller than an fp16 one (the rows are sealed before they ship).
TEST_F(PrefillTurnTest, AKiviDeliveryShipsSealedPagesNotFp16) {
  model::KvPool pool({.page_tokens = 64, .head_dim = model_->config().head_dim});
  worker::TurnRunnerOptions o;
  o.kv_pool = &pool;
  worker::TurnRunner prefiller(*model_, model::testing::SharedPool(),
                               worker::TurnParts{.ship = ship_.get()}, o);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Lighthouses guide ships along the coast at night. ";
  uint64_t shipped[2] = {};
  uint64_t delivery = 70;
  for (const char* codec : {"fp16", "kivi4"}) {
    worker::PrefillJob job = Job(Chat(text), ++delivery);
    job.policy = *worker::ParsePolicy("", 1.0, codec);
    absl::StatusOr<worker::PrefillOutcome> p = prefiller.Prefill(job);
    ASSERT_TRUE(p.ok()) << codec << ": " << p.status();
    ASSERT_GT(p->delivered_tokens, 200);
    shipped[codec == std::string("kivi4")] = p->shipped_bytes;
  }
  EXPECT_LT(shipped[1], shipped[0] / 2) << "fp16 " << shipped[0] << ", kivi4 " << shipped[1];
  EXPECT_EQ(pool.stats().used_bytes, 0);
}

// Jobs run concurrently (their prefills take turns one chunk at a time): each ships what it ships
// when it runs alone.
TEST_F(PrefillTurnTest, ConcurrentJobsTakeTurnsAndShipWhatTheyShipAlone) {
  worker::TurnRunnerOptions o;
  o.prefill_chunk_tokens = 32;
  worker::TurnRunner prefiller(*model_, model::testing::SharedPool(),
                               worker::TurnParts{.ship = ship_.get()}, o);
  std::string text;
  for (int i = 0; i < 30; ++i) text += "The archive keeps letters from every harbour town. ";
  const std::vector<int32_t> prompts[] = {Chat(text + "Summarise."), Chat("Name a colour.")};
  uint64_t delivery = 90;
  worker::PrefillOutcome alone[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<worker::PrefillOutcome> p = prefiller.Prefill(Job(prompts[i], ++delivery));
    ASSERT_TRUE(p.ok()) << p.status();
    alone[i] = *p;
  }
  ASSERT_GT(alone[0].prefilled_tokens, 8 * o.prefill_chunk_tokens);  // many turns to take
  // While the test holds the model, the long job queues and then the short one, so the long one
  // starts first and the short one waits for it to share: no race decides the order.
  absl::StatusOr<worker::PrefillOutcome> together[2];
  std::vector<std::thread> threads;
  auto queued = [&](int64_t n) {
    while (prefiller.engine_stats().queued_work < n) std::this_thread::yield();
  };
  ASSERT_TRUE(prefiller.TEST_engine()
                  .Run([&]() -> absl::Status {
                    for (int i = 0; i < 2; ++i) {
                      const uint64_t id = ++delivery;
                      threads.emplace_back(
                          [&, i, id] { together[i] = prefiller.Prefill(Job(prompts[i], id)); });
                      queued(i + 1);
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(together[i].ok()) << together[i].status();
    EXPECT_EQ(together[i]->kept_entries, alone[i].kept_entries) << i;
    EXPECT_EQ(together[i]->shipped_bytes, alone[i].shipped_bytes) << i;
  }
  const worker::EngineStats s = prefiller.engine_stats();
  EXPECT_EQ(s.working, 0);
  EXPECT_EQ(s.queued_work, 0);
  EXPECT_GE(s.work_yields, 1);  // they did interleave
  const worker::TurnStats turns = prefiller.stats();
  for (int64_t n : turns.in_state) EXPECT_EQ(n, 0);
  EXPECT_EQ(turns.done, 4);
}

TEST_F(PrefillTurnTest, BadJobsAreRefusedNamingTheField) {
  const std::vector<int32_t> prompt = Chat("Hi");
  auto code_and_message = [&](const worker::PrefillJob& j) {
    return prefiller_->Prefill(j).status();
  };
  absl::Status st = code_and_message(Job({prompt[0]}, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("at least 2"), std::string_view::npos) << st;
  st = code_and_message(Job(prompt, 0));
  EXPECT_EQ(st.message(), "delivery_id must be nonzero");
  worker::PrefillJob j = Job(prompt, 3);
  j.tokens[1] = model_->config().vocab_size;
  EXPECT_EQ(code_and_message(j).code(), absl::StatusCode::kInvalidArgument);
  j = Job(prompt, 3);
  j.decode_address = "no such engine";
  st = code_and_message(j);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("shipping delivery 3"), std::string_view::npos) << st;
}

}  // namespace
}  // namespace glimpse::prefill_worker
