// Shared binding logic (Binder, BindModel, fingerprint) and the GGUF loader. The safetensors
// loader lives in weight_loader_safetensors.cc.
#include <xxhash.h>

#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/model/gguf.h"
#include "core/model/weight_loader_internal.h"
#include "core/model/weights.h"

namespace glimpse::model {
namespace internal {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// ---- fingerprint ----

namespace {

// Length-prefixed fields, so that no two different inputs hash the same byte stream.
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) { XXH3_128bits_reset(state_); }
  ~Hasher() { XXH3_freeState(state_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void Bytes(const void* data, uint64_t n) {
    XXH3_128bits_update(state_, &n, sizeof(n));
    XXH3_128bits_update(state_, data, n);
  }
  void Str(std::string_view s) { Bytes(s.data(), s.size()); }
  template <typename T>
  void Pod(T v) {
    XXH3_128bits_update(state_, &v, sizeof(v));
  }
  std::string HexDigest() {
    XXH128_hash_t h = XXH3_128bits_digest(state_);
    return absl::StrFormat("%016x%016x", h.high64, h.low64);
  }

 private:
  XXH3_state_t* state_;
};

}  // namespace

std::string LoadedWeights::fingerprint() const {
  std::call_once(fingerprint_once_, [this] {
    const ModelConfig& c = weights_.config;
    Hasher h;
    h.Str("glimpse-model-fingerprint-v1");
    // Everything that changes the function the model computes. context_length does not (it only
    // bounds positions), so a model re-exported with another limit keeps its fingerprint.
    h.Str(c.architecture);
    for (int32_t v :
         {c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_hidden, c.vocab_size}) {
      h.Pod(v);
    }
    h.Pod(c.rms_eps);
    h.Pod(c.rope_theta);
    h.Pod(static_cast<int32_t>(c.rope_style));
    for (bool b : {c.tied_embeddings, c.qkv_bias, c.qk_norm}) h.Pod(static_cast<uint8_t>(b));
    for (const TensorRef& t : bound) {
      h.Str(t.name);
      h.Pod(static_cast<uint32_t>(t.type));
      h.Pod(static_cast<uint64_t>(t.shape.size()));
      for (int64_t d : t.shape) h.Pod(d);
      h.Bytes(t.data, t.bytes);
    }
    h.Bytes(rope_freq_factors.data(), rope_freq_factors.size() * sizeof(float));
    fingerprint_ = h.HexDigest();
  });
  return fingerprint_;
}

// ---- Binder ----

absl::StatusOr<const TensorRef*> Binder::Find(const std::string& name,
                                              const std::vector<int64_t>& shape, bool optional) {
  const std::string stored_name = rename_(name);
  const TensorRef* t = stored_name.empty() ? nullptr : lookup_(stored_name);
  if (t == nullptr) {
    if (optional) return nullptr;
    return absl::InvalidArgumentError(absl::StrCat("missing tensor '",
                                                   stored_name.empty() ? name : stored_name,
                                                   "' (expected shape ", ShapeString(shape), ")"));
  }
  bool match = t->shape.size() == shape.size();
  for (size_t i = 0; match && i < shape.size(); ++i) {
    match = shape[i] < 0 || shape[i] == t->shape[i];  // < 0: any size
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "' has shape ",
                                                   ShapeString(t->shape), ", expected ",
                                                   ShapeString(shape), " (outermost first)"));
  }
  out_->bound.push_back(*t);
  if (on_bound_) on_bound_();
  return t;
}

absl::StatusOr<kernels::WeightView> Binder::Matrix(const std::string& name, int64_t rows,
                                                   int64_t cols, bool optional) {
  ASSIGN_OR_RETURN(const TensorRef* t, Find(name, {rows, cols}, optional));
  if (t == nullptr) return kernels::WeightView{};
  kernels::WeightView view{t->data, t->type, t->shape[0], t->shape[1]};
  // The kernels read F32 as float and every other type through 16-bit fields. Files are mapped
  // page-aligned and GGUF offsets are aligned, so this copy only happens for odd safetensors
  // offsets or a GGUF with general.alignment < 4.
  const uintptr_t need = t->type == kernels::DType::kF32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(t->data) % need != 0) {
    auto copy = std::make_unique<uint64_t[]>((t->bytes + 7) / 8);
    std::memcpy(copy.get(), t->data, t->bytes);
    view.data = copy.get();
    out_->owned_bytes.push_back(std::move(copy));
  }
  return view;
}

absl::StatusOr<const float*> Binder::Vector(const std::string& name, int64_t n, bool optional) {
  ASSIGN_OR_RETURN(const TensorRef* t, Find(name, {n}, optional));
  if (t == nullptr) return nullptr;
  if (t->type == kernels::DType::kF32 && reinterpret_cast<uintptr_t>(t->data) % 4 == 0) {
    return static_cast<const float*>(t->data);
  }
  // F16/BF16/quantised storage (or a misaligned F32): decode into an owned fp32 copy. The input
  // is copied first so that the decoder's 16-bit reads are aligned too.
  auto aligned_in = std::make_unique<uint64_t[]>((t->bytes + 7) / 8);
  std::memcpy(aligned_in.get(), t->data, t->bytes);
  auto copy = std::make_unique<float[]>(n);
  kernels::DequantizeRow(copy.get(), aligned_in.get(), t->type, n);
  const float* p = copy.get();
  out_->owned_floats.push_back(std::move(copy));
  return p;
}

