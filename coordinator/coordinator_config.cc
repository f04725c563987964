#include "coordinator/coordinator_config.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "coordinator/membership.h"
#include "proto/limits.h"

namespace glimpse::coordinator {
namespace {

// "acme=512MiB" -> {"acme", 536870912}.
absl::StatusOr<std::pair<std::string, int64_t>> ParseTenantBudget(const std::string& item) {
  size_t eq = item.find('=');
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrFormat("budgets.tenants: \"%s\" is not tenant=bytes (e.g. acme=512MiB)", item));
  };
  if (eq == std::string::npos) return bad();
  std::string tenant = item.substr(0, eq);
  absl::string_view size = absl::string_view(item).substr(eq + 1);
  int shift = 0;
  for (auto [suffix, bits] : {std::pair{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}) {
    if (absl::ConsumeSuffix(&size, suffix)) {
      shift = bits;
      break;
    }
  }
  int64_t n = 0;
  if (!v1::CheckId("tenant", tenant).ok() || !absl::SimpleAtoi(size, &n) || n <= 0 ||
      n > (int64_t{1} << (62 - shift))) {
    return bad();
  }
  return std::pair{tenant, n << shift};
}

}  // namespace

std::vector<ConfigKey> CoordinatorConfigKeys() {
  using T = ConfigType;
  return {
      {"store.path", T::kString, "",
       "RocksDB directory for members, leases and estimator samples (one of store.path and "
       "store.etcd_endpoints is required)."},
      {"store.etcd_endpoints", T::kStringList, "",
       "etcd members' client addresses (host:port,...): keep the state in that etcd cluster "
       "instead of store.path, so it outlives this machine; any number of coordinators may then "
       "run on it, one leading (election.*)."},
      {"store.etcd_prefix", T::kString, "/glimpse/coordinator/",
       "Key prefix of this Glimpse cluster's records in etcd."},
      {"store.etcd_ca", T::kString, "",
       "CA file that signed the etcd members' certificates: talk to etcd over TLS (https client "
       "URLs); empty: plaintext."},
      {"store.etcd_cert", T::kString, "",
       "This coordinator's client certificate for etcd (its --client-cert-auth), with "
       "store.etcd_key."},
      {"store.etcd_key", T::kString, "", "The private key of store.etcd_cert."},
      {"store.etcd_timeout", T::kDuration, "5s",
       "How long one etcd call may take on one member before the next member is tried."},
      {"election.ttl", T::kDuration, "5s",
       "With store.etcd_endpoints: the leader's etcd lease. A leader that cannot renew it for "
       "this long stops leading, and another coordinator takes over within about this long of "
       "a leader's death (at least 2s: etcd's minimum)."},
      {"election.poll", T::kDuration, "500ms",
       "With store.etcd_endpoints: how often a follower checks whether the leader is gone."},
      {"advertise_host", T::kString, "127.0.0.1",
       "With store.etcd_endpoints: the host other coordinators hand out, with this one's gRPC "
       "port, as the leader's address while this one leads."},
      {"store.sync", T::kBool, "false",
       "fsync writes before a call is acknowledged (survives power loss; concurrent calls share "
       "one fsync, outside the service's lock); without it writes survive a process crash."},
      {"store.min_free_bytes", T::kBytes, "64MiB",
       "Below this much free disk under store.path the coordinator refuses changes "
       "(RESOURCE_EXHAUSTED) and refuses to start."},
      {"membership.heartbeat_interval", T::kDuration, "1s", "Nodes heartbeat at least this often."},
      {"membership.etcd_prefix", T::kString, "/glimpse/members/",
       "With store.etcd_endpoints: where nodes announce themselves on etcd (the nodes' "
       "membership.etcd_prefix); a worker whose announcement ends is declared dead at once, before "
       "it misses its heartbeats."},
      {"membership.missed_heartbeats", T::kInt, "3",
       "Missed intervals after which a node is declared dead."},
      {"membership.forget_dead_after", T::kDuration, "10m",
       "A node dead this long is forgotten (it may still register again)."},
      {"budgets.kv_bytes_per_token", T::kInt, "23850",
       "KV bytes per token on a decode worker (SmolLM2-135M: 30 layers x 3 kv-heads x 265 B "
       "fp16)."},
      {"budgets.tenant_default", T::kBytes, "0", "Per-tenant KV budget; 0: unlimited."},
      {"budgets.tenants", T::kStringList, "", "Per-tenant budgets, tenant=bytes (acme=512MiB)."},
      {"admission.default_wait", T::kDuration, "1s",
       "How long a turn waits for memory when the request names no wait."},
      {"admission.max_wait", T::kDuration, "30s", "The longest admission wait a request may ask."},
      {"admission.max_queued", T::kInt, "256",
       "Turns waiting for memory at most; one more is refused at once (RESOURCE_EXHAUSTED)."},
      {"admission.demote_under_pressure", T::kBool, "true",
       "Demote the least valuable leases to admit a turn that does not fit."},
      {"routing.prefill_on_decode_tokens", T::kInt, "128",
       "Turns with at most this many new tokens are prefilled on the decode worker."},
      {"lease.min_samples", T::kInt, "100",
       "Samples a tool needs before its own distribution is used (Continuum: 100)."},
      {"lease.max_samples", T::kInt, "1000", "Most recent samples kept per tool."},
      {"lease.default_ttl", T::kDuration, "2s",
       "Lease while neither tool nor pooled samples suffice; with lease.pin_cost=pressure and "
       "demotion on, the break-even lease (Q x eta + R(n)) / c instead."},
      {"lease.max_ttl", T::kDuration, "10m", "Upper bound of every lease."},
      {"lease.max_hint", T::kDuration, "1h", "Longer tool-duration hints are rejected as absurd."},
      {"lease.hint_slack", T::kDouble, "1.2", "A hint h is taken as a point mass at h x slack."},
      {"lease.default_eta", T::kDouble, "1.0", "Continuum eta until enough sessions ended."},
      {"lease.default_queue_delay", T::kDuration, "0s", "Q before any reload was admitted."},
      {"lease.queue_window", T::kInt, "256", "Q is the mean wait of this many recent reloads."},
      {"lease.reload_fixed", T::kDuration, "0s", "Fixed part of the reload cost R(n)."},
      {"lease.reload_bandwidth", T::kInt, "1180000000",
       "Bytes per second a reload moves (a cold cache-node get, bench/RESULTS.md Cache node)."},
      {"lease.fixed_ttl", T::kString, "",
       "A fixed TTL for every lease instead of the estimator (e.g. 5s; 0s evicts at turn end)."},
      {"lease.pin_cost", T::kString, "pressure",
       "Weight c of tau in the estimator: continuum (c = 1) or pressure (the chance a pinned "
       "second makes a turn wait: 0.5 / (admissions + 1) over the last 256 when leases are "
       "demoted under pressure, which no admission then waits for; else the share of them that "
       "waited for memory or were refused, at least 0.01)."},
      {"admission.turn_timeout", T::kDuration, "10m",
       "A turn routed but not ended after this loses its reservation (its frontend is gone)."},
      {"sessions.idle_ttl", T::kDuration, "24h",
       "A warm session idle this long is forgotten (as if EndSession came)."},
      {"tick_interval", T::kDuration, "100ms", "How often leases and heartbeats are checked."},
  };
}

