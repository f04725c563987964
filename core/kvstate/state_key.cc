#include "core/kvstate/state_key.h"

#include <openssl/evp.h>

#include <bit>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace glimpse::kvstate {
namespace {

constexpr char kNsTag[] = "glimpse-ns-v1";
constexpr char kStateTag[] = "glimpse-state-v1";

// OpenSSL failures here mean an out-of-memory or broken libcrypto: not recoverable input errors.
void Check(int ok) {
  if (ok != 1) std::abort();
}

void UpdateU32(EVP_MD_CTX* c, uint32_t v) {
  uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
  Check(EVP_DigestUpdate(c, b, 4));
}

std::array<uint8_t, 16> Final16(EVP_MD_CTX* c) {
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  Check(EVP_DigestFinal_ex(c, digest, &n));
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), digest, out.size());
  return out;
}

struct CtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using CtxPtr = std::unique_ptr<EVP_MD_CTX, CtxDeleter>;

CtxPtr NewCtx() {
  CtxPtr c(EVP_MD_CTX_new());
  if (!c) std::abort();
  Check(EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr));
  return c;
}

void UpdateTokens(EVP_MD_CTX* c, std::span<const int32_t> tokens) {
  // int32 little-endian; x86 and ARM Linux are little-endian, checked at compile time.
  static_assert(std::endian::native == std::endian::little);
  Check(EVP_DigestUpdate(c, tokens.data(), tokens.size() * sizeof(int32_t)));
}

}  // namespace

struct PrefixHasher::Ctx {
  CtxPtr ctx;
};

NamespaceKey MakeNamespaceKey(std::string_view tenant_salt, const Fingerprint& model,
                              std::string_view eviction_policy) {
  CtxPtr c = NewCtx();
  Check(EVP_DigestUpdate(c.get(), kNsTag, sizeof(kNsTag) - 1));
  UpdateU32(c.get(), static_cast<uint32_t>(tenant_salt.size()));
  Check(EVP_DigestUpdate(c.get(), tenant_salt.data(), tenant_salt.size()));
  Check(EVP_DigestUpdate(c.get(), model.data(), model.size()));
  UpdateU32(c.get(), static_cast<uint32_t>(eviction_policy.size()));
  Check(EVP_DigestUpdate(c.get(), eviction_policy.data(), eviction_policy.size()));
  return Final16(c.get());
}

StateKey MakeStateKey(const NamespaceKey& ns, std::span<const int32_t> tokens) {
  PrefixHasher h(ns);
  h.Append(tokens);
  return h.Key();
}

PrefixHasher::PrefixHasher(const NamespaceKey& ns) : ctx_(new Ctx{NewCtx()}) {
  Check(EVP_DigestUpdate(ctx_->ctx.get(), kStateTag, sizeof(kStateTag) - 1));
  Check(EVP_DigestUpdate(ctx_->ctx.get(), ns.data(), ns.size()));
}

PrefixHasher::~PrefixHasher() = default;

void PrefixHasher::Append(std::span<const int32_t> tokens) {
  UpdateTokens(ctx_->ctx.get(), tokens);
  tokens_ += tokens.size();
}

StateKey PrefixHasher::Key() const {
  CtxPtr copy(EVP_MD_CTX_new());
  if (!copy) std::abort();
  Check(EVP_MD_CTX_copy_ex(copy.get(), ctx_->ctx.get()));
  return Final16(copy.get());
}

absl::StatusOr<Fingerprint> FingerprintFromHex(std::string_view hex) {
  Fingerprint out{};
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  bool ok = hex.size() == 2 * out.size();
  for (size_t i = 0; ok && i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("model fingerprint \"", std::string(hex), "\" is not 32 hex digits"));
  }
  return out;
}

}  // namespace glimpse::kvstate
