#include "core/worker/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"

namespace glimpse::worker {
namespace {

using Clock = std::chrono::steady_clock;

// How often a parked sequence or a job waiting for room looks again when nothing else wakes the
// engine.
constexpr absl::Duration kRoomRetry = absl::Milliseconds(20);
// Chunks a job runs before it lets waiting jobs go first after each chunk. Prompts of up to this
// many chunks run in arrival order: for prompts of similar length that gives the lowest mean TTFT
// (the cluster load sweep, 8 sessions: TTFT p50 0.26 s in arrival order, 0.38 s when every job
// yielded after each chunk); a longer one shares the model, so a short prompt waits for at most
// this many of its chunks.
constexpr int kChunksBeforeSharing = 4;
// How long a job waits for room once no sequence runs: pages held outside the engine (a turn that
// just ended storing its state, then an idle hot copy make_room drops) come back within it.
constexpr auto kIdleRoomWait = std::chrono::seconds(5);

// Pool bytes of one page per (layer, kv-head) of `cache`: what a sequence's next step may add.
int64_t StepPageBytes(const model::KvCache& cache) {
  return int64_t{cache.n_layers()} * cache.n_kv_heads() *
         cache.pool().PageBytes(cache.filling_dtype());
}

}  // namespace

// A job waiting to start (Run's admission; the waiting caller's).
struct Engine::Job {
  int64_t pool_bytes = 0;
  bool waited = false;  // counted in work_waited_for_memory
  // Since when nothing has been running or parked while it waited.
  std::optional<Clock::time_point> idle_since;
};

// A decoding sequence. The model's turn owns `state`, `logits` and `unfed` while it runs; the
// rest is shared with the consumer under Engine::mu_ (not ABSL_GUARDED_BY: clang cannot name the
// engine's mutex from a member of Sequence).
struct Engine::Sequence {
  Sequence(model::Sequence& s, model::Sampler& sampler, int32_t max_tokens, Parking p,
           model::DecodeObserver* o)
      : session(&s),
        state(s, sampler, max_tokens),
        parking(std::move(p)),
        observer(o),
        start_position(s.next_position()) {}
  model::Sequence* session;
  model::DecodeState state;
  const Parking parking;
  model::DecodeObserver* const observer;  // may be null
  const int32_t start_position;           // generated tokens are fed from here
  bool parked = false;                    // out of the pool, waiting (the model's turn's)
  int64_t parked_bytes = 0;               // pool bytes its pages took when it was parked
  std::vector<float> logits;              // of the last fed token
  std::optional<int32_t> unfed;           // sampled, to be fed at the next step
  uint64_t order = 0;                     // join order: the youngest yields when memory is short
  std::deque<int32_t> pending;            // sampled tokens the consumer has not taken
  bool stop_requested = false;            // the consumer stopped
  bool finished = false;
  absl::Status status;
  absl::CondVar cv;  // pending grew or finished was set
};

Engine::Engine(const model::Model& model, kernels::ThreadPool& pool, EngineOptions options)
    : options_(options), pass_(model, pool), thread_([this] { Loop(); }) {}

Engine::~Engine() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_.SignalAll();
    while (callers_ != 0) wake_.Wait(&mu_);  // waiting jobs leave; started ones finish
  }
  thread_.join();
}

