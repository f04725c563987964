// Structured logging: one JSON object per line on stderr, e.g.
//   {"ts":"2026-11-22T03:50:01.123Z","level":"info","msg":"model loaded","tensors":272}
// Fields are key/value pairs; values are strings or numbers. Thread-safe (one write per line).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace glimpse::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

using Value = std::variant<std::string, double, long long>;
using Field = std::pair<std::string_view, Value>;

// Lines below `level` are dropped. Default: kInfo, or GLIMPSE_LOG_LEVEL=debug|info|warning|error.
void SetMinLevel(Level level);

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});
inline void Info(std::string_view msg, std::initializer_list<Field> fields = {}) {
  Write(Level::kInfo, msg, fields);
}
inline void Warning(std::string_view msg, std::initializer_list<Field> fields = {}) {
  Write(Level::kWarning, msg, fields);
}
inline void Error(std::string_view msg, std::initializer_list<Field> fields = {}) {
  Write(Level::kError, msg, fields);
}

}  // namespace glimpse::log
