// Test helper shared by the CPU and CUDA attention tests: KV pages of every kernels::KvDType
// filled with random bytes, laid out as kernels/attention.h's KvPageView describes.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/test_util.h"
#include "kernels/quant.h"

namespace glimpse::kernels::testing {

// Random pages: every byte pattern of the narrow formats appears, scales vary by row (KIVI: by
// key group and channel, by value row and channel group).
struct RandomPage {
  KvDType dtype;
  int64_t rows, head_dim;
  std::vector<uint8_t> k, v;
  std::vector<float> k_scale, v_scale;
  std::vector<int32_t> pos;

  RandomPage(KvDType d, int64_t n, int64_t hd, int32_t first_pos, std::mt19937& rng)
      : dtype(d), rows(n), head_dim(hd) {
    if (internal::KiviBits(d) != 0) {
      FillKivi(rng);
    } else {
      FillRows(rng);
    }
    for (int64_t r = 0; r < n; ++r) pos.push_back(first_pos + static_cast<int32_t>(r) * 2);
  }

  void FillRows(std::mt19937& rng) {
    const int64_t n = rows, hd = head_dim;
    const int64_t elt = dtype == KvDType::kF32                              ? 4
                        : dtype == KvDType::kF16 || dtype == KvDType::kBF16 ? 2
                                                                            : 1;
    k.resize(n * hd * elt);
    v.resize(n * hd * elt);
    const std::vector<float> kf = RandomFloats(n * hd, rng(), -2, 2),
                             vf = RandomFloats(n * hd, rng());
    for (int64_t i = 0; i < n * hd; ++i) {
      switch (dtype) {
        case KvDType::kF32:
          std::memcpy(&k[4 * i], &kf[i], 4);
          std::memcpy(&v[4 * i], &vf[i], 4);
          break;
        case KvDType::kF16:
        case KvDType::kBF16: {
          const uint16_t hk = dtype == KvDType::kF16 ? Fp32ToFp16(kf[i]) : Bf16Bits(kf[i]);
          const uint16_t hv = dtype == KvDType::kF16 ? Fp32ToFp16(vf[i]) : Bf16Bits(vf[i]);
          std::memcpy(&k[2 * i], &hk, 2);
          std::memcpy(&v[2 * i], &hv, 2);
          break;
        }
        case KvDType::kI8:
          k[i] = static_cast<uint8_t>(static_cast<int8_t>(rng() % 255 - 127));
          v[i] = static_cast<uint8_t>(static_cast<int8_t>(rng() % 255 - 127));
          break;
        case KvDType::kE4M3: {
          auto code = [&] {
            uint8_t c;
            do c = static_cast<uint8_t>(rng());
            while ((c & 0x7F) == 0x7F);  // no NaN here
            return c;
          };
          k[i] = code();
          v[i] = code();
          break;
        }
        default:
          break;
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      k_scale.push_back(0.001f + 0.01f * static_cast<float>(rng() % 100) / 100);
      v_scale.push_back(0.001f + 0.01f * static_cast<float>(rng() % 100) / 100);
    }
  }

  // Sections as core/kvpage lays them out: fp16 scales, fp16 zeros, random code bytes.
  void FillKivi(std::mt19937& rng) {
    const int bits = internal::KiviBits(dtype);
    const int64_t row_bytes = (head_dim * bits + 7) / 8;
    const int64_t key_params = (rows + 31) / 32 * head_dim;
    const int64_t value_params = rows * ((head_dim + 31) / 32);
    auto section = [&](int64_t params) {
      std::vector<uint8_t> out(4 * params + rows * row_bytes);
      for (int64_t i = 0; i < params; ++i) {
        const uint16_t scale = Fp32ToFp16(0.01f + 0.1f * static_cast<float>(rng() % 100) / 100);
        const uint16_t zero = Fp32ToFp16(static_cast<float>(rng() % 200) / 100 - 1.5f);
        std::memcpy(&out[2 * i], &scale, 2);
        std::memcpy(&out[2 * (params + i)], &zero, 2);
      }
      for (size_t i = 4 * params; i < out.size(); ++i) out[i] = static_cast<uint8_t>(rng());
      return out;
    };
    k = section(key_params);
    v = section(value_params);
  }

  static uint16_t Bf16Bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return static_cast<uint16_t>(u >> 16);
  }
  KvPageView view() const {
    const bool scaled = dtype == KvDType::kI8 || dtype == KvDType::kE4M3;
    return {.dtype = dtype,
            .k = k.data(),
            .v = v.data(),
            .k_scale = scaled ? k_scale.data() : nullptr,
            .v_scale = scaled ? v_scale.data() : nullptr,
            .pos = pos.data(),
            .rows = rows};
  }
};

constexpr KvDType kDTypes[] = {KvDType::kF32,  KvDType::kF16,   KvDType::kBF16, KvDType::kI8,
                               KvDType::kE4M3, KvDType::kKivi4, KvDType::kKivi2};

}  // namespace glimpse::kernels::testing
