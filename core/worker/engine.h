// A worker's model engine: the one scheduler of every use of the model's thread pool, so that
// many turns can be in flight at once (continuous batching). Uses of the model take turns at it
// (a ticket lock, worker::ComputeTurns), one at a time:
//   work   a whole-turn job (a prefill with eviction, a lookahead pass: Run), on its caller's
//          thread, and
//   step   one forward pass holding the next token of every running sequence (Decode), each
//          sequence sampled and stopped on its own, so its tokens are those it would produce alone;
//          the engine's own thread runs steps while no job runs.
// A sequence joins at the next step and leaves when it stops. Every chunk of a job's prefill
// carries a step: the running sequences' rows (and those of sequences that joined meanwhile) go in
// the same forward pass as the chunk (model::ChunkHook), so they go on during a long prompt, one
// token per chunk, and each weight is read once for both. Jobs run in arrival order, except that
// a long one, after its first 4 chunks, lets every job that waits go first after each chunk: a
// short prompt waits for at most 4 chunks of a long one, and prompts of similar length keep the
// lower mean TTFT of arrival order. A job whose chunks carried no step
// is followed by a step of its own. A pass the pool cannot hold runs the chunk alone and then a
// step of its own. Jobs start in arrival order; one that needs room in the KV pool waits for it
// while the others wait behind it (Run: admission).
//
// Decode rows in a pass with more than a few rows (a chunk's) go through the blocked fp32 product
// (model::ForwardPass): their logits agree with a step without a chunk to fp32 rounding, not bit
// for bit.
//
// A sequence's tokens reach its caller through a queue the caller drains on its own thread, so a
// slow consumer never holds the step: a sequence whose consumer is `max_pending` tokens behind
// sits out steps until it catches up. A consumer that stops (its callback returns false) stops the
// sequence at the engine's next look at it; tokens generated meanwhile (at most max_pending) are in
// the result and the session, not passed to the callback.
//
// Memory. A step the KV pool cannot hold first asks make_room to free memory (a decode worker drops
// idle hot copies) and runs again. If it still does not fit, the sequence that joined last among
// those in it is preempted: its Parking moves its KV out of the pool (a decode worker: to the cache
// node) and it waits, parked, while the others run. Parked sequences come back oldest first, when
// the pool has room for their pages and a page per (layer, kv-head) for them and every running
// sequence — after make_room, and after parking running sequences younger than them when that is
// enough — and go on from where they stopped: their tokens are those of an uninterrupted run. A
// sequence without Parking is stopped instead (ResourceExhausted naming the sizes), and so is one
// that could not fit in the whole pool. make_room, Parking and observers run in the model's turn:
// every sequence and job waits for them. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/metrics.h"
#include "core/model/forward_pass.h"
#include "core/model/generator.h"
#include "core/worker/compute_turns.h"

namespace glimpse::worker {

struct EngineOptions {
  int64_t max_pending = 64;  // tokens a consumer may lag before its sequence sits out steps
  // Called on the engine thread when a step's entries do not fit the KV pool, with the bytes the
  // step may need; it frees what it can (a decode worker drops idle hot copies). May be empty.
  std::function<void(int64_t bytes)> make_room;
  // The pool a job's pool_bytes (Run) are counted against; nullptr: jobs never wait for room.
  const model::KvPool* kv_pool = nullptr;
};

// How a sequence leaves the KV pool when the engine preempts it, and comes back; both in the
// model's turn. `park` gets the generated tokens the session's cache holds (those after its turn's
// prompt), moves the KV elsewhere and leaves the session empty, its pages freed. `unpark` puts the
// KV back and the session where it was, or leaves the session empty and fails; ResourceExhausted
// means "not yet" (the engine tries again when more is free).
struct Parking {
  std::function<absl::Status(std::span<const int32_t> generated)> park;
  std::function<absl::Status()> unpark;
};

struct EngineStats {
  int64_t running = 0;             // sequences decoding now
  int64_t joining = 0;             // sequences waiting for their first step
  int64_t queued_work = 0;         // jobs waiting to start (admission)
  int64_t working = 0;             // jobs started and not done
  int64_t steps = 0;               // decode steps since start
  int64_t rows = 0;                // decode rows over those steps (rows / steps = mean batch)
  int64_t steps_with_prefill = 0;  // steps that ran in a prefill chunk's pass
  double step_seconds = 0.0;
  int64_t work_done = 0;
  int64_t work_waited_for_memory = 0;  // jobs that waited for room in the pool
  double work_seconds = 0.0;      // in the model's turn, without the steps their chunks carried
  int64_t work_yields = 0;        // chunk boundaries where a job let another go first
  int64_t parked = 0;             // preempted sequences waiting to come back
  int64_t preemptions = 0;        // sequences parked since start
  int64_t resumes = 0;            // ... and back
  int64_t failed_for_memory = 0;  // sequences a full pool stopped
};

class Engine {
 public:
  Engine(const model::Model& model, kernels::ThreadPool& pool, EngineOptions options = {});
  ~Engine();  // finishes running sequences with Cancelled, then joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs `work` on the calling thread in the model's turn, between steps; returns its status.
  // Blocks. Jobs start in arrival order (a long one then shares, above). `pool_bytes` > 0 is
  // what the work will add to the KV pool (a prefill's pages): it starts when that much is free —
  // after make_room, and after parked sequences came back — and waits meanwhile while the running
  // sequences go on (admission; later jobs wait behind it). When no sequence has been running or
  // parked for a few seconds and the room is still missing (pages held by callers), it starts
  // anyway (and may fail with ResourceExhausted). `work` must not call Run.
  absl::Status Run(const std::function<absl::Status()>& work, int64_t pool_bytes = 0);

