#include "core/model/text_stream.h"

#include <utility>

#include "core/common/status_macros.h"
#include "core/model/unicode.h"

namespace glimpse::model {

size_t CompleteUtf8Prefix(const std::string& s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? s.size() - back : s.size();
  }
  return s.size();
}

std::string ValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (uint32_t cp : DecodeUtf8Lenient(bytes)) {
    AppendUtf8(cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : cp, &out);
  }
  return out;
}

absl::StatusOr<std::string> TextStream::Push(int32_t token) {
  absl::StatusOr<std::string> bytes = tokenizer_.TokenText(token);
  pending_ += bytes.ok() ? *bytes : "\xEF\xBF\xBD";  // no text for it: U+FFFD
  const size_t end = CompleteUtf8Prefix(pending_);
  std::string out = ValidUtf8(std::string_view(pending_).substr(0, end));
  pending_.erase(0, end);
  return out;
}

absl::StatusOr<std::string> TextStream::Finish() {
  return ValidUtf8(std::exchange(pending_, std::string()));
}

}  // namespace glimpse::model