// ---- model binding ----

absl::Status ValidateConfig(const ModelConfig& c) {
  const std::pair<const char*, int32_t> positive[] = {{"n_layers", c.n_layers},
                                                      {"hidden", c.hidden},
                                                      {"n_heads", c.n_heads},
                                                      {"n_kv_heads", c.n_kv_heads},
                                                      {"head_dim", c.head_dim},
                                                      {"ffn_hidden", c.ffn_hidden},
                                                      {"context_length", c.context_length}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s = %d must be positive", name, value));
    }
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "n_heads = %d is not a multiple of n_kv_heads = %d", c.n_heads, c.n_kv_heads));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("head_dim = %d must be even for RoPE", c.head_dim));
  }
  if (!(c.rms_eps > 0) || !(c.rope_theta > 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rms_eps = %g and rope_theta = %g must be positive", c.rms_eps, c.rope_theta));
  }
  return absl::OkStatus();
}

namespace {

absl::Status BindLayer(Binder& b, const ModelConfig& c, int layer, LayerWeights& w) {
  const std::string p = absl::StrCat("blk.", layer, ".");
  const int64_t d = c.hidden, q = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv = int64_t{c.n_kv_heads} * c.head_dim, f = c.ffn_hidden;
  ASSIGN_OR_RETURN(w.attn_norm, b.Vector(p + "attn_norm.weight", d));
  ASSIGN_OR_RETURN(w.wq, b.Matrix(p + "attn_q.weight", q, d));
  ASSIGN_OR_RETURN(w.wk, b.Matrix(p + "attn_k.weight", kv, d));
  ASSIGN_OR_RETURN(w.wv, b.Matrix(p + "attn_v.weight", kv, d));
  ASSIGN_OR_RETURN(w.wo, b.Matrix(p + "attn_output.weight", d, q));
  if (c.qkv_bias) {
    ASSIGN_OR_RETURN(w.bq, b.Vector(p + "attn_q.bias", q));
    ASSIGN_OR_RETURN(w.bk, b.Vector(p + "attn_k.bias", kv));
    ASSIGN_OR_RETURN(w.bv, b.Vector(p + "attn_v.bias", kv));
  }
  if (c.qk_norm) {
    ASSIGN_OR_RETURN(w.q_norm, b.Vector(p + "attn_q_norm.weight", c.head_dim));
    ASSIGN_OR_RETURN(w.k_norm, b.Vector(p + "attn_k_norm.weight", c.head_dim));
  }
  ASSIGN_OR_RETURN(w.ffn_norm, b.Vector(p + "ffn_norm.weight", d));
  ASSIGN_OR_RETURN(w.w_gate, b.Matrix(p + "ffn_gate.weight", f, d));
  ASSIGN_OR_RETURN(w.w_up, b.Matrix(p + "ffn_up.weight", f, d));
  ASSIGN_OR_RETURN(w.w_down, b.Matrix(p + "ffn_down.weight", d, f));
  return absl::OkStatus();
}

}  // namespace

absl::Status BindModel(Binder& b, LoadedWeights* out) {
  ModelWeights& w = out->weights_;
  ModelConfig& c = w.config;
  ASSIGN_OR_RETURN(w.token_embd, b.Matrix("token_embd.weight", -1, c.hidden));
  if (w.token_embd.rows <= 0 || w.token_embd.rows > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token_embd has %d rows, not a valid vocabulary size", w.token_embd.rows));
  }
  c.vocab_size = static_cast<int32_t>(w.token_embd.rows);
  ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", c.hidden));
  ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight", c.vocab_size, c.hidden, /*optional=*/true));
  c.tied_embeddings = w.output.data == nullptr;
  if (c.tied_embeddings) w.output = w.token_embd;
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) RETURN_IF_ERROR(BindLayer(b, c, i, w.layers[i]));
  return absl::OkStatus();
}

}  // namespace internal

// ---- GGUF ----

namespace {

using internal::LoadedWeights;
using internal::TensorRef;

// Reads `<arch>.<suffix>` as a positive int32 (or `fallback` when absent and fallback >= 0).
absl::StatusOr<int32_t> GetDim(const GgufFile& f, const std::string& arch, std::string_view suffix,
                               int64_t fallback = -1) {
  const std::string key = absl::StrCat(arch, ".", std::string(suffix));
  if (!f.HasKey(key) && fallback >= 0) return static_cast<int32_t>(fallback);
  ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v == 0 || v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("metadata key '%s' = %d is not a positive int32", key, v));
  }
  return static_cast<int32_t>(v);
}

