// Turns at one compute resource (a worker's model and thread pool) for jobs that run on their
// own threads: a job takes a turn, holds it while it computes, and lets the others go at its
// prefill chunk boundaries (Yield), so that concurrent prefills interleave chunk by chunk in
// arrival order and a short prompt waits for at most one chunk of a long one, never for its whole
// prompt. Whatever a job does outside its turn (loading, encoding, storing, shipping) overlaps
// with the others' compute. First come, first served: a ticket lock, not std::mutex, whose
// unfairness would let a yielding job take its turn straight back. Thread-safe.
#pragma once

#include <cstdint>

#include "absl/synchronization/mutex.h"

namespace glimpse::worker {

class ComputeTurns {
 public:
  // Holds a turn until destroyed.
  class Turn {
   public:
    explicit Turn(ComputeTurns& turns);
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    // When another job waits: lets every job that waits now go first, then takes the turn back.
    void Yield();

   private:
    ComputeTurns& turns_;
  };

  struct Stats {
    int64_t computing = 0;  // 0 or 1: a job holds the turn
    int64_t waiting = 0;    // jobs waiting for a turn
    int64_t yields = 0;     // turns handed to a waiting job, since start
  };
  Stats stats() const;

 private:
  void Take();
  void Release();

  mutable absl::Mutex mu_;
  absl::CondVar cv_;                               // serving_ advanced
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;  // the ticket the next arrival draws
  uint64_t serving_ ABSL_GUARDED_BY(mu_) = 0;      // the ticket whose turn it is
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t yields_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace glimpse::worker
