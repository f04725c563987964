#include "core/common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "nlohmann/json.hpp"

namespace glimpse::log {
namespace {

Level LevelFromEnv() {
  const char* env = std::getenv("GLIMPSE_LOG_LEVEL");
  if (env == nullptr) return Level::kInfo;
  const std::string s(env);
  if (s == "debug") return Level::kDebug;
  if (s == "warning") return Level::kWarning;
  if (s == "error") return Level::kError;
  return Level::kInfo;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      return "error";
  }
  return "info";
}

std::string UtcTimestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return buf;
}

}  // namespace

void SetMinLevel(Level level) { MinLevel().store(static_cast<int>(level)); }

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  if (static_cast<int>(level) < MinLevel().load()) return;
  nlohmann::ordered_json line;
  line["ts"] = UtcTimestamp();
  line["level"] = LevelName(level);
  line["msg"] = std::string(msg);
  for (const Field& field : fields) {
    nlohmann::ordered_json& slot = line[std::string(field.first)];
    std::visit([&slot](const auto& v) { slot = v; }, field.second);
  }
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);  // one write keeps lines whole
}

}  // namespace glimpse::log