absl::Status Engine::Run(const std::function<absl::Status()>& work, int64_t pool_bytes) {
  Job job;
  job.pool_bytes = pool_bytes;
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::CancelledError("the engine is stopping");
  ++callers_;
  jobs_.push_back(&job);
  ++stats_.queued_work;
  absl::Status status;
  while (true) {
    while (!stop_ && jobs_.front() != &job) wake_.Wait(&mu_);
    if (stop_) {
      jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));
      --stats_.queued_work;
      status = absl::CancelledError("the engine stopped");
      break;
    }
    mu_.Unlock();  // relocked below on every path
    {
      ComputeTurns::Turn turn(turns_);
      Admit();
      if (!parked_.empty()) Unpark();
      if (Admitted(job)) {
        {
          absl::MutexLock started(&mu_);
          jobs_.pop_front();
          --stats_.queued_work;
          ++stats_.working;
          wake_.SignalAll();  // the next job may start
        }
        status = Work(work, turn);
        mu_.Lock();
        --stats_.working;
        break;
      }
    }
    mu_.Lock();
    // Nothing tells a waiting job that pages were freed elsewhere: it looks again soon.
    const absl::Time retry = absl::Now() + kRoomRetry;
    while (!stop_) {
      if (wake_.WaitWithDeadline(&mu_, retry)) break;  // timed out
    }
  }
  --callers_;
  wake_.SignalAll();
  return status;
}

absl::Status Engine::Work(const std::function<absl::Status()>& work, ComputeTurns::Turn& turn) {
  const auto start = Clock::now();
  JobSteps steps;
  double yielded = 0.0;
  int chunks = 0;
  absl::Status status;
  {
    const model::ChunkHook shared_passes(
        [&](std::span<const model::BatchRows> chunk, const model::RunRows& run) {
          absl::StatusOr<model::PassOutputs> out = StepWithChunk(chunk, run, steps);
          if (++chunks >= kChunksBeforeSharing) {  // a long prefill: the other jobs' chunks next
            const auto yield_start = Clock::now();
            turn.Yield();
            yielded += SecondsSince(yield_start);
          }
          return out;
        });
    status = work();
  }
  const double seconds = SecondsSince(start) - steps.seconds - yielded;
  // A job whose chunks carried steps gave the decodes their turn; one whose chunks did not (or
  // that had none) is followed by a step.
  Admit();
  if (!running_.empty() && steps.count == 0) Step();
  absl::MutexLock lock(&mu_);
  ++stats_.work_done;
  stats_.work_seconds += seconds;
  return status;
}

absl::StatusOr<model::GenerationResult> Engine::Decode(
    model::Sequence& session, model::Sampler& sampler, std::vector<float> logits,
    int32_t max_tokens, const std::function<bool(int32_t)>& on_token, Parking parking,
    model::DecodeObserver* observer) {
  const auto start = Clock::now();
  auto seq = std::make_shared<Sequence>(session, sampler, max_tokens, std::move(parking), observer);
  seq->logits = std::move(logits);
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::CancelledError("the engine is stopping");
  joining_.push_back(seq);
  ++stats_.joining;
  wake_.SignalAll();
  bool accepting = true;
  while (true) {
    while (seq->pending.empty() && !seq->finished) seq->cv.Wait(&mu_);
    std::deque<int32_t> tokens;
    tokens.swap(seq->pending);
    const bool finished = seq->finished;
    wake_.SignalAll();  // room in the queue again
    mu_.Unlock();
    for (int32_t t : tokens) {
      if (accepting && on_token) accepting = on_token(t);
    }
    mu_.Lock();
    if (!accepting && !seq->stop_requested) {
      seq->stop_requested = true;
      wake_.SignalAll();
    }
    if (finished && seq->pending.empty()) break;
  }
  if (!seq->status.ok()) return seq->status;
  model::GenerationResult result = std::move(seq->state.result());
  result.decode_seconds = SecondsSince(start);
  return result;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  {
    absl::MutexLock lock(&mu_);
    s = stats_;
  }
  s.work_yields = turns_.stats().yields;
  return s;
}

void Engine::Finish(Sequence& s, absl::Status status) {
  absl::MutexLock lock(&mu_);
  s.finished = true;
  s.status = std::move(status);
  --(s.parked ? stats_.parked : stats_.running);
  s.cv.SignalAll();
}

void Engine::Admit() {
  absl::MutexLock lock(&mu_);
  stats_.running += static_cast<int64_t>(joining_.size());
  stats_.joining -= static_cast<int64_t>(joining_.size());
  for (std::shared_ptr<Sequence>& s : joining_) {
    s->order = ++joins_;
    running_.push_back(std::move(s));
  }
  joining_.clear();
}

