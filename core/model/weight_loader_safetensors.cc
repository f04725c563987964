// LoadSafetensorsWeights: a Hugging Face checkpoint directory (config.json + model.safetensors or
// the shards named by model.safetensors.index.json), bound through the same Binder as GGUF with
// Hugging Face tensor names mapped onto GGUF ones.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/model/safetensors.h"
#include "core/model/weight_loader_internal.h"
#include "core/model/weights.h"
#include "nlohmann/json.hpp"

namespace glimpse::model {
namespace {

using internal::LoadedWeights;
using internal::TensorRef;
using Json = nlohmann::json;

// Field values in messages; dump() cannot throw with the replace handler.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

absl::StatusOr<Json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  return j;
}

// config.json field `key` as a positive int32; `fallback` (when >= 0) if absent or null.
absl::StatusOr<int32_t> JsonDim(const Json& j, const char* key, int64_t fallback = -1) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback >= 0) return static_cast<int32_t>(fallback);
    return absl::InvalidArgumentError(absl::StrCat("config.json lacks '", key, "'"));
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 ||
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json '", key, "' = ", Dump(*it), " is not a positive int32"));
  }
  return static_cast<int32_t>(it->get<uint64_t>());
}

absl::StatusOr<double> JsonFloat(const Json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json '", key, "' = ", Dump(*it), " is not a number"));
  }
  return it->get<double>();
}

absl::StatusOr<bool> JsonBool(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json '", key, "' = ", Dump(*it), " is not a bool"));
  }
  return it->get<bool>();
}

absl::StatusOr<std::string> Architecture(const Json& j) {
  std::string arch;
  auto type_it = j.find("model_type");
  if (type_it != j.end() && type_it->is_string()) arch = type_it->get<std::string>();
  if (arch == "llama" || arch == "qwen2" || arch == "qwen3") return arch;
  return absl::InvalidArgumentError(absl::StrCat(
      "config.json model_type '", arch, "' is not supported (supported: llama, qwen2, qwen3)"));
}

// Llama-3 RoPE scaling as transformers' _compute_llama3_parameters: with wavelen = 2π / inv_freq,
// low-frequency bands (wavelen > original_max / low_freq_factor) are divided by `factor`,
// high-frequency ones (wavelen < original_max / high_freq_factor) are kept, and in between
//   smooth = (original_max / wavelen − low) / (high − low),
//   inv_freq' = (1 − smooth) · inv_freq / factor + smooth · inv_freq.
// Returned as divisors inv_freq / inv_freq' (llama.cpp's rope_freqs), [head_dim / 2].
absl::StatusOr<std::vector<float>> Llama3RopeFactors(const Json& scaling, double theta,
                                                     int head_dim) {
  ASSIGN_OR_RETURN(double factor, JsonFloat(scaling, "factor", 0));
  ASSIGN_OR_RETURN(double low, JsonFloat(scaling, "low_freq_factor", 0));
  ASSIGN_OR_RETURN(double high, JsonFloat(scaling, "high_freq_factor", 0));
  ASSIGN_OR_RETURN(double original, JsonFloat(scaling, "original_max_position_embeddings", 0));
  if (!(factor > 0) || !(low > 0) || !(high > low) || !(original > 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rope_scaling llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0; got %g, %g, %g, %g",
        factor, low, high, original));
  }
  const double low_freq_wavelen = original / low;
  const double high_freq_wavelen = original / high;
  std::vector<float> divisors(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / head_dim);
    const double wavelen = 2 * M_PI / inv_freq;
    double divisor = 1.0;
    if (wavelen > low_freq_wavelen) {
      divisor = factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original / wavelen - low) / (high - low);
      divisor = 1.0 / ((1 - smooth) / factor + smooth);
    }
    divisors[i] = static_cast<float>(divisor);
  }
  return divisors;
}

// The RoPE block of config.json: "rope_scaling" as transformers 4.x writes it, else
// "rope_parameters" as transformers >= 5 writes it (the same fields plus rope_theta, with
// rope_type "default" when unscaled). nullptr when neither is present.
const Json* RopeBlock(const Json& j) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

// rope_theta: top level (transformers 4.x), else inside rope_parameters (transformers >= 5).
absl::StatusOr<double> RopeTheta(const Json& j) {
  if (auto top = j.find("rope_theta"); top != j.end() && !top->is_null()) {
    return JsonFloat(j, "rope_theta", 10000.0);
  }
  auto it = j.find("rope_parameters");
  if (it != j.end() && it->is_object()) return JsonFloat(*it, "rope_theta", 10000.0);
  return 10000.0;
}

