#include "core/etcd/prefix_watch.h"

#include <utility>

#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::etcd {

absl::StatusOr<std::unique_ptr<PrefixWatch>> PrefixWatch::Start(EtcdClient* client,
                                                                std::string prefix,
                                                                OnChange on_change,
                                                                absl::Duration retry) {
  if (prefix.empty() || retry <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd watch: the prefix and the retry must not be empty");
  }
  return std::unique_ptr<PrefixWatch>(
      new PrefixWatch(client, std::move(prefix), std::move(on_change), retry));
}

PrefixWatch::PrefixWatch(EtcdClient* client, std::string prefix, OnChange on_change,
                         absl::Duration retry)
    : client_(client),
      prefix_(std::move(prefix)),
      on_change_(std::move(on_change)),
      retry_(retry),
      thread_([this] { Loop(); }) {}

PrefixWatch::~PrefixWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watching_ != nullptr) watching_->TryCancel();
  }
  stop_cv_.SignalAll();
  thread_.join();
}

int64_t PrefixWatch::reads() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}

bool PrefixWatch::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void PrefixWatch::Loop() {
  while (!Stopping()) {
    const absl::Status ended = ReadAndWatch();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    log::Warning(
        "etcd watch: reading the keys again",
        {{"prefix", prefix_}, {"retry", absl::FormatDuration(retry_)}, {"why", ended.ToString()}});
    const absl::Time until = absl::Now() + retry_;
    while (!stopping_ && absl::Now() < until) stop_cv_.WaitWithDeadline(&mu_, until);
  }
}

absl::Status PrefixWatch::ReadAndWatch() {
  int64_t revision = 0;
  ASSIGN_OR_RETURN(KeyValues read, client_->GetPrefix(prefix_, &revision));
  std::map<std::string, std::string> keys(read.begin(), read.end());
  grpc::ClientContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("stopping");
    ++reads_;
    watching_ = &ctx;
  }
  on_change_(read);
  const absl::Status ended = client_->Watch(
      prefix_, revision + 1, ctx, [&](const std::vector<EtcdClient::Change>& changes) {
        bool changed = false;
        for (const EtcdClient::Change& c : changes) {
          if (c.value.has_value()) {
            auto [it, inserted] = keys.try_emplace(c.key, *c.value);
            if (!inserted && it->second == *c.value) continue;
            it->second = *c.value;
            changed = true;
          } else {
            changed |= keys.erase(c.key) > 0;
          }
        }
        if (changed) on_change_(KeyValues(keys.begin(), keys.end()));
      });
  absl::MutexLock lock(&mu_);
  watching_ = nullptr;
  return ended;
}

}  // namespace glimpse::etcd