void Engine::Erase(const Sequence* s) {
  absl::MutexLock lock(&mu_);
  running_.erase(
      std::find_if(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == s; }));
}

bool Engine::Runnable() const {
  return std::any_of(running_.begin(), running_.end(), [&](const auto& s) {
    return s->stop_requested || static_cast<int64_t>(s->pending.size()) < options_.max_pending;
  });
}

void Engine::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Started jobs carry the steps in their chunks' passes.
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (stats_.working == 0 && (!joining_.empty() || Runnable()));
      };
      if (parked_.empty()) {
        while (!ready()) wake_.Wait(&mu_);
      } else {  // nothing tells the engine that pages were freed elsewhere: look again soon
        const absl::Time retry = absl::Now() + kRoomRetry;
        while (!ready()) {
          if (wake_.WaitWithDeadline(&mu_, retry)) break;  // timed out
        }
      }
      if (stop_) break;
      if (stats_.working > 0) continue;
    }
    ComputeTurns::Turn turn(turns_);
    {
      absl::MutexLock lock(&mu_);
      if (stats_.working > 0) continue;  // a job started meanwhile: its chunks step
    }
    Admit();
    if (!parked_.empty()) Unpark();
    if (!running_.empty()) Step();
  }
  // Stopping: no job is left (the destructor waited for them), nothing more runs.
  Sequences left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(joining_);
    stats_.joining -= static_cast<int64_t>(left.size());
    stats_.running += static_cast<int64_t>(left.size());
  }
  left.insert(left.end(), running_.begin(), running_.end());
  left.insert(left.end(), parked_.begin(), parked_.end());
  for (auto& s : left) Finish(*s, absl::CancelledError("the engine stopped"));
  absl::MutexLock lock(&mu_);
  running_.clear();
  parked_.clear();
}

std::optional<int32_t> Engine::Sample(Sequence& s) {
  const size_t before = s.state.result().tokens.size();
  std::optional<int32_t> next = s.state.Next(s.logits);
  if (s.state.result().tokens.size() > before) {  // a generated token (not an end of generation)
    s.pending.push_back(s.state.result().tokens.back());
    s.cv.SignalAll();
  }
  return next;
}

struct Engine::Feed {
  std::vector<Sequence*> feeding;  // each feeds its unfed token
  std::vector<int32_t> tokens;     // their tokens, in that order
  std::vector<Sequence*> finished;
  std::vector<std::pair<Sequence*, absl::Status>> failed;  // their observer failed
  std::vector<model::BatchRows> Rows() const {
    std::vector<model::BatchRows> rows;
    for (size_t i = 0; i < feeding.size(); ++i) {
      model::BatchRows& r = rows.emplace_back();
      r.sequence = feeding[i]->session;
      r.tokens = std::span(&tokens[i], 1);
      r.call.observer = feeding[i]->observer;
    }
    return rows;
  }
};

Engine::Feed Engine::Gather() {
  Feed feed;
  absl::MutexLock lock(&mu_);
  for (const auto& s : running_) {
    if (s->stop_requested) {
      s->state.result().stop = model::StopReason::kCancelled;
      feed.finished.push_back(s.get());
      continue;
    }
    if (static_cast<int64_t>(s->pending.size()) >= options_.max_pending) continue;
    if (!s->unfed) {  // just joined: sample from the prompt's logits
      s->unfed = Sample(*s);
      if (!s->unfed) {
        feed.finished.push_back(s.get());
        continue;
      }
    }
    feed.feeding.push_back(s.get());
    feed.tokens.push_back(*s->unfed);
  }
  return feed;
}