absl::StatusOr<ModelConfig> GgufConfig(const GgufFile& f) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, f.GetString("general.architecture"));
  const std::string& a = c.architecture;
  if (a != "llama" && a != "qwen2" && a != "qwen3") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported architecture '", a, "' (supported: llama, qwen2, qwen3)"));
  }
  ASSIGN_OR_RETURN(c.n_layers, GetDim(f, a, "block_count"));
  ASSIGN_OR_RETURN(c.hidden, GetDim(f, a, "embedding_length"));
  ASSIGN_OR_RETURN(c.ffn_hidden, GetDim(f, a, "feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_heads, GetDim(f, a, "attention.head_count"));
  ASSIGN_OR_RETURN(c.n_kv_heads, GetDim(f, a, "attention.head_count_kv", c.n_heads));
  ASSIGN_OR_RETURN(c.head_dim, GetDim(f, a, "attention.key_length", c.hidden / c.n_heads));
  ASSIGN_OR_RETURN(int32_t value_dim, GetDim(f, a, "attention.value_length", c.head_dim));
  if (value_dim != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "attention.value_length %d differs from key_length %d", value_dim, c.head_dim));
  }
  ASSIGN_OR_RETURN(c.context_length, GetDim(f, a, "context_length"));
  const std::string theta_key = a + ".rope.freq_base";
  if (f.HasKey(theta_key)) {
    ASSIGN_OR_RETURN(double theta, f.GetFloat(theta_key));
    c.rope_theta = static_cast<float>(theta);
  }
  ASSIGN_OR_RETURN(double eps, f.GetFloat(a + ".attention.layer_norm_rms_epsilon"));
  c.rms_eps = static_cast<float>(eps);
  const std::string scaling_key = a + ".rope.scaling.type";
  if (f.HasKey(scaling_key)) {
    ASSIGN_OR_RETURN(std::string scaling, f.GetString(scaling_key));
    if (scaling != "none") {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported RoPE scaling '", scaling, "' (", scaling_key, ")"));
    }
  }
  // llama.cpp's converter permutes Llama's q/k rows into interleaved pairs; Qwen is converted
  // unpermuted and run with NEOX (half-split) rotation.
  c.rope_style = a == "llama" ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kHalf;
  c.qkv_bias = a == "qwen2" || f.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = a == "qwen3";
  RETURN_IF_ERROR(internal::ValidateConfig(c));
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> LoadGgufWeights(
    const std::string& path, void (*on_progress)(int64_t, int64_t, void*), void* progress_arg) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  auto out = std::make_unique<LoadedWeights>();
  auto with_path = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  };
  absl::StatusOr<ModelConfig> config = GgufConfig(*file);
  if (!config.ok()) return with_path(config.status());
  out->weights_.config = *std::move(config);
  // Each layer needs at least 9 tensors; checking first keeps a hostile block_count from
  // allocating a huge layer vector.
  const int64_t n_tensors = static_cast<int64_t>(file->tensors().size());
  if (int64_t{out->weights_.config.n_layers} * 9 > n_tensors) {
    return with_path(absl::InvalidArgumentError(absl::StrFormat(
        "block_count %d needs at least %d tensors but the file has %d",
        out->weights_.config.n_layers, int64_t{out->weights_.config.n_layers} * 9, n_tensors)));
  }
  std::vector<TensorRef> refs;
  refs.reserve(file->tensors().size());
  std::unordered_map<std::string_view, const TensorRef*> by_name;
  for (const GgufTensor& t : file->tensors()) {
    // GGUF lists dims innermost first; TensorRef wants outermost first.
    refs.push_back(TensorRef{t.name, t.type, std::vector<int64_t>(t.dims.rbegin(), t.dims.rend()),
                             t.data, t.bytes});
  }
  for (const TensorRef& r : refs) by_name.emplace(r.name, &r);
  int64_t done = 0;
  internal::Binder binder([](std::string_view name) { return std::string(name); },
                          [&](std::string_view name) -> const TensorRef* {
                            auto it = by_name.find(name);
                            return it == by_name.end() ? nullptr : it->second;
                          },
                          out.get(),
                          [&] {
                            if (on_progress != nullptr)
                              on_progress(++done, n_tensors, progress_arg);
                          });
  absl::Status s = internal::BindModel(binder, out.get());
  if (!s.ok()) return with_path(s);
  const int64_t half = out->weights_.config.head_dim / 2;
  absl::StatusOr<const float*> freqs = binder.Vector("rope_freqs.weight", half, /*optional=*/true);
  if (!freqs.ok()) return with_path(freqs.status());
  out->weights_.rope_freq_factors = *freqs;
  if (on_progress != nullptr) on_progress(n_tensors, n_tensors, progress_arg);
  out->gguf_ = file.get();
  out->backing.push_back(std::shared_ptr<GgufFile>(std::move(file)));
  return out;
}

}  // namespace glimpse::model
