// Scorer tests: each scorer against score vectors of tiny layers (T = 10, hd = 4, D = 8), plus
// window attention against dense attention, determinism, missing inputs and the registry.
//
// The k* vectors below were produced by a throwaway Python script in the oracle venv (torch 2.15,
// transformers 5.23, kvpress 0.5.5 from PyPI): a transformers LlamaAttention layer
// with seeded random weights (rope_theta 10000, so inv_freq = {1, 0.01}) gives the pre-/post-RoPE
// queries, keys and values; kvpress's own SnapKVPress / ExpectedAttentionPress / StreamingLLMPress
// .score computed the expected scores on CPU in fp32; SnapKV max pooling is that score with
// F.avg_pool1d swapped for F.max_pool1d; DefensiveKV is a line-by-line transcription of
// FFY0/DefensiveKV EfficientDefensiveKVPress.score (+ vwl1norm) with per-head top-k kept sets.
// Layer A: H = 2, Hkv = 1 (seed 1). Layer B: H = 4, Hkv = 2 (seed 2).
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/eviction/scorer.h"
#include "core/eviction/window_attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glimpse::eviction {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kT = 10;
constexpr int32_t kHd = 4;
constexpr int32_t kD = 8;
const float kInvFreq[2] = {1.0f, 0.01f};

const std::vector<float> kA_PreRopeQ = {
    0.49808228f,    -1.25180912f,  -0.873910785f, 3.70509243f,   0.948792696f,  3.16431475f,
    1.17690301f,    -0.914868772f, 2.94473386f,   1.45229459f,   -1.95111847f,  -0.834969759f,
    -2.18121004f,   0.593703628f,  1.41946983f,   -0.923310399f, -1.68690038f,  -0.317045689f,
    -0.752104998f,  -2.6128583f,   0.7953161f,    -1.25951231f,  -1.54463172f,  0.842113018f,
    2.29531503f,    0.924260318f,  -1.15100992f,  0.455864877f,  -1.43194544f,  -0.102256909f,
    1.77091777f,    -1.32651067f,  4.66874886f,   0.764781535f,  -3.65869212f,  -0.373725712f,
    -3.506042f,     3.04841256f,   0.21601963f,   2.10238099f,   -2.9283638f,   -0.964835882f,
    1.7523967f,     1.05474734f,   0.975483477f,  -1.60912871f,  -1.04220903f,  1.16118276f,
    0.980133772f,   1.32404912f,   1.42890918f,   2.27926397f,   -0.858754635f, -0.52040571f,
    2.91166806f,    -0.369073957f, -1.63660884f,  0.720624208f,  -0.961786032f, -0.284249187f,
    -0.0719333291f, 0.359123707f,  0.259751141f,  0.11823535f,   -3.69464827f,  1.14456129f,
    2.5266881f,     0.395111322f,  0.266804606f,  -3.06193948f,  0.121793136f,  -1.17068195f,
    0.769365728f,   3.19675875f,   -1.03957796f,  -5.90545273f,  -3.46557808f,  -5.37496424f,
    0.0695880055f,  1.10458374f};
const std::vector<float> kA_Q = {
    0.49808228f,   -1.25180912f,  -0.873910785f, 3.70509243f,   3.23285627f,    1.46057153f,
    1.42371428f,   -0.820405245f, 1.38588548f,   -0.264728606f, -1.22090805f,   -2.61867619f,
    -2.10991406f,  0.910170555f,  1.46340609f,   0.483383387f,  -5.82060528f,   0.779114842f,
    -1.14184022f,  -0.342843652f, 0.849749625f,  -1.0163455f,   3.30516791f,    1.00520754f,
    1.34035468f,   1.18499267f,   1.09813166f,   2.35455775f,   -0.601962566f,  0.738740623f,
    -1.80032277f,  -0.233150557f, -1.9622283f,   1.10932541f,   -4.022964f,     0.485314876f,
    -0.2725631f,   3.71459389f,   1.26426077f,   -5.59423161f,  0.948792696f,   3.16431475f,
    1.17690301f,   -0.914868772f, -2.37295556f,  0.602906883f,  -1.06848204f,   -0.917327285f,
    1.07356131f,   -1.27610159f,  1.36597252f,   0.81675607f,   1.16770339f,    -0.0624215528f,
    -1.95527148f,  -1.32898104f,  2.45518613f,   2.96190143f,   2.51218152f,    2.22260332f,
    -0.722691774f, -1.66515267f,  -1.23105013f,  1.07930875f,   -0.0109855533f, -0.497338116f,
    3.03564644f,   -0.399615437f, -0.224883705f, 0.349974483f,  0.148567736f,   0.143063933f,
    -0.159317121f, -2.9585917f,   0.246244431f,  -1.41163158f,  3.12891459f,    -5.4524889f,
    -1.49163258f,  0.617019176f};
