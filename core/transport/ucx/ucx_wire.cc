#include "core/transport/ucx/ucx_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/kvpage/crc32c.h"
#include "core/transport/transport.h"

namespace glimpse::transport::ucx_wire {
namespace {

constexpr uint32_t kAddrMagic = 0x32415547;     // "GUA2"
constexpr uint32_t kAddrMagicV1 = 0x31415547;   // "GUA1": no shm_host field
constexpr uint32_t kBatchMagic = 0x32425547;    // "GUB2"
constexpr uint32_t kBatchMagicV1 = 0x31425547;  // "GUB1": no flags field
constexpr size_t kAddrFixed = 28;
constexpr size_t kAddrFixedV1 = 20;
constexpr size_t kHeaderFixed = 36;
constexpr uint32_t kFlagNoCrc = 1;

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.insert(out.end(), b, b + sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string WrapAddress(uint32_t engine_id, uint64_t shm_host, std::span<const uint8_t> ucp) {
  std::vector<uint8_t> out;
  out.reserve(kAddrFixed + ucp.size());
  Put<uint32_t>(out, kAddrMagic);
  Put<uint32_t>(out, static_cast<uint32_t>(ucp.size()));
  Put<uint32_t>(out, 0);  // the CRC, below
  Put<uint64_t>(out, engine_id);
  Put<uint64_t>(out, shm_host);
  out.insert(out.end(), ucp.begin(), ucp.end());
  const uint32_t crc = kvpage::Crc32cExtend(0, out.data() + 12, out.size() - 12);
  std::memcpy(out.data() + 8, &crc, sizeof(crc));
  return std::string(out.begin(), out.end());
}

absl::StatusOr<ParsedAddress> UnwrapAddress(std::string_view address) {
  const auto* p = reinterpret_cast<const uint8_t*>(address.data());
  const uint32_t magic = address.size() >= 4 ? Get<uint32_t>(p) : 0;
  const size_t fixed = magic == kAddrMagicV1 ? kAddrFixedV1 : kAddrFixed;
  if ((magic != kAddrMagic && magic != kAddrMagicV1) || address.size() < fixed) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Glimpse UCX address (", address.size(), " bytes, bad size or magic)"));
  }
  uint32_t len = Get<uint32_t>(p + 4);
  if (len == 0 || len != address.size() - fixed) {
    return absl::InvalidArgumentError(absl::StrCat("UCX address length field ", len, " but ",
                                                   address.size() - fixed, " bytes follow"));
  }
  uint32_t crc = kvpage::Crc32cExtend(0, p + 12, address.size() - 12);
  if (crc != Get<uint32_t>(p + 8)) {
    return absl::InvalidArgumentError("UCX address fails its CRC32C (corrupted in transit?)");
  }
  uint64_t id = Get<uint64_t>(p + 12);
  if (id == 0 || id > kEngineIdMask) {
    return absl::InvalidArgumentError(absl::StrCat("UCX address engine id ", id, " out of range"));
  }
  const uint64_t shm_host = magic == kAddrMagicV1 ? 0 : Get<uint64_t>(p + 20);
  return ParsedAddress{static_cast<uint32_t>(id), shm_host, {p + fixed, len}};
}

std::vector<uint8_t> EncodeHeader(const BatchHeader& h) {
  std::vector<uint8_t> out;
  out.reserve(kHeaderFixed + 8 * h.sizes.size() + h.sender_address.size());
  Put<uint32_t>(out, kBatchMagic);
  Put<uint32_t>(out, h.sender);
  Put<uint32_t>(out, h.seq);
  Put<uint32_t>(out, static_cast<uint32_t>(h.sizes.size()));
  Put<uint32_t>(out, h.has_crc ? h.crc : 0);
  Put<uint32_t>(out, h.has_crc ? 0 : kFlagNoCrc);
  Put<uint32_t>(out, static_cast<uint32_t>(h.sender_address.size()));
  Put<uint64_t>(out, h.total_bytes);
  for (uint64_t s : h.sizes) Put<uint64_t>(out, s);
  out.insert(out.end(), h.sender_address.begin(), h.sender_address.end());
  return out;
}

absl::StatusOr<BatchHeader> DecodeHeader(std::span<const uint8_t> b) {
  if (b.size() >= 4 && Get<uint32_t>(b.data()) == kBatchMagicV1) {
    return absl::FailedPreconditionError(
        "batch header of format GUB1 (an older Glimpse); this engine speaks GUB2: upgrade every "
        "node of the cluster");
  }
  if (b.size() < kHeaderFixed || Get<uint32_t>(b.data()) != kBatchMagic) {
    return absl::DataLossError(
        absl::StrCat("batch header of ", b.size(), " bytes: bad size or magic"));
  }
  BatchHeader h;
  h.sender = Get<uint32_t>(b.data() + 4);
  h.seq = Get<uint32_t>(b.data() + 8);
  uint32_t n = Get<uint32_t>(b.data() + 12);
  h.crc = Get<uint32_t>(b.data() + 16);
  const uint32_t flags = Get<uint32_t>(b.data() + 20);
  uint32_t addr_len = Get<uint32_t>(b.data() + 24);
  h.total_bytes = Get<uint64_t>(b.data() + 28);
  if ((flags & ~kFlagNoCrc) != 0 || ((flags & kFlagNoCrc) != 0 && h.crc != 0)) {
    return absl::DataLossError(absl::StrCat("batch header: flags ", flags, " with CRC ", h.crc));
  }
  h.has_crc = (flags & kFlagNoCrc) == 0;
  if (n == 0 || n > kMaxBuffersPerBatch || addr_len > kMaxAddressBytes ||
      b.size() != kHeaderFixed + 8 * size_t{n} + size_t{addr_len}) {
    return absl::DataLossError(absl::StrCat("batch header: ", n, " buffers and ", addr_len,
                                            "-byte address do not fit ", b.size(), " bytes"));
  }
  uint64_t sum = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t s = Get<uint64_t>(b.data() + kHeaderFixed + 8 * i);
    if (s > kMaxBufferBytes) return absl::DataLossError(absl::StrCat("buffer size ", s));
    h.sizes.push_back(s);
    sum += s;
  }
  if (sum != h.total_bytes) {
    return absl::DataLossError(
        absl::StrCat("batch header: sizes sum to ", sum, " but total says ", h.total_bytes));
  }
  const auto* a = reinterpret_cast<const char*>(b.data() + kHeaderFixed + 8 * size_t{n});
  h.sender_address.assign(a, addr_len);
  return h;
}

}  // namespace glimpse::transport::ucx_wire