void Engine::Fed(Feed& feed, std::span<std::vector<float>> logits, double seconds,
                 bool with_prefill) {
  // Observers act on their sessions outside mu_ (consumers keep draining meanwhile).
  std::vector<absl::Status> observed(feed.feeding.size());
  for (size_t i = 0; i < feed.feeding.size(); ++i) {
    Sequence& s = *feed.feeding[i];
    s.session->cache().Seal();  // a page a step filled holds final rows
    if (s.observer != nullptr) observed[i] = s.observer->AfterToken(*s.session);
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < feed.feeding.size(); ++i) {
    Sequence& s = *feed.feeding[i];
    if (!observed[i].ok()) {
      feed.failed.emplace_back(&s, std::move(observed[i]));
      continue;
    }
    s.logits = std::move(logits[i]);
    s.unfed = Sample(s);
    if (!s.unfed) feed.finished.push_back(&s);
  }
  ++stats_.steps;
  stats_.rows += static_cast<int64_t>(feed.feeding.size());
  stats_.step_seconds += seconds;
  if (with_prefill) ++stats_.steps_with_prefill;
}

void Engine::Retire(const Feed& feed) {
  for (Sequence* s : feed.finished) {
    Finish(*s, absl::OkStatus());
    Erase(s);
  }
  for (const auto& [s, status] : feed.failed) {
    Finish(*s, status);
    Erase(s);
  }
}

// One step: every running sequence that has a token to feed and room in its consumer's queue feeds
// it; every sequence that got logits samples its next token (a sequence that just joined samples
// from its prompt's logits first).
void Engine::Step() {
  const auto start = Clock::now();
  Feed feed = Gather();
  const std::vector<model::BatchRows> rows = feed.Rows();
  if (!rows.empty()) {
    absl::StatusOr<model::PassOutputs> out = pass_.Run(rows);
    const bool memory = !out.ok() && out.status().code() == absl::StatusCode::kResourceExhausted;
    if (memory && options_.make_room) {  // what make_room frees goes first, then the step again
      int64_t bytes = 0;
      for (const Sequence* s : feed.feeding) bytes += StepPageBytes(s->session->cache());
      options_.make_room(bytes);
      out = pass_.Run(rows);
    }
    if (out.ok()) {
      Fed(feed, *out, SecondsSince(start), /*with_prefill=*/false);
    } else if (out.status().code() == absl::StatusCode::kResourceExhausted &&
               feed.feeding.size() > 1) {
      Preempt(feed.feeding, out.status());  // the others try again next step
    } else {
      if (out.status().code() == absl::StatusCode::kResourceExhausted) {
        absl::MutexLock lock(&mu_);
        ++stats_.failed_for_memory;
      }
      for (Sequence* s : feed.feeding) {
        Finish(*s, out.status());
        Erase(s);
      }
    }
  }
  Retire(feed);
}

absl::StatusOr<model::PassOutputs> Engine::StepWithChunk(std::span<const model::BatchRows> chunk,
                                                         const model::RunRows& run,
                                                         JobSteps& steps) {
  const auto start = Clock::now();
  Admit();
  Feed feed = Gather();
  std::vector<model::BatchRows> rows(chunk.begin(), chunk.end());
  const std::vector<model::BatchRows> decode_rows = feed.Rows();
  rows.insert(rows.end(), decode_rows.begin(), decode_rows.end());
  if (decode_rows.empty()) {
    Retire(feed);
    return run(chunk);
  }
  absl::StatusOr<model::PassOutputs> out = run(rows);
  if (!out.ok()) {
    // Nothing changed: the chunk runs alone (and fails for its own reasons, if it does), and the
    // decodes take a step of their own, with its room making and preemption.
    Retire(feed);
    absl::StatusOr<model::PassOutputs> own = run(chunk);
    const auto step_start = Clock::now();
    if (!running_.empty()) {
      Step();
      ++steps.count;
    }
    steps.seconds += SecondsSince(step_start);
    return own;
  }
  int64_t chunk_rows = 0;
  for (const model::BatchRows& r : chunk) {
    chunk_rows += r.tokens.empty() ? static_cast<int64_t>(r.embeddings.size()) /
                                         r.sequence->model().config().hidden
                                   : static_cast<int64_t>(r.tokens.size());
  }
  // The decode rows' share of the pass's time is the step's.
  const double share = SecondsSince(start) * static_cast<double>(decode_rows.size()) /
                       static_cast<double>(chunk_rows + decode_rows.size());
  steps.seconds += share;
  ++steps.count;
  Fed(feed, std::span(*out).subspan(chunk.size()), share, /*with_prefill=*/true);
  Retire(feed);
  out->resize(chunk.size());
  return out;
}