const std::vector<float> kA_K = {
    -0.236863494f, -3.65338945f,  2.35962152f,   -0.101104468f, 3.17788696f,    4.48811913f,
    0.438953161f,  -2.09763598f,  0.449770451f,  -0.558335602f, -1.29250634f,   2.22760677f,
    -0.422528416f, 2.74408436f,   0.571092665f,  -1.48079717f,  -0.0437415838f, -1.12044096f,
    1.13463426f,   -2.77575111f,  2.29889393f,   -4.86189365f,  4.03665257f,    1.7889235f,
    -2.78853059f,  -0.735199571f, 0.563446581f,  -2.11216569f,  -0.204916686f,  -0.381326079f,
    -0.84329772f,  0.773463964f,  -0.152330592f, 2.5119648f,    0.90713799f,    1.05119538f,
    3.33342505f,   6.08208323f,   2.14107466f,   0.13198489f};
const std::vector<float> kA_V = {
    -0.766798913f, -0.437952638f, -2.70328426f,  -0.0534307361f,  0.313297391f, -1.50562215f,
    -0.333960056f, 2.61403799f,   1.39444077f,   -0.329490423f,   0.591546953f, -0.699164033f,
    0.414588213f,  -0.200626254f, -0.696761668f, -0.00414848328f, 2.39218497f,  -1.80134237f,
    -0.631051123f, 4.05862713f,   0.905397415f,  1.55753136f,     1.09364724f,  -3.71713591f,
    0.222347736f,  0.83059746f,   1.02395368f,   -0.915767074f,   0.695644557f, -2.41875577f,
    0.119152308f,  1.24764442f,   -1.04802036f,  -0.399992108f,   1.49699926f,  -2.09541655f,
    3.86967349f,   -0.485783994f, 4.1734066f,    -0.33213681f};
const std::vector<float> kA_SnapKvW4K3 = {0.0881000087f, 0.128299952f, 0.128955469f, 0.0710946769f,
                                          0.156993464f,  0.134095743f, 1.15699351f,  1.15699351f,
                                          1.15699351f,   1.15699351f};
const std::vector<float> kA_SnapKvW3K5 = {0.0837061703f, 0.101224452f,  0.107226178f,  0.146761701f,
                                          0.117907152f,  0.0911579281f, 0.0736396536f, 1.14676166f,
                                          1.14676166f,   1.14676166f};
const std::vector<float> kA_SnapKvW4K3Max = {0.240852907f, 0.240852907f, 0.201287568f, 0.131502748f,
                                             0.378296196f, 0.378296196f, 1.37829614f,  1.37829614f,
                                             1.37829614f,  1.37829614f};
const std::vector<float> kA_ExpectedAttention = {
    2.76794815f,  2.76794815f,  2.76794815f,  2.76794815f,  0.677372575f,
    0.858902752f, 0.194824979f, 0.320184171f, 0.344518185f, 1.76794803f};
const std::vector<float> kB_Q = {
    -1.80296457f,   -0.111075886f, 0.162674531f,  -1.11990905f,   -3.00052643f,   2.51235843f,
    3.18960452f,    -0.281539291f, -0.201288164f, -0.399618f,     2.29053092f,    1.50207639f,
    -1.22210383f,   -0.987708628f, -3.08892226f,  -0.214608863f,  -1.39180636f,   0.67523551f,
    -1.55718625f,   1.17227054f,   3.13373566f,   1.50574517f,    -0.707438529f,  1.43879354f,
    -0.951708853f,  1.51386666f,   0.968277693f,  -0.925383627f,  -2.22125793f,   0.479136139f,
    0.391640961f,   -1.05553341f,  2.14261699f,   0.597078621f,   -0.507704437f,  -1.16373718f,
    -2.50540471f,   -2.87723494f,  -0.49659127f,  1.12596452f,    -1.4275651f,    3.63405418f,
    1.17019773f,    0.0545717068f, -2.22895002f,  -2.770684f,     -2.40707159f,   0.461875379f,
    0.102695048f,   -3.47166657f,  2.38636708f,   -0.276160359f,  0.747094631f,   -0.764635026f,
    -1.40063441f,   -0.337145358f, -0.799542725f, -0.815631986f,  -0.716666818f,  0.132545888f,
    1.47602344f,    -1.82132959f,  2.02474117f,   -1.4864651f,    0.383181691f,   -1.16241932f,
    -0.338584155f,  -0.745972395f, -1.98385954f,  1.54728425f,    0.00379693508f, 0.192914978f,
    0.119214982f,   0.858664751f,  -0.921426237f, 2.67885518f,    -2.03469419f,   -3.73389292f,
    0.132004619f,   -0.596687138f, 0.564103305f,  -1.70004106f,   2.88965559f,    0.847367883f,
    -0.0546618402f, -1.699983f,    0.885220051f,  -0.75686276f,   2.88610077f,    1.61832714f,
    1.00234783f,    -0.736460149f, -1.37173319f,  -2.20872235f,   -0.136079997f,  -0.918017209f,
    -0.623906255f,  -0.118125908f, -2.0114255f,   -0.373270273f,  0.624847591f,   -1.16911137f,
    -1.55801892f,   0.421263546f,  0.302950174f,  -0.618958235f,  -0.331988245f,  0.23844108f,
    -1.31611097f,   0.0479940884f, 2.21012735f,   -0.0468945131f, -1.53114879f,   -2.22210765f,
    -1.25099933f,   -0.291076213f, 1.61171055f,   3.14474607f,    2.29804707f,    -1.82418776f,
    1.85793781f,    -2.91502213f,  -0.175203606f, 0.252702028f,   -1.84301305f,   -2.39534974f,
    -5.37879848f,   1.22365844f,   -0.979537249f, 3.54906201f,    -1.40211654f,   -0.567217529f,
    -0.0909225345f, -2.42578793f,  -2.9964087f,   0.407337844f,   1.88731861f,    1.46534073f,
    -1.36698782f,   -0.808608532f, -1.27884495f,  -0.609076381f,  4.0426302f,     0.615337729f,
    -2.55764389f,   -1.69778192f,  -1.04893887f,  -1.2647301f,    0.889920235f,   -2.43553734f,
    -3.32893229f,   0.922987938f,  -1.52764297f,  -0.456000805f,  0.942263246f,   -0.639131486f,
    1.46306276f,    3.17970419f,   -0.953064919f, 1.58994126f};
