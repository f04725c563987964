// A worker's model engine: one thread runs every use of the model's thread pool, so that many
// turns can be in flight at once (continuous batching). It alternates between
//   work   one queued whole-turn job (a prefill with eviction, a lookahead pass: Run), and
//   step   one forward pass holding the next token of every running sequence (Decode), each
//          sequence sampled and stopped on its own, so its tokens are those it would produce alone.
// A sequence joins at the next step and leaves when it stops. While a job runs, every chunk of its
// prefill carries a step: the running sequences' rows (and those of sequences that joined
// meanwhile) go in the same forward pass as the chunk (model::ChunkHook), so they go on during a
// long prompt, one token per chunk, and each weight is read once for both; a job whose chunks
// carried steps is followed by the next job rather than by a step of their own (as in a mixed
// batch, every pass moves both). A pass the pool cannot hold runs the chunk alone and then a step
// of its own. A turn's prefill waits for at most one step (or, when the KV pool is short, until
// it has room: Run).
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
// that could not fit in the whole pool. Parking runs on the engine thread: every sequence waits
// for it. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/metrics.h"
#include "core/model/forward_pass.h"
#include "core/model/generator.h"

namespace glimpse::worker {

struct EngineOptions {
  int64_t max_pending = 64;  // tokens a consumer may lag before its sequence sits out steps
  // Called on the engine thread when a step's entries do not fit the KV pool, with the bytes the
  // step may need; it frees what it can (a decode worker drops idle hot copies). May be empty.
  std::function<void(int64_t bytes)> make_room;
  // The pool a job's pool_bytes (Run) are counted against; nullptr: jobs never wait for room.
  const model::KvPool* kv_pool = nullptr;
};

// How a sequence leaves the KV pool when the engine preempts it, and comes back; both on the engine
// thread. `park` gets the generated tokens the session's cache holds (those after its turn's
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
  int64_t queued_work = 0;         // jobs waiting for the engine
  int64_t steps = 0;               // decode steps since start
  int64_t rows = 0;                // decode rows over those steps (rows / steps = mean batch)
  int64_t steps_with_prefill = 0;  // steps that ran in a prefill chunk's pass
  double step_seconds = 0.0;
  int64_t work_done = 0;
  int64_t work_waited_for_memory = 0;  // jobs that waited for room in the pool
  double work_seconds = 0.0;
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

  // Runs `work` on the engine thread between steps; returns its status. Blocks. Jobs run in
  // order. `pool_bytes` > 0 is what the work will add to the KV pool (a prefill's pages): it
  // starts when that much is free — after make_room, and after parked sequences came back — and
  // waits meanwhile while the running sequences go on (admission). When no sequence has been
  // running or parked for a few seconds and the room is still missing (pages held by callers),
  // it starts anyway (and may fail with ResourceExhausted).
  absl::Status Run(const std::function<absl::Status()>& work, int64_t pool_bytes = 0);

  // Decodes `session` from `logits` (its last token's) as model::DecodeFrom does, in the running
  // batch. `on_token` runs on the calling thread, in order; returning false stops the sequence.
  // `parking` (may be empty) lets the engine preempt the sequence. `observer` (may be null, not
  // owned) sees each of the sequence's passes and runs its AfterToken on the engine thread after
  // each (model::DecodeFrom's contract; decode-time eviction), which every sequence waits for.
  // Blocks until the sequence stops.
  absl::StatusOr<model::GenerationResult> Decode(model::Session& session, model::Sampler& sampler,
                                                 std::vector<float> logits, int32_t max_tokens,
                                                 const std::function<bool(int32_t)>& on_token,
                                                 Parking parking = {},
                                                 model::DecodeObserver* observer = nullptr);

  EngineStats Stats() const;

 private:
  struct Job;
  struct Sequence;
  using Sequences = std::vector<std::shared_ptr<Sequence>>;
  void Loop();
  // Moves the sequences that joined since the last look into `running`.
  void Admit(Sequences& running);
  struct Feed;
  // Under mu_: the running sequences a step feeds (a sequence that just joined samples its first
  // token here) and those that stopped.
  Feed Gather(const Sequences& running);
  // Takes a step's logits (one per fed sequence) and samples; counts the step.
  void Fed(Feed& feed, std::span<std::vector<float>> logits, double seconds, bool with_prefill);
  // Ends the sequences that stopped or failed.
  void Retire(const Feed& feed, Sequences& running);
  void Step(Sequences& running, Sequences& parked);
  // The steps that ran during one job, and their share of its time.
  struct JobSteps {
    double seconds = 0.0;
    int64_t count = 0;
  };
  // A job's prefill chunk with a step in its pass (the ChunkHook); counts it in `steps`.
  absl::StatusOr<model::PassOutputs> StepWithChunk(std::span<const model::BatchRows> chunk,
                                                   const model::RunRows& run, Sequences& running,
                                                   Sequences& parked, JobSteps& steps);
  // Moves running `s` to `parked` through its Parking; an error (nothing changed) when it has none
  // or parking fails.
  absl::Status Park(Sequence& s, Sequences& running, Sequences& parked);
  // A step that does not fit even after make_room: the youngest of `feeding` is parked (or fails).
  void Preempt(const std::vector<Sequence*>& feeding, const absl::Status& full, Sequences& running,
               Sequences& parked);
  // Whether `job` may start now (Run's admission); make_room may run.
  bool Admitted(Job& job, const Sequences& running, const Sequences& parked);
  // Brings back parked sequences, oldest first, while the pool has room for them (after make_room
  // and after parking running sequences younger than them).
  void Unpark(Sequences& running, Sequences& parked);
  void Finish(Sequence& s, absl::Status status);
  // Samples a sequence's next token from its logits and hands a generated one to its consumer;
  // the token to feed next, or nullopt when the sequence stopped. Under mu_.
  std::optional<int32_t> Sample(Sequence& s);

  const EngineOptions options_;
  model::ForwardPass pass_;  // used by the engine thread only
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;           // GUARDED_BY(mu_)
  std::vector<std::shared_ptr<Sequence>> joining_;  // GUARDED_BY(mu_)
  EngineStats stats_;                               // GUARDED_BY(mu_)
  bool stop_ = false;                               // GUARDED_BY(mu_)
  uint64_t joins_ = 0;                              // the engine thread's
  std::thread thread_;
};

// Writes `s` as <prefix>_engine_{running, joining, parked, queued_work} gauges and
// <prefix>_engine_{steps, step_rows, steps_with_prefill, step_seconds, work, work_seconds,
// work_waited_for_memory, preemptions, resumes, failed_for_memory}_total counters (step_rows_total
// / steps_total is the mean batch).
void AddEngineMetrics(const EngineStats& s, std::string_view prefix, metrics::SampleWriter& w);

}  // namespace glimpse::worker