absl::Status Engine::Park(Sequence& s) {
  if (!s.parking.park) return absl::FailedPreconditionError("the sequence cannot be parked");
  const int64_t bytes = s.session->cache().TotalBytes();
  const size_t fed = static_cast<size_t>(s.session->next_position() - s.start_position);
  RETURN_IF_ERROR(s.parking.park(std::span(s.state.result().tokens).first(fed)));
  s.parked_bytes = bytes;
  absl::MutexLock lock(&mu_);
  auto in_running =
      std::find_if(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == &s; });
  parked_.insert(std::upper_bound(parked_.begin(), parked_.end(), s.order,
                                  [](uint64_t order, const auto& p) { return order < p->order; }),
                 std::move(*in_running));
  running_.erase(in_running);
  s.parked = true;
  --stats_.running;
  ++stats_.parked;
  ++stats_.preemptions;
  return absl::OkStatus();
}

void Engine::Preempt(const std::vector<Sequence*>& feeding, const absl::Status& full) {
  Sequence* youngest = *std::max_element(
      feeding.begin(), feeding.end(), [](Sequence* x, Sequence* y) { return x->order < y->order; });
  const absl::Status parked_it = Park(*youngest);
  if (parked_it.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.failed_for_memory;
  }
  Finish(*youngest, absl::ResourceExhaustedError(
                        absl::StrCat(full.message(), "; not parked: ", parked_it.message())));
  Erase(youngest);
}

bool Engine::Admitted(Job& job) {
  const model::KvPool* pool = options_.kv_pool;
  if (job.pool_bytes <= 0 || pool == nullptr || pool->budget_bytes() == 0) return true;
  if (job.pool_bytes > pool->budget_bytes()) return true;  // never fits: it fails at once
  auto free = [&] { return pool->budget_bytes() - pool->stats().used_bytes; };
  if (free() < job.pool_bytes && options_.make_room) options_.make_room(job.pool_bytes - free());
  if (free() >= job.pool_bytes) return true;
  if (!running_.empty() || !parked_.empty()) {
    job.idle_since.reset();
  } else if (!job.idle_since) {
    job.idle_since = Clock::now();
  } else if (Clock::now() - *job.idle_since >= kIdleRoomWait) {
    return true;  // nothing gave the pages back: it runs, and fails if they are still missing
  }
  if (!job.waited) {
    job.waited = true;
    absl::MutexLock lock(&mu_);
    ++stats_.work_waited_for_memory;
  }
  return false;
}