const std::vector<float> kB_K = {
    1.15464652f,   1.65805054f,   1.85460544f,    -0.544454694f, -3.94853425f,   1.43605614f,
    -1.69539261f,  1.59035718f,   1.33436894f,    -1.90651655f,  0.584688365f,   0.527902663f,
    -2.54747343f,  1.08137619f,   -2.15876412f,   4.11259222f,   2.51253271f,    1.91732538f,
    -3.53401923f,  0.51824373f,   1.43044245f,    1.13087559f,   1.34194922f,    0.167082936f,
    -1.26047516f,  -3.02166986f,  -0.0600544512f, -2.51376009f,  -0.56274718f,   3.52694559f,
    0.104131415f,  0.484680653f,  -1.37989569f,   -0.827826858f, -0.484785587f,  -2.91721416f,
    -0.415450811f, 2.08127475f,   4.25208092f,    4.69439411f,   -0.897718847f,  -3.84041357f,
    -2.23257565f,  -0.945776641f, -0.552767158f,  0.41949147f,   0.603010952f,   1.79084468f,
    -1.70554101f,  3.25095296f,   -0.619954109f,  1.11305761f,   4.75398684f,    -3.10001135f,
    0.962335289f,  -0.966345966f, -0.573126972f,  -0.155565172f, 0.381208539f,   2.40824485f,
    -0.189829499f, 1.0452677f,    1.09977615f,    1.56595325f,   0.00849919021f, 2.2533617f,
    -0.72286123f,  -0.794889331f, 0.912032366f,   0.163976938f,  -0.169229776f,  -1.15706456f,
    1.72058785f,   -4.23245239f,  -0.0460533202f, 0.797570944f,  1.08839762f,    4.09635782f,
    -2.73170829f,  -1.2081362f};
const std::vector<float> kB_V = {
    0.129905f,     3.458323f,     -1.29029894f,  -2.51889992f, -0.687751889f, 0.240292311f,
    1.56909227f,   -0.513302386f, 0.0695657656f, -3.3167305f,  0.735716641f,  3.24575901f,
    1.1642735f,    1.81574619f,   3.40276551f,   0.247999609f, -0.799686968f, -0.748356521f,
    -4.29229403f,  1.88182402f,   -2.09454727f,  0.471245766f, -2.71717095f,  1.59194112f,
    -0.543360829f, -0.621519625f, 3.13181162f,   -0.26634118f, -1.43126643f,  0.582135379f,
    -1.89802063f,  -1.98329139f,  1.49880755f,   1.77977943f,  0.744070947f,  -0.303428292f,
    -0.508568048f, -4.58910513f,  0.937974811f,  3.57239532f,  0.695010722f,  3.78089046f,
    -0.382143736f, -0.314510733f, 0.555585861f,  1.16252732f,  0.691494346f,  3.6704731f,
    -1.27024114f,  -4.46221542f,  0.995940566f,  -0.12753424f, -1.2378006f,   -1.93908679f,
    0.86238122f,   3.92444801f,   -1.03053474f,  0.595443249f, 1.60930431f,   -1.80198383f,
    -0.126875103f, 0.163943976f,  1.29090309f,   0.712920547f, 0.993611515f,  -0.814727843f,
    1.0470655f,    0.409742773f,  1.45967042f,   3.36966181f,  -2.89123011f,  -0.703156352f,
    -0.337445736f, 1.40841496f,   1.70476079f,   0.431089878f, -1.41439033f,  -6.01391411f,
    -3.57136297f,  0.661037683f};
