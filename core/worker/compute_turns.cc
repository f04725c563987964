#include "core/worker/compute_turns.h"

#include "absl/synchronization/mutex.h"

namespace glimpse::worker {

ComputeTurns::Turn::Turn(ComputeTurns& turns) : turns_(turns) { turns_.Take(); }

ComputeTurns::Turn::~Turn() { turns_.Release(); }

void ComputeTurns::Turn::Yield() {
  {
    absl::MutexLock lock(&turns_.mu_);
    if (turns_.next_ticket_ == turns_.serving_ + 1) return;  // nobody waits: keep the turn
    ++turns_.yields_;
  }
  turns_.Release();
  turns_.Take();
}

void ComputeTurns::Take() {
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  while (serving_ != ticket) cv_.Wait(&mu_);
  held_ = true;
}

void ComputeTurns::Release() {
  absl::MutexLock lock(&mu_);
  held_ = false;
  ++serving_;
  cv_.SignalAll();
}

ComputeTurns::Stats ComputeTurns::stats() const {
  absl::MutexLock lock(&mu_);
  const int64_t in_line = static_cast<int64_t>(next_ticket_ - serving_);
  return {.computing = held_ ? 1 : 0, .waiting = in_line - (held_ ? 1 : 0), .yields = yields_};
}

}  // namespace glimpse::worker