absl::Status ApplyRopeScaling(const Json& j, const ModelConfig& c, std::vector<float>* factors) {
  const Json* it = RopeBlock(j);
  if (it == nullptr) return absl::OkStatus();
  if (!it->is_object())
    return absl::InvalidArgumentError("config.json rope_scaling is not an object");
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    auto t = it->find(key);
    if (t != it->end() && t->is_string()) type = t->get<std::string>();
    if (!type.empty()) break;
  }
  if (type == "default") return absl::OkStatus();
  if (type != "llama3") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported rope_scaling type '", type, "' (supported: llama3, default)"));
  }
  ASSIGN_OR_RETURN(*factors, Llama3RopeFactors(*it, c.rope_theta, c.head_dim));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> HfConfig(const Json& j, std::vector<float>* rope_factors) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, Architecture(j));
  ASSIGN_OR_RETURN(c.n_layers, JsonDim(j, "num_hidden_layers"));
  ASSIGN_OR_RETURN(c.hidden, JsonDim(j, "hidden_size"));
  ASSIGN_OR_RETURN(c.ffn_hidden, JsonDim(j, "intermediate_size"));
  ASSIGN_OR_RETURN(c.n_heads, JsonDim(j, "num_attention_heads"));
  ASSIGN_OR_RETURN(c.n_kv_heads, JsonDim(j, "num_key_value_heads", c.n_heads));
  ASSIGN_OR_RETURN(c.head_dim, JsonDim(j, "head_dim", c.hidden / c.n_heads));
  ASSIGN_OR_RETURN(c.context_length, JsonDim(j, "max_position_embeddings"));
  ASSIGN_OR_RETURN(double eps, JsonFloat(j, "rms_norm_eps", 1e-6));  // transformers' default
  ASSIGN_OR_RETURN(double theta, RopeTheta(j));
  c.rms_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  c.rope_style = kernels::RopeStyle::kHalf;  // Hugging Face q/k rows are not permuted
  ASSIGN_OR_RETURN(bool attention_bias, JsonBool(j, "attention_bias", false));
  c.qkv_bias = c.architecture == "qwen2" || attention_bias;
  c.qk_norm = c.architecture == "qwen3";
  RETURN_IF_ERROR(internal::ValidateConfig(c));
  RETURN_IF_ERROR(ApplyRopeScaling(j, c, rope_factors));
  return c;
}

// The Hugging Face name of a GGUF tensor name ("" when it has none).
std::string HfName(std::string_view gguf) {
  static const std::unordered_map<std::string_view, std::string_view> kGlobal = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::unordered_map<std::string_view, std::string_view> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (auto it = kGlobal.find(gguf); it != kGlobal.end()) return std::string(it->second);
  if (!gguf.starts_with("blk.")) return "";
  const size_t dot = gguf.find('.', 4);
  if (dot == std::string_view::npos) return "";
  auto it = kLayer.find(gguf.substr(dot + 1));
  if (it == kLayer.end()) return "";
  return absl::StrCat("model.layers.", std::string(gguf.substr(4, dot - 4)), ".",
                      std::string(it->second));
}

// The safetensors files of the checkpoint: the shards named in model.safetensors.index.json's
// weight_map when that index exists, else model.safetensors.
absl::StatusOr<std::vector<std::string>> ShardFiles(const std::string& dir) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!std::filesystem::exists(index_path)) return std::vector<std::string>{"model.safetensors"};
  ASSIGN_OR_RETURN(Json index, ReadJson(index_path));
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, " has no weight_map object"));
  }
  std::set<std::string> files;
  for (const auto& [tensor, file] : map->items()) {
    // Shard names are plain file names; anything else could reach outside the directory.
    if (!file.is_string() || file.get<std::string>().empty() ||
        file.get<std::string>().find('/') != std::string::npos || file.get<std::string>() == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry for '", tensor, "' is not a file name"));
    }
    files.insert(file.get<std::string>());
  }
  return std::vector<std::string>(files.begin(), files.end());
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> LoadSafetensorsWeights(const std::string& dir) {
  auto out = std::make_unique<LoadedWeights>();
  ASSIGN_OR_RETURN(Json config_json, ReadJson(dir + "/config.json"));
  ASSIGN_OR_RETURN(out->weights_.config, HfConfig(config_json, &out->rope_freq_factors));
  ASSIGN_OR_RETURN(std::vector<std::string> shards, ShardFiles(dir));
  std::unordered_map<std::string, TensorRef> by_name;
  for (const std::string& shard : shards) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open(dir + "/" + shard));
    for (const SafetensorsTensor& t : file->tensors()) {
      TensorRef ref{t.name, t.type, t.shape, t.data, t.bytes};
      if (!by_name.emplace(t.name, std::move(ref)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' appears in more than one shard (", shard, ")"));
      }
    }
    out->backing.push_back(std::shared_ptr<SafetensorsFile>(std::move(file)));
  }
  internal::Binder binder(
      HfName,
      [&](std::string_view name) -> const TensorRef* {
        auto it = by_name.find(std::string(name));
        return it == by_name.end() ? nullptr : &it->second;
      },
      out.get(), nullptr);
  absl::Status s = internal::BindModel(binder, out.get());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
  ASSIGN_OR_RETURN(bool tie, JsonBool(config_json, "tie_word_embeddings", true));
  if (!tie && out->weights_.config.tied_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": missing tensor 'lm_head.weight' (config.json sets tie_word_embeddings: false)"));
  }
  if (!out->rope_freq_factors.empty()) {
    out->weights_.rope_freq_factors = out->rope_freq_factors.data();
  }
  return out;
}

}  // namespace glimpse::model