const std::vector<float> kB_Wo = {
    -0.317177534f,  -1.061167f,     -0.506812632f,  0.222136825f,    0.551717162f,   -0.403401673f,
    0.665439785f,   -0.084862709f,  -0.0495562777f, -0.10440024f,    0.281551272f,   -0.275718719f,
    -0.358171046f,  -0.0205602776f, 0.37697491f,    -0.900737762f,   0.816741109f,   0.862306297f,
    0.273363411f,   -0.274699956f,  0.614073992f,   0.764128864f,    -0.225374833f,  -0.410567284f,
    0.434814632f,   0.456932694f,   0.444453269f,   -0.905260146f,   -1.06702054f,   0.834849894f,
    0.165238515f,   -0.647439361f,  0.451177716f,   0.322659612f,    0.558257282f,   -1.04703987f,
    -0.0028874455f, -0.630289197f,  0.786016762f,   0.197508156f,    -0.909369826f,  -0.908184707f,
    1.00023329f,    0.134807035f,   -0.348305017f,  -0.682824612f,   -0.104881547f,  0.163648069f,
    0.557430863f,   0.0846490338f,  -2.0283854f,    -0.404221207f,   0.909555852f,   -1.04486454f,
    0.124487825f,   0.0799745694f,  -0.343112946f,  -0.00244400604f, 0.819937527f,   0.158561692f,
    -0.418632269f,  -0.286294341f,  0.549488962f,   -0.387124926f,   -0.0913674384f, 0.678391993f,
    0.326986283f,   0.292654783f,   0.420734793f,   0.485132456f,    -0.431495756f,  0.355683327f,
    -0.104294911f,  0.428412199f,   -0.0361229368f, -0.622815967f,   0.329574019f,   -0.0780329853f,
    0.261631697f,   0.768783629f,   -0.86277163f,   0.801839411f,    -0.39850387f,   0.890516102f,
    -0.762311101f,  0.712861955f,   0.197823569f,   -0.160771504f,   0.410258204f,   0.157621682f,
    -0.306181282f,  0.0746668205f,  0.47970891f,    -0.605779588f,   0.330943018f,   0.150513664f,
    -0.703039706f,  0.303166956f,   -0.13845849f,   -0.49100396f,    0.672090411f,   0.0390475914f,
    0.275457203f,   -0.221194476f,  0.622820258f,   0.0408070087f,   -0.0104523897f, 0.159675106f,
    0.473279655f,   0.845445454f,   -0.303304493f,  -0.538523316f,   -0.189805821f,  0.64163053f,
    -0.0416706651f, 0.396743476f,   0.303132951f,   -0.202351063f,   0.267522365f,   0.0428044051f,
    -0.150318295f,  -0.650351226f,  0.0326550901f,  -0.0988974944f,  -0.726516724f,  0.621590257f,
    -0.257914364f,  0.791720033f};
const std::vector<float> kB_DefensiveUnforced = {
    0.202326223f, 0.119559757f,  0.178462356f,  0.160228938f, 0.226267844f,
    0.407575309f, 0.331539303f,  0.204052612f,  0.317536861f, 0.119676359f,
    0.132312134f, 0.0865470991f, 0.0394089818f, 0.0774556249f};
const std::vector<int> kB_DefensiveForced = {0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0};

// Owns the buffers a LayerView points into: queries [H, T, hd] post-RoPE (the view gets the last
// `window` of them), pre-RoPE queries [T, H, hd], keys/values [Hkv, T, hd].
struct Layer {
  int32_t n_heads = 0, n_kv_heads = 0;
  std::vector<float> q, pre_rope_q, k, v, acc, window_q;
  model::LayerWeights weights;
  std::vector<int32_t> positions;

  LayerView View(int64_t window) {
    window_q.clear();
    for (int32_t h = 0; h < n_heads; ++h) {
      const float* qh = q.data() + (h * kT + kT - window) * kHd;
      window_q.insert(window_q.end(), qh, qh + window * kHd);
    }
    positions.resize(kT);
    std::iota(positions.begin(), positions.end(), 0);
    LayerView view;
    view.n_layers = 1;
    view.n_heads = n_heads;
    view.n_kv_heads = n_kv_heads;
    view.head_dim = kHd;
    view.hidden = kD;
    view.n_tokens = kT;
    view.positions = positions.data();
    view.keys = k.data();
    view.values = v.empty() ? nullptr : v.data();
    view.window = window;
    view.window_queries = window_q.data();
    view.pre_rope_queries = pre_rope_q.empty() ? nullptr : pre_rope_q.data();
    view.accumulated_attention = acc.empty() ? nullptr : acc.data();
    view.weights = &weights;
    view.rope_inv_freq = kInvFreq;
    view.rope_style = kernels::RopeStyle::kHalf;
    return view;
  }
};