void Engine::Unpark() {
  while (!parked_.empty()) {
    Sequence& s = *parked_.front();
    const model::KvCache& cache = s.session->cache();
    const model::KvPool& pool = cache.pool();
    const int64_t need =
        s.parked_bytes + static_cast<int64_t>(running_.size() + 1) * StepPageBytes(cache);
    absl::Status st;
    if (pool.budget_bytes() > 0 && s.parked_bytes + StepPageBytes(cache) > pool.budget_bytes()) {
      st = absl::ResourceExhaustedError(
          absl::StrCat("the sequence needs ", s.parked_bytes + StepPageBytes(cache),
                       " bytes of KV pool to go on; the pool holds ", pool.budget_bytes()));
    } else {
      auto free = [&] { return pool.budget_bytes() - pool.stats().used_bytes; };
      if (pool.budget_bytes() > 0 && free() < need && options_.make_room) {
        options_.make_room(need - free());
      }
      // Older sequences come first: younger running ones make way when that is enough.
      std::vector<Sequence*> younger;
      int64_t freeable = 0;
      for (const auto& r : running_) {
        if (r->order > s.order && r->parking.park) {
          younger.push_back(r.get());
          freeable += r->session->cache().TotalBytes();
        }
      }
      std::sort(younger.begin(), younger.end(),
                [](Sequence* x, Sequence* y) { return x->order > y->order; });
      if (pool.budget_bytes() > 0 && free() < need) {
        if (free() + freeable < need) return;  // not yet: pages held elsewhere must come back
        for (Sequence* y : younger) {
          if (free() >= need) break;
          if (!Park(*y).ok()) return;
        }
      }
      st = s.parking.unpark();
      if (absl::IsResourceExhausted(st)) return;  // not yet
    }
    std::shared_ptr<Sequence> back = parked_.front();
    {
      absl::MutexLock lock(&mu_);
      parked_.erase(parked_.begin());
    }
    if (!st.ok()) {
      if (absl::IsResourceExhausted(st)) {
        absl::MutexLock lock(&mu_);
        ++stats_.failed_for_memory;
      }
      Finish(s, st);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      s.parked = false;
      --stats_.parked;
      ++stats_.running;
      ++stats_.resumes;
      running_.push_back(std::move(back));
    }
  }
}

void AddEngineMetrics(const EngineStats& s, std::string_view prefix, metrics::SampleWriter& w) {
  const std::string p = std::string(prefix) + "_engine_";
  w.Gauge(p + "running", "Sequences decoding now.", {}, static_cast<double>(s.running));
  w.Gauge(p + "joining", "Sequences waiting for their first decode step.", {},
          static_cast<double>(s.joining));
  w.Gauge(p + "parked", "Preempted sequences waiting for the KV pool to take them back.", {},
          static_cast<double>(s.parked));
  w.Gauge(p + "queued_work", "Prefills and other jobs waiting to start.", {},
          static_cast<double>(s.queued_work));
  w.Gauge(p + "working", "Prefills and other jobs started and taking turns chunk by chunk.", {},
          static_cast<double>(s.working));
  w.Counter(p + "steps_total", "Decode steps.", {}, static_cast<double>(s.steps));
  w.Counter(p + "step_rows_total", "Rows over the decode steps (rows / steps: the mean batch).", {},
            static_cast<double>(s.rows));
  w.Counter(p + "steps_with_prefill_total",
            "Decode steps that ran in the same forward pass as a prefill chunk.", {},
            static_cast<double>(s.steps_with_prefill));
  w.Counter(p + "step_seconds_total",
            "Time in decode steps (of a pass shared with a prefill chunk, the decode rows' share).",
            {}, s.step_seconds);
  w.Counter(p + "work_total", "Jobs run between steps (prefills).", {},
            static_cast<double>(s.work_done));
  w.Counter(p + "work_seconds_total",
            "Time in jobs, without the decode steps their chunks carried.", {}, s.work_seconds);
  w.Counter(p + "work_yields_total", "Chunk boundaries where a job let another job go first.", {},
            static_cast<double>(s.work_yields));
  w.Counter(p + "work_waited_for_memory_total",
            "Jobs (prefills) that waited for room in the KV pool before they started.", {},
            static_cast<double>(s.work_waited_for_memory));
  w.Counter(p + "preemptions_total", "Sequences parked to make room in the KV pool.", {},
            static_cast<double>(s.preemptions));
  w.Counter(p + "resumes_total", "Parked sequences back in the KV pool.", {},
            static_cast<double>(s.resumes));
  w.Counter(p + "failed_for_memory_total", "Sequences stopped because the KV pool was full.", {},
            static_cast<double>(s.failed_for_memory));
}

}  // namespace glimpse::worker