absl::StatusOr<CoordinatorOptions> OptionsFromConfig(const Config& c) {
  // The store is main's to open; a config that names none, or both, is refused here.
  if (c.GetString("store.path").empty() == c.GetStringList("store.etcd_endpoints").empty()) {
    return absl::InvalidArgumentError(
        "set exactly one of store.path (RocksDB) and store.etcd_endpoints (etcd)");
  }
  CoordinatorOptions o;
  auto positive = [](const char* key, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d must be > 0", key, v));
  };
  o.membership.heartbeat_interval = c.GetDuration("membership.heartbeat_interval");
  o.membership.missed_heartbeats = static_cast<int>(c.GetInt("membership.missed_heartbeats"));
  o.membership.forget_dead_after = c.GetDuration("membership.forget_dead_after");
  o.kv_bytes_per_token = c.GetInt("budgets.kv_bytes_per_token");
  o.tenant_budget_bytes = c.GetBytes("budgets.tenant_default");
  for (const std::string& item : c.GetStringList("budgets.tenants")) {
    if (item.empty()) continue;
    absl::StatusOr<std::pair<std::string, int64_t>> t = ParseTenantBudget(item);
    if (!t.ok()) return t.status();
    o.tenant_budgets[t->first] = t->second;
  }
  o.admission_default_wait = c.GetDuration("admission.default_wait");
  o.admission_max_wait = c.GetDuration("admission.max_wait");
  o.max_queued_turns = c.GetInt("admission.max_queued");
  o.turn_timeout = c.GetDuration("admission.turn_timeout");
  o.session_idle_ttl = c.GetDuration("sessions.idle_ttl");
  o.demote_under_pressure = c.GetBool("admission.demote_under_pressure");
  o.prefill_on_decode_tokens = c.GetInt("routing.prefill_on_decode_tokens");
  o.lease.min_samples = static_cast<int>(c.GetInt("lease.min_samples"));
  o.lease.max_samples = static_cast<int>(c.GetInt("lease.max_samples"));
  o.lease.default_ttl = c.GetDuration("lease.default_ttl");
  o.lease.max_ttl = c.GetDuration("lease.max_ttl");
  o.max_hint = c.GetDuration("lease.max_hint");
  o.lease.hint_slack = c.GetDouble("lease.hint_slack");
  o.lease.default_eta = c.GetDouble("lease.default_eta");
  o.lease.default_queue_delay = c.GetDuration("lease.default_queue_delay");
  o.lease.queue_window = static_cast<int>(c.GetInt("lease.queue_window"));
  int64_t bandwidth = c.GetInt("lease.reload_bandwidth");
  for (absl::Status s : {positive("membership.missed_heartbeats", o.membership.missed_heartbeats),
                         positive("budgets.kv_bytes_per_token", o.kv_bytes_per_token),
                         positive("admission.max_queued", o.max_queued_turns),
                         positive("lease.min_samples", o.lease.min_samples),
                         positive("lease.max_samples", o.lease.max_samples),
                         positive("lease.queue_window", o.lease.queue_window),
                         positive("lease.reload_bandwidth", bandwidth)}) {
    if (!s.ok()) return s;
  }
  if (o.membership.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("membership.heartbeat_interval must be > 0");
  }
  if (o.prefill_on_decode_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "routing.prefill_on_decode_tokens: %d is negative", o.prefill_on_decode_tokens));
  }
  if (o.lease.hint_slack < 1.0 || o.lease.default_eta < 0 || o.lease.default_eta > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("lease.hint_slack %g must be >= 1 and lease.default_eta %g in [0, 1]",
                        o.lease.hint_slack, o.lease.default_eta));
  }
  if (const std::string& fixed = c.GetString("lease.fixed_ttl"); !fixed.empty()) {
    absl::Duration d;
    if (!absl::ParseDuration(fixed, &d) || d < absl::ZeroDuration() || d > o.lease.max_ttl) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "lease.fixed_ttl: \"%s\" is not a duration in [0, lease.max_ttl]", fixed));
    }
    o.lease.fixed_ttl = d;
  }
  if (const std::string& pin = c.GetString("lease.pin_cost"); pin == "pressure") {
    o.lease.pin_cost = PinCost::kPressure;
  } else if (pin == "continuum") {
    o.lease.pin_cost = PinCost::kContinuum;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("lease.pin_cost: \"%s\" is not continuum or pressure", pin));
  }
  o.lease.reload.fixed = c.GetDuration("lease.reload_fixed");
  o.lease.reload.per_token =
      absl::Seconds(static_cast<double>(o.kv_bytes_per_token) / static_cast<double>(bandwidth));
  return o;
}

}  // namespace glimpse::coordinator