Layer LayerA() {
  Layer layer;
  layer.n_heads = 2;
  layer.n_kv_heads = 1;
  layer.q = kA_Q;
  layer.pre_rope_q = kA_PreRopeQ;
  layer.k = kA_K;
  layer.v = kA_V;
  return layer;
}

Layer LayerB() {
  Layer layer;
  layer.n_heads = 4;
  layer.n_kv_heads = 2;
  layer.q = kB_Q;
  layer.k = kB_K;
  layer.v = kB_V;
  layer.weights.wo = kernels::WeightView{kB_Wo.data(), kernels::DType::kF32, kD, 4 * kHd};
  return layer;
}

ScorerConfig Config(std::string method, int64_t window = 0, int64_t kernel = 0,
                    std::string pooling = "") {
  ScorerConfig config;
  config.method = std::move(method);
  config.window = window;
  config.kernel = kernel;
  config.pooling = std::move(pooling);
  return config;
}

std::unique_ptr<Scorer> MustCreate(const ScorerConfig& config) {
  auto scorer = CreateScorer(config);
  EXPECT_TRUE(scorer.ok()) << scorer.status();
  return scorer.ok() ? std::move(*scorer) : nullptr;
}

std::vector<float> MustScore(const Scorer& scorer, const LayerView& view) {
  std::vector<float> scores(view.n_kv_heads * view.n_tokens, NAN);
  const absl::Status status = scorer.Score(view, scores.data());
  EXPECT_TRUE(status.ok()) << status;
  return scores;
}

// |got − want| <= atol + rtol·|want| element by element.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double atol,
                double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), atol + rtol * std::fabs(want[i]))
        << "at " << i << ": got " << got[i] << " want " << want[i];
  }
}

// Per-head top-k (ties: lower index first, as selection.h), as sorted index lists.
std::vector<std::vector<int64_t>> TopK(const std::vector<float>& scores, int32_t n_kv_heads,
                                       int64_t k) {
  std::vector<std::vector<int64_t>> kept;
  for (int32_t kv = 0; kv < n_kv_heads; ++kv) {
    std::vector<int64_t> idx(kT);
    std::iota(idx.begin(), idx.end(), 0);
    const float* s = scores.data() + kv * kT;
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    kept.push_back(idx);
  }
  return kept;
}

