#include "coordinator/state_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace glimpse::coordinator {
namespace {

nlohmann::json TimeToJson(absl::Time t) {
  if (t == absl::InfinitePast()) return nullptr;
  return absl::ToUnixNanos(t);
}

absl::Time TimeFromJson(const nlohmann::json& j) {
  if (j.is_null()) return absl::InfinitePast();
  return absl::FromUnixNanos(j.get<int64_t>());
}

}  // namespace

std::string NodeKey(const std::string& id) { return absl::StrCat("n/", id); }
std::string SessionKey(const std::string& id) { return absl::StrCat("s/", id); }

absl::Status AddRecord(const std::string& key, const std::string& value, StoredState& out) {
  if (absl::StartsWith(key, "n/")) {
    absl::StatusOr<NodeSpec> n = DecodeNode(value);
    if (!n.ok()) return absl::DataLossError(absl::StrCat(key, ": ", n.status().message()));
    out.nodes.push_back(*std::move(n));
  } else if (absl::StartsWith(key, "s/")) {
    absl::StatusOr<SessionState> s = DecodeSession(value);
    if (!s.ok()) return absl::DataLossError(absl::StrCat(key, ": ", s.status().message()));
    out.sessions.push_back(*std::move(s));
  } else if (key == kEstimatorKey) {
    out.estimator_json = value;
  }
  return absl::OkStatus();
}

std::string EncodeNode(const NodeSpec& n) {
  nlohmann::json j = {
      {"id", n.id},
      {"role", static_cast<int>(n.role)},
      {"grpc_address", n.grpc_address},
      {"ucx_address", std::vector<uint8_t>(n.ucx_address.begin(), n.ucx_address.end())},
      {"capacity_bytes", n.capacity_bytes},
      {"incarnation", n.incarnation}};
  nlohmann::json clients = nlohmann::json::array();
  for (const std::string& a : n.client_ucx_addresses) {
    clients.push_back(std::vector<uint8_t>(a.begin(), a.end()));
  }
  j["client_ucx_addresses"] = std::move(clients);
  return j.dump();
}

absl::StatusOr<NodeSpec> DecodeNode(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return absl::DataLossError("node record is not JSON");
  try {
    NodeSpec n;
    n.id = j.at("id").get<std::string>();
    n.role = static_cast<NodeRole>(j.at("role").get<int>());
    n.grpc_address = j.at("grpc_address").get<std::string>();
    std::vector<uint8_t> ucx = j.at("ucx_address").get<std::vector<uint8_t>>();
    n.ucx_address.assign(ucx.begin(), ucx.end());
    n.capacity_bytes = j.at("capacity_bytes").get<int64_t>();
    n.incarnation = j.value("incarnation", "");
    // Absent in records written before the allowlist.
    for (const auto& a : j.value("client_ucx_addresses", nlohmann::json::array())) {
      std::vector<uint8_t> bytes = a.get<std::vector<uint8_t>>();
      n.client_ucx_addresses.emplace_back(bytes.begin(), bytes.end());
    }
    return n;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrFormat("node record: %s", e.what()));
  }
}

std::string EncodeSession(const SessionState& s) {
  nlohmann::json j = {{"id", s.id},
                      {"tenant", s.tenant},
                      {"tier", static_cast<int>(s.tier)},
                      {"decode_worker", s.decode_worker},
                      {"kv_tokens", s.kv_tokens},
                      {"summarised_tokens", s.summarised_tokens},
                      {"reserved_bytes", s.reserved_bytes},
                      {"turns", s.turns},
                      {"tool", s.tool},
                      {"turn_started", TimeToJson(s.turn_started)},
                      {"turn_ended", TimeToJson(s.turn_ended)},
                      {"ttl_ns", absl::ToInt64Nanoseconds(s.ttl)},
                      {"lease_expires", TimeToJson(s.lease_expires)},
                      {"tool_reported", s.tool_reported},
                      {"last_route_hot", s.last_route_hot}};
  return j.dump();
}

absl::StatusOr<SessionState> DecodeSession(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return absl::DataLossError("session record is not JSON");
  try {
    SessionState s;
    s.id = j.at("id").get<std::string>();
    s.tenant = j.at("tenant").get<std::string>();
    s.tier = static_cast<SessionTier>(j.at("tier").get<int>());
    s.decode_worker = j.at("decode_worker").get<std::string>();
    s.kv_tokens = j.at("kv_tokens").get<int64_t>();
    // Records written before summarised_tokens existed: kv_tokens was all the coordinator knew.
    s.summarised_tokens = j.value("summarised_tokens", s.kv_tokens);
    s.reserved_bytes = j.at("reserved_bytes").get<int64_t>();
    s.turns = j.at("turns").get<int32_t>();
    s.tool = j.at("tool").get<std::string>();
    s.turn_started = TimeFromJson(j.at("turn_started"));
    s.turn_ended = TimeFromJson(j.at("turn_ended"));
    s.ttl = absl::Nanoseconds(j.at("ttl_ns").get<int64_t>());
    s.lease_expires = TimeFromJson(j.at("lease_expires"));
    s.tool_reported = j.at("tool_reported").get<bool>();
    s.last_route_hot = j.value("last_route_hot", false);
    return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrFormat("session record: %s", e.what()));
  }
}

absl::Status MemoryStateStore::PutNode(const NodeSpec& node) {
  absl::MutexLock lock(&mu_);
  nodes_[node.id] = EncodeNode(node);
  return absl::OkStatus();
}

absl::Status MemoryStateStore::DeleteNode(const std::string& id) {
  absl::MutexLock lock(&mu_);
  nodes_.erase(id);
  return absl::OkStatus();
}

absl::Status MemoryStateStore::PutSession(const SessionState& session) {
  absl::MutexLock lock(&mu_);
  sessions_[session.id] = EncodeSession(session);
  return absl::OkStatus();
}

absl::Status MemoryStateStore::DeleteSession(const std::string& id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
  return absl::OkStatus();
}

absl::Status MemoryStateStore::PutEstimator(const std::string& json) {
  absl::MutexLock lock(&mu_);
  estimator_ = json;
  return absl::OkStatus();
}

absl::StatusOr<StoredState> MemoryStateStore::Load() {
  absl::MutexLock lock(&mu_);
  StoredState out;
  for (const auto& [id, text] : nodes_) {
    absl::StatusOr<NodeSpec> n = DecodeNode(text);
    if (!n.ok()) return n.status();
    out.nodes.push_back(*std::move(n));
  }
  for (const auto& [id, text] : sessions_) {
    absl::StatusOr<SessionState> s = DecodeSession(text);
    if (!s.ok()) return s.status();
    out.sessions.push_back(*std::move(s));
  }
  out.estimator_json = estimator_;
  return out;
}

}  // namespace glimpse::coordinator
