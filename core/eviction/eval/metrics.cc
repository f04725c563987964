#include "core/eviction/eval/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "core/common/status_macros.h"
#include "core/model/text_stream.h"

namespace glimpse::eviction::eval {

absl::StatusOr<std::string> DecodeAnswer(const model::Tokenizer& tok,
                                         const std::vector<int32_t>& tokens) {
  ASSIGN_OR_RETURN(const std::string text, tok.Decode(tokens));
  return model::ValidUtf8(text);
}

bool AnswerMatches(std::string_view answer, std::string_view expected) {
  if (expected.empty()) return false;
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string a = lower(answer), e = lower(expected);
  auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  auto is_alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  // Two characters of the same class (digits, letters) next to each other continue one word.
  auto joins = [&](char x, char y) {
    return (is_digit(x) && is_digit(y)) || (is_alpha(x) && is_alpha(y));
  };
  for (size_t at = a.find(e); at != std::string::npos; at = a.find(e, at + 1)) {
    const size_t end = at + e.size();
    const bool left_ok = at == 0 || !joins(a[at - 1], e.front());
    const bool right_ok = end == a.size() || !joins(a[end], e.back());
    if (left_ok && right_ok) return true;
  }
  return false;
}

double GreedyAgreement(std::span<const int32_t> tokens, std::span<const int32_t> reference,
                       int64_t limit) {
  const int64_t n = std::min<int64_t>(limit, static_cast<int64_t>(reference.size()));
  if (n <= 0) return 1.0;
  int64_t same = 0;
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(tokens.size()); ++i) {
    same += tokens[i] == reference[i];
  }
  return static_cast<double>(same) / static_cast<double>(n);
}

std::vector<double> LogSoftmax(std::span<const float> logits) {
  std::vector<double> out(logits.size());
  if (logits.empty()) return out;
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_z;
  return out;
}

double KlDivergence(std::span<const double> log_p, std::span<const double> log_q) {
  double kl = 0.0;
  for (size_t i = 0; i < log_p.size() && i < log_q.size(); ++i) {
    const double p = std::exp(log_p[i]);
    if (p > 0.0) kl += p * (log_p[i] - log_q[i]);
  }
  return std::max(kl, 0.0);
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace glimpse::eviction::eval