TEST(WindowAttentionTest, MatchesDenseCausalAttention) {
  Layer layer = LayerA();
  for (const int64_t W : std::vector<int64_t>{1, 4, kT}) {
    const LayerView view = layer.View(W);
    for (int32_t h = 0; h < 2; ++h) {
      std::vector<float> probs(W * kT);
      WindowAttention(view, W, h, probs.data());
      // Dense reference: every query row of the full T×T causal attention, in double.
      for (int64_t t = 0; t < kT; ++t) {
        std::vector<double> row(kT, 0.0);
        double mx = -1e300, sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int c = 0; c < kHd; ++c) row[j] += kA_Q[(h * kT + t) * kHd + c] * kA_K[j * kHd + c];
          row[j] /= 2.0;  // √hd
          mx = std::max(mx, row[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += row[j] = std::exp(row[j] - mx);
        if (t < kT - W) continue;
        for (int64_t j = 0; j < kT; ++j) {
          EXPECT_NEAR(probs[(t - (kT - W)) * kT + j], row[j] / sum, 1e-6)
              << "W=" << W << " h=" << h << " t=" << t << " j=" << j;
        }
      }
    }
  }
}

TEST(WindowAttentionTest, PoolingCountsPaddingForAvgAndIgnoresItForMax) {
  const std::vector<float> x = {1, 2, 3, 4, 5};
  std::vector<float> out(5);
  Pool1d(out.data(), x.data(), 5, 3, Pooling::kAvg);
  ExpectNear(out, {3.0f / 3, 6.0f / 3, 9.0f / 3, 12.0f / 3, 9.0f / 3}, 1e-7, 0);
  Pool1d(out.data(), x.data(), 5, 5, Pooling::kMax);
  ExpectNear(out, {3, 4, 5, 5, 5}, 0, 0);
}

TEST(SnapKvTest, MatchesKvpress) {
  Layer layer = LayerA();
  ExpectNear(MustScore(*MustCreate(Config("snapkv", 4, 3, "")), layer.View(4)), kA_SnapKvW4K3, 1e-6,
             1e-5);
  ExpectNear(MustScore(*MustCreate(Config("snapkv", 3, 5, "avg")), layer.View(3)), kA_SnapKvW3K5,
             1e-6, 1e-5);
  ExpectNear(MustScore(*MustCreate(Config("snapkv", 4, 3, "max")), layer.View(4)), kA_SnapKvW4K3Max,
             1e-6, 1e-5);
  // A view holding more window queries than the scorer reads: the scorer takes the last W.
  ExpectNear(MustScore(*MustCreate(Config("snapkv", 4, 3, "")), layer.View(7)), kA_SnapKvW4K3, 1e-6,
             1e-5);
}

TEST(SnapKvTest, WholePromptInTheWindowScoresEveryEntryEqually) {
  Layer layer = LayerA();
  EXPECT_EQ(MustScore(*MustCreate(Config("snapkv", kT, 0, "")), layer.View(kT)),
            std::vector<float>(kT, 1.0f));
}

TEST(StreamingLlmTest, SinksThenMostRecent) {
  Layer layer = LayerB();
  const std::vector<float> scores = MustScore(*MustCreate(Config("streamingllm")), layer.View(1));
  const std::vector<float> head = {10, 10, 10, 10, 4, 5, 6, 7, 8, 9};
  std::vector<float> both = head;
  both.insert(both.end(), head.begin(), head.end());
  EXPECT_EQ(scores, both);
  // kvpress StreamingLLMPress(cr=0.3) keeps 7: [0, 1, 2, 3, 7, 8, 9]; cr=0.5 keeps 5: [0..3, 9].
  using Kept = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(TopK(scores, 2, 7), (Kept{{0, 1, 2, 3, 7, 8, 9}, {0, 1, 2, 3, 7, 8, 9}}));
  EXPECT_EQ(TopK(scores, 2, 5), (Kept{{0, 1, 2, 3, 9}, {0, 1, 2, 3, 9}}));
}

// LayerB with accumulated attention per query head: H = 4, Hkv = 2 (heads {0, 1} → kv 0,
// {2, 3} → kv 1).
Layer LayerBWithAccumulatedAttention() {
  Layer layer = LayerB();
  layer.acc.assign(4 * kT, 0.0f);
  for (int64_t j = 0; j < kT; ++j) {
    layer.acc[0 * kT + j] = static_cast<float>(kT - j);  // 10 9 ... 1
    layer.acc[1 * kT + j] = static_cast<float>(j % 3);   // 0 1 2 0 1 2 ...
    layer.acc[2 * kT + j] = 1.0f;
    layer.acc[3 * kT + j] = static_cast<float>(j) * 0.5f;
  }
  return layer;
}

TEST(H2oTest, MeansAccumulatedAttentionOverTheGroup) {
  Layer layer = LayerBWithAccumulatedAttention();
  const std::vector<float> want = {5.0f, 5.0f,  5.0f, 3.5f,  3.5f, 3.5f,  2.0f, 2.0f,  2.0f, 0.5f,
                                   0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.25f, 2.5f, 2.75f};
  EXPECT_EQ(MustScore(*MustCreate(Config("h2o")), layer.View(1)), want);
}

// Pooling of a windowless scorer (pooled_scorer.cc): H2O's scores above, each kv-head's row pooled
// on its own with k = 3 (avg counts the zero padding, as SnapKV's pooling), nothing else changed.
TEST(PooledScorerTest, PoolsEachKvHeadsRowAlone) {
  Layer layer = LayerBWithAccumulatedAttention();
  const std::unique_ptr<Scorer> pooled = MustCreate(Config("h2o", 0, 3, "avg"));
  EXPECT_EQ(pooled->name(), "h2o");
  EXPECT_EQ(pooled->needs(), MustCreate(Config("h2o"))->needs());
  EXPECT_EQ(pooled->window(), 0);
  // kv-head 0's row, then kv-head 1's: each row's ends see zero padding, not the other row.
  const std::vector<float> want = {10.0f / 3, 5.0f,  4.5f,     4.0f,      3.5f,  3.0f, 2.5f,
                                   2.0f,      1.5f,  2.5f / 3, 1.25f / 3, 0.75f, 1.0f, 1.25f,
                                   1.5f,      1.75f, 2.0f,     2.25f,     2.5f,  1.75f};
  const std::vector<float> got = MustScore(*pooled, layer.View(1));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  // Kernel 1, the default, pools nothing.
  EXPECT_EQ(MustScore(*MustCreate(Config("h2o", 0, 1, "max")), layer.View(1)),
            MustScore(*MustCreate(Config("h2o")), layer.View(1)));
}

TEST(ExpectedAttentionTest, MatchesKvpress) {
  Layer layer = LayerA();
  ExpectNear(MustScore(*MustCreate(Config("expected_attention")), layer.View(1)),
             kA_ExpectedAttention, 1e-6, 2e-5);
}

// kInterleaved pairs (2i, 2i + 1) where kHalf pairs (i, i + hd/2): the same layer with its channels
// permuted into the interleaved order must score the same.
TEST(ExpectedAttentionTest, InterleavedRopeIsAChannelPermutation) {
  Layer layer = LayerA();
  const std::vector<float> half =
      MustScore(*MustCreate(Config("expected_attention")), layer.View(1));
  auto permute = [](std::vector<float>& x) {
    for (size_t r = 0; r < x.size(); r += kHd) {
      const std::vector<float> row(x.begin() + r, x.begin() + r + kHd);
      for (int i = 0; i < kHd / 2; ++i) {
        x[r + 2 * i] = row[i];
        x[r + 2 * i + 1] = row[i + kHd / 2];
      }
    }
  };
  permute(layer.pre_rope_q);
  permute(layer.k);
  permute(layer.v);
  LayerView view = layer.View(1);
  view.rope_style = kernels::RopeStyle::kInterleaved;
  ExpectNear(MustScore(*MustCreate(Config("expected_attention")), view), half, 1e-7, 1e-5);
}

TEST(DefensiveKvTest, MatchesReferenceScoresAndKeptSets) {
  Layer layer = LayerB();
  const std::vector<float> scores =
      MustScore(*MustCreate(Config("defensivekv", 3, 3, "")), layer.View(3));
  const int64_t n = kT - 3;
  const float max_unforced =
      *std::max_element(kB_DefensiveUnforced.begin(), kB_DefensiveUnforced.end());
  const float top = *std::max_element(scores.begin(), scores.end());
  for (int32_t kv = 0; kv < 2; ++kv) {
    for (int64_t j = 0; j < kT; ++j) {
      const float s = scores[kv * kT + j];
      if (j >= n) {
        EXPECT_EQ(s, top) << "window entry " << j;
      } else if (kB_DefensiveForced[kv * n + j] != 0) {
        EXPECT_GT(s, max_unforced) << "forced entry kv=" << kv << " j=" << j;
      } else {
        const float want = kB_DefensiveUnforced[kv * n + j];
        EXPECT_NEAR(s, want, 1e-6 + 1e-5 * want) << "kv=" << kv << " j=" << j;
      }
    }
  }
  // The reference's kept sets (clamped forcing, per-head top-k) at cr = 0.2, 0.4, 0.6.
  using Kept = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(TopK(scores, 2, 8), (Kept{{0, 1, 4, 5, 6, 7, 8, 9}, {0, 1, 2, 3, 4, 7, 8, 9}}));
  EXPECT_EQ(TopK(scores, 2, 6), (Kept{{1, 5, 6, 7, 8, 9}, {0, 1, 3, 7, 8, 9}}));
  // At cr = 0.6 the reference forces one key per head (clamp int(10·0.4 − 3) = 1): head 0's is
  // key 1 (highest mean attention), but it gets max(s), which key 5 already holds, so torch.topk
  // broke a five-way tie at the max and kept {5, 7, 8, 9}. Here forced keys rank strictly above
  // the rest, so the forced key 1 is kept.
  EXPECT_EQ(TopK(scores, 2, 4), (Kept{{1, 7, 8, 9}, {0, 7, 8, 9}}));
}

// A window that fits T = 10 for the windowed methods, 0 (none) for the others.
int64_t WindowFor(const std::string& method) {
  return method == "snapkv" || method == "defensivekv" || method == "cake" ? 3 : 0;
}

// The registered methods that need no weights or module file (gate_scorers_test.cc and
// lookahead_test.cc cover the others with their files).
std::vector<std::string> FileFreeScorers() {
  std::vector<std::string> methods;
  for (const std::string& m : KnownScorers()) {
    if (!TakesWeights(m) && m != "lookahead") {
      methods.push_back(m);
    }
  }
  return methods;
}

// Every file-free scorer with its test window, and the pooled ones (no window of their own, a
// kernel: pooled_scorer.cc) once more with k 3 max.
std::vector<ScorerConfig> FileFreeConfigs() {
  std::vector<ScorerConfig> configs;
  for (const std::string& method : FileFreeScorers()) {
    configs.push_back(Config(method, WindowFor(method)));
    const WindowDefaults defaults = *ScorerWindowDefaults(method);
    if (defaults.window == 0 && defaults.kernel > 0) configs.push_back(Config(method, 0, 3, "max"));
  }
  return configs;
}

TEST(ScorerTest, ScoringIsDeterministic) {
  Layer layer = LayerB();
  layer.pre_rope_q = layer.q;  // any [T, H, hd] values do for expected_attention
  layer.acc.assign(4 * kT, 0.25f);
  for (const ScorerConfig& config : FileFreeConfigs()) {
    const auto scorer = MustCreate(config);
    const LayerView view = layer.View(std::max<int64_t>(scorer->window(), 1));
    EXPECT_EQ(MustScore(*scorer, view), MustScore(*scorer, view)) << config.method;
  }
}

TEST(ScorerTest, MissingInputsAreInvalidArgument) {
  Layer layer = LayerB();
  layer.pre_rope_q = layer.q;
  layer.acc.assign(4 * kT, 0.25f);
  std::vector<float> scores(2 * kT);
  for (const ScorerConfig& config : FileFreeConfigs()) {
    const std::string& method = config.method;
    const auto scorer = MustCreate(config);
    const LayerView full = layer.View(std::max<int64_t>(scorer->window(), 1));
    for (uint32_t bit = 1; bit <= kLayerWeights; bit <<= 1) {
      if ((scorer->needs() & bit) == 0) continue;
      LayerView view = full;
      if (bit == kHiddenStates) view.hidden_states = nullptr;
      if (bit == kKeys) view.keys = nullptr;
      if (bit == kValues) view.values = nullptr;
      if (bit == kWindowQueries) view.window_queries = nullptr;
      if (bit == kPreRopeQueries) view.pre_rope_queries = nullptr;
      if (bit == kAccumulatedAttention) view.accumulated_attention = nullptr;
      if (bit == kLayerWeights) view.weights = nullptr;
      EXPECT_EQ(scorer->Score(view, scores.data()).code(), absl::StatusCode::kInvalidArgument)
          << method << " without need bit " << bit;
    }
    EXPECT_EQ(scorer->Score(full, nullptr).code(), absl::StatusCode::kInvalidArgument) << method;
  }
}

TEST(ScorerTest, ShortPromptsAreInvalidArgument) {
  Layer layer = LayerA();
  std::vector<float> scores(kT);
  // T < W: the default windows (64, 32) exceed T = 10.
  for (const char* method : {"snapkv", "defensivekv"}) {
    const auto scorer = MustCreate(Config(method));
    LayerView view = layer.View(kT);
    const absl::Status status = scorer->Score(view, scores.data());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << method;
    EXPECT_THAT(status.message(), HasSubstr("window")) << status;
  }
  // The view holds fewer window queries than the scorer reads.
  EXPECT_EQ(MustCreate(Config("snapkv", 4, 0, ""))->Score(layer.View(3), scores.data()).code(),
            absl::StatusCode::kInvalidArgument);
  // Expected attention needs more than its 4 sinks.
  LayerView view = layer.View(1);
  view.n_tokens = 4;
  EXPECT_EQ(MustCreate(Config("expected_attention"))->Score(view, scores.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, KnowsTheMethodsAndTheirDefaults) {
  EXPECT_EQ(KnownScorers(),
            (std::vector<std::string>{"cake", "defensivekv", "expected_attention", "foresightkv",
                                      "h2o", "kvzip_gate", "lookahead", "retention_global",
                                      "snapkv", "streamingllm", "trimkv_gate"}));
  EXPECT_EQ(MustCreate(Config("snapkv"))->window(), 64);
  EXPECT_EQ(MustCreate(Config("defensivekv"))->window(), 32);
  EXPECT_EQ(MustCreate(Config("snapkv", 16, 7, "max"))->window(), 16);
  for (const std::string& method : FileFreeScorers())
    EXPECT_EQ(MustCreate(Config(method))->name(), method);
  // Learned methods without their file are a clear error, not a scorer with missing weights.
  for (const char* method :
       {"kvzip_gate", "trimkv_gate", "retention_global", "foresightkv", "lookahead"}) {
    const auto scorer = CreateScorer(Config(method));
    EXPECT_EQ(scorer.status().code(), absl::StatusCode::kInvalidArgument) << method;
  }
}

TEST(RegistryTest, UnknownMethodIsNotFoundListingTheKnownOnes) {
  const auto scorer = CreateScorer(Config("snapkvv"));
  EXPECT_EQ(scorer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(scorer.status().message(), HasSubstr("snapkvv"));
  for (const std::string& method : KnownScorers()) {
    EXPECT_THAT(scorer.status().message(), HasSubstr(method));
  }
}

TEST(RegistryTest, BadParametersAreInvalidArgument) {
  const std::vector<ScorerConfig> bad = {
      Config("snapkv", -1, 0, ""),      Config("snapkv", 1 << 20, 0, ""),
      Config("snapkv", 0, 4, ""),       Config("snapkv", 0, -3, ""),
      Config("snapkv", 0, 999, ""),     Config("snapkv", 0, 0, "mean"),
      Config("defensivekv", 0, 2, ""),  Config("streamingllm", 8, 0, ""),
      Config("streamingllm", 0, 5, ""), Config("h2o", 8, 0, ""),
      Config("h2o", 0, 4, ""),          Config("expected_attention", 0, 0, "mean"),
  };
  for (const ScorerConfig& config : bad) {
    const auto scorer = CreateScorer(config);
    EXPECT_EQ(scorer.status().code(), absl::StatusCode::kInvalidArgument)
        << config.method << " window=" << config.window << " kernel=" << config.kernel
        << " pooling=" << config.pooling;
    EXPECT_THAT(scorer.status().message(), HasSubstr(config.method));
  }
}

}  // namespace
}  // namespace glimpse::eviction
