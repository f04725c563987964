// Election: one leader among the candidates that campaign on one etcd key, etcd's own recipe. A
// candidate that finds the key absent takes a lease of `ttl` and puts its value (its address)
// under the key, attached to the lease, if the key is still absent; the one whose put went in
// leads until its lease ends: it resigns (revokes it), or it stops renewing it for a TTL (it
// died, hung or lost etcd) and etcd deletes the key. The others read the key every `poll` and
// campaign again once it is gone, so a dead leader is replaced within ttl + poll (plus up to
// 500 ms: etcd looks for expired leases twice a second). Values must be unique per candidate: a
// candidate that finds its own value under a lease it does not hold revokes it, as an earlier
// incarnation's.
//
// The leader renews its lease every ttl/3 from the grant (taking the term up must take less than
// the ttl), and stops considering itself leader (leading() is false) one ttl after sending the
// last renewal etcd answered, on the monotonic clock: etcd counts that ttl from when it received
// the renewal, later, so a deposed leader knows before anyone can have replaced it, as long as
// the clocks of the two machines run at the same rate. Whatever a clock says, a leader's
// writes are fenced: made with EtcdClient::Guard{key, term.revision}, they fail once its key is
// gone (a successor's key has another create revision).
//
// Callbacks run on the election's thread: `on_elected` once a term is won, before leading()
// turns true; an error from it resigns and campaigns again after `poll`. `on_deposed` once a
// term ended for any reason but Stop (a Resign too); the election then campaigns again.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/etcd/etcd_client.h"

namespace glimpse::etcd {

struct ElectionOptions {
  std::string key;    // e.g. "/glimpse/coordinator/leader"; one per group of candidates
  std::string value;  // what the others learn about the leader: its address
  absl::Duration ttl = absl::Seconds(5);
  absl::Duration poll = absl::Milliseconds(500);
};

struct Term {
  int64_t revision = 0;  // the leader key's create revision: the guard of this term's writes
  int64_t lease = 0;
};

class Election {
 public:
  // InvalidArgument for an empty key or value, a ttl under 1 s or a poll not above zero.
  // `client` outlives the election; its call timeout should be well under ttl/3.
  static absl::StatusOr<std::unique_ptr<Election>> Start(
      EtcdClient* client, ElectionOptions options,
      std::function<absl::Status(const Term&)> on_elected,
      std::function<void(const Term&)> on_deposed);
  ~Election();  // Stop()

  // Resigns when leading (revokes the lease: the key goes at once, and a follower takes over
  // within its poll), and stops campaigning.
  void Stop();
  // Ends the term of `revision` if it is held now, as a deposition does (on_deposed runs, the
  // lease is revoked so another candidate can take over at once), and campaigns again; nothing
  // for another term (one already over: its leftovers cannot end a later term).
  void Resign(int64_t revision);
  bool leading() const;
  std::string leader() const;  // the leader's value as last read; empty while there is none
  int64_t terms() const;       // terms won so far

 private:
  Election(EtcdClient* client, ElectionOptions options,
           std::function<absl::Status(const Term&)> on_elected,
           std::function<void(const Term&)> on_deposed);
  void Loop();
  // One attempt: a term when this candidate won, nullopt while another leads or on an error.
  std::optional<Term> Campaign();
  // Renews the term's lease until it ends or Stop; true when Stop ended it.
  bool Lead(const Term& term);
  bool Stopping() const;
  bool TakeResignation();  // true once per Resign
  // Waits until `deadline`, Stop or Resign; false on Stop.
  bool SleepUntil(absl::Time deadline);

  EtcdClient* const client_;
  const ElectionOptions options_;
  const std::function<absl::Status(const Term&)> on_elected_;
  const std::function<void(const Term&)> on_deposed_;
  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;  // signalled when stopping_ or resigning_ is set
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool in_term_ ABSL_GUARDED_BY(mu_) = false;
  bool resigning_ ABSL_GUARDED_BY(mu_) = false;
  int64_t term_revision_ ABSL_GUARDED_BY(mu_) = 0;  // of the term held, while in_term_
  // Of the term's lease, on the monotonic clock (election.cc's Monotonic()).
  absl::Time valid_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string leader_ ABSL_GUARDED_BY(mu_);
  int64_t terms_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is constructed
};

}  // namespace glimpse::etcd