  // Decodes `session` from `logits` (its last token's) as model::DecodeFrom does, in the running
  // batch. `on_token` runs on the calling thread, in order; returning false stops the sequence.
  // `parking` (may be empty) lets the engine preempt the sequence. `observer` (may be null, not
  // owned) sees each of the sequence's passes and runs its AfterToken on the engine thread after
  // each in the model's turn (model::DecodeFrom's contract; decode-time eviction).
  // Blocks until the sequence stops.
  absl::StatusOr<model::GenerationResult> Decode(model::Sequence& session, model::Sampler& sampler,
                                                 std::vector<float> logits, int32_t max_tokens,
                                                 const std::function<bool(int32_t)>& on_token,
                                                 Parking parking = {},
                                                 model::DecodeObserver* observer = nullptr);

  EngineStats Stats() const;

 private:
  struct Job;
  struct Sequence;
  using Sequences = std::vector<std::shared_ptr<Sequence>>;
  // The engine's thread: a step whenever sequences can go on and no job runs.
  void Loop();
  // In the model's turn: runs an admitted job, its chunks carrying steps; a step of its own after
  // it when none did.
  absl::Status Work(const std::function<absl::Status()>& work, ComputeTurns::Turn& turn);
  // In the model's turn: moves the sequences that joined since the last look into running_.
  void Admit();
  struct Feed;
  // Under mu_: the running sequences a step feeds (a sequence that just joined samples its first
  // token here) and those that stopped.
  Feed Gather();
  // Takes a step's logits (one per fed sequence) and samples; counts the step.
  void Fed(Feed& feed, std::span<std::vector<float>> logits, double seconds, bool with_prefill);
  // Ends the sequences that stopped or failed.
  void Retire(const Feed& feed);
  void Step();
  // The steps that ran during one job, and their share of its time.
  struct JobSteps {
    double seconds = 0.0;
    int64_t count = 0;
  };
  // A job's prefill chunk with a step in its pass (the ChunkHook); counts it in `steps`.
  absl::StatusOr<model::PassOutputs> StepWithChunk(std::span<const model::BatchRows> chunk,
                                                   const model::RunRows& run, JobSteps& steps);
  // Moves running `s` to parked_ through its Parking; an error (nothing changed) when it has none
  // or parking fails.
  absl::Status Park(Sequence& s);
  // A step that does not fit even after make_room: the youngest of `feeding` is parked (or fails).
  void Preempt(const std::vector<Sequence*>& feeding, const absl::Status& full);
  // Whether `job` may start now (Run's admission); make_room may run.
  bool Admitted(Job& job);
  // Brings back parked sequences, oldest first, while the pool has room for them (after make_room
  // and after parking running sequences younger than them).
  void Unpark();
  // Removes `s` from running_ (in the model's turn).
  void Erase(const Sequence* s);
  void Finish(Sequence& s, absl::Status status);
  // Samples a sequence's next token from its logits and hands a generated one to its consumer;
  // the token to feed next, or nullopt when the sequence stopped. Under mu_.
  std::optional<int32_t> Sample(Sequence& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Under mu_: whether a running sequence has a step to take.
  bool Runnable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EngineOptions options_;
  ComputeTurns turns_;       // the model's turn
  model::ForwardPass pass_;  // used in the model's turn only
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::deque<Job*> jobs_ ABSL_GUARDED_BY(mu_);  // waiting to start, in order
  std::vector<std::shared_ptr<Sequence>> joining_ ABSL_GUARDED_BY(mu_);
  // Written in the model's turn under mu_; read in the turn, or under mu_ (so not
  // ABSL_GUARDED_BY: the turn is no capability clang knows).
  Sequences running_;
  Sequences parked_;  // oldest first
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t callers_ ABSL_GUARDED_BY(mu_) = 0;  // threads inside Run
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t joins_ = 0;  // the model's turn's
  std::thread thread_;
};

// Writes `s` as <prefix>_engine_{running, joining, parked, queued_work, working} gauges and
// <prefix>_engine_{steps, step_rows, steps_with_prefill, step_seconds, work, work_seconds,
// work_yields, work_waited_for_memory, preemptions, resumes, failed_for_memory}_total counters
// (step_rows_total / steps_total is the mean batch).
void AddEngineMetrics(const EngineStats& s, std::string_view prefix, metrics::SampleWriter& w);

}  // namespace glimpse::worker
