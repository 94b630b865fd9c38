#include "synth/synth_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/numeric_types.h"
#include "base/progress.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "io/safetensors_writer.h"
#include "kernels/mxfp4.h"
#include "model/k3_config.h"
#include "text/synth_tokenizer.h"
#include "vision/vision_config.h"
#include "vision/synth_vision.h"

namespace k3 {
namespace {

using nlohmann::json;

json preset_text_config(const std::string& preset) {
  json t;
  if (preset == "tiny") {
    t = {{"hidden_size", 256},         {"num_hidden_layers", 9},      {"vocab_size", 2048},
         {"num_attention_heads", 4},   {"num_key_value_heads", 4},    {"q_lora_rank", 128},
         {"kv_lora_rank", 64},         {"qk_nope_head_dim", 32},      {"qk_rope_head_dim", 16},
         {"v_head_dim", 32},           {"intermediate_size", 512},    {"num_experts", 16},
         {"num_experts_per_token", 4}, {"num_shared_experts", 2},     {"moe_intermediate_size", 64},
         {"routed_expert_hidden_size", 128}, {"attn_res_block_size", 4}, {"max_position_embeddings", 8192},
         {"kda_num_heads", 4},         {"kda_head_dim", 64}};
  } else if (preset == "k3-width" || preset == "k3") {
    // Full Kimi K3 widths.  k3-width: 4 layers (3 KDA + 1 MLA) and 64 experts keep it a few GB;
    // k3: the released 93 layers and 896 experts.
    t = {{"hidden_size", 7168},         {"num_hidden_layers", 4},       {"vocab_size", 163840},
         {"num_attention_heads", 96},   {"num_key_value_heads", 96},    {"q_lora_rank", 1536},
         {"kv_lora_rank", 512},         {"qk_nope_head_dim", 128},      {"qk_rope_head_dim", 64},
         {"v_head_dim", 128},           {"intermediate_size", 33792},   {"num_experts", 64},
         {"num_experts_per_token", 16}, {"num_shared_experts", 2},      {"moe_intermediate_size", 3072},
         {"routed_expert_hidden_size", 3584}, {"attn_res_block_size", 12}, {"max_position_embeddings", 1048576},
         {"kda_num_heads", 96},         {"kda_head_dim", 128}};
    if (preset == "k3") {
      t["num_hidden_layers"] = 93;
      t["num_experts"] = 896;
    }
  } else {
    fail("unknown synth preset '", preset, "' (known: tiny, k3-width, k3)");
  }
  return t;
}

// Builds the official-layout config.json from flat settings.
json build_config(json flat) {
  const int L = flat["num_hidden_layers"].get<int>();
  const int V = flat["vocab_size"].get<int>();
  K3_CHECK(V >= 512, "synth: vocab_size must be at least 512 (256 bytes + 256 special tokens)");
  // K3's schedule: every 4th layer and the last one are MLA (1-based lists; for 93 layers the
  // released full_attn_layers [4, 8, ..., 92, 93] and kda_layers, the rest).
  json kda = json::array(), full = json::array();
  for (int i = 1; i <= L; ++i) {
    if (i % 4 == 0 || (i == L && L > 1)) full.push_back(i);
    else kda.push_back(i);
  }
  const int bos = V - 256;
  json text = {{"model_type", "kimi_linear"},
               {"architectures", {"KimiLinearForCausalLM"}},
               {"hidden_act", "situ"},
               {"activation_situ_beta", 4.0},
               {"activation_situ_linear_beta", 25.0},
               {"rms_norm_eps", 1e-5},
               {"first_k_dense_replace", 1},
               {"moe_layer_freq", 1},
               {"moe_renormalize", true},
               {"moe_router_activation_func", "sigmoid"},
               {"topk_method", "noaux_tc"},
               {"use_grouped_topk", true},
               {"num_expert_group", 1},
               {"topk_group", 1},
               {"routed_scaling_factor", 1.0},
               {"latent_moe_use_norm", true},
               {"mla_use_nope", true},
               {"mla_use_output_gate", true},
               {"num_nextn_predict_layers", 0},
               {"tie_word_embeddings", false},
               {"bos_token_id", bos},
               {"eos_token_id", bos + 2},
               {"pad_token_id", bos + 255},
               {"dtype", "bfloat16"}};
  json lin = {{"full_attn_layers", full},
              {"kda_layers", kda},
              {"num_heads", flat["kda_num_heads"]},
              {"head_dim", flat["kda_head_dim"]},
              {"short_conv_kernel_size", 4},
              {"gate_lower_bound", -5.0},
              {"use_full_rank_gate", true}};
  flat.erase("kda_num_heads");
  flat.erase("kda_head_dim");
  for (auto it = flat.begin(); it != flat.end(); ++it) text[it.key()] = it.value();
  text["linear_attn_config"] = lin;
  text["quantization_config"] = {
      {"quant_method", "compressed-tensors"},
      {"format", "mxfp4-pack-quantized"},
      {"quantization_status", "compressed"},
      {"config_groups",
       {{"group_0",
         {{"format", "mxfp4-pack-quantized"},
          {"targets", {"Linear"}},
          {"input_activations", nullptr},
          {"output_activations", nullptr},
          {"weights",
           {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}, {"symmetric", true},
            {"dynamic", false}, {"scale_dtype", "torch.uint8"}, {"observer", "minmax"}}}}}}},
      {"ignore",
       {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
        "re:.*vision_tower.*", "re:.*mm_projector.*"}}};
  return {{"architectures", {"KimiK3ForConditionalGeneration"}},
          {"model_type", "kimi_k3"},
          {"bos_token_id", bos},
          {"eos_token_id", bos + 2},
          {"pad_token_id", bos + 255},
          {"media_placeholder_token_id", bos + 21},
          {"image_placeholder", "<|kimi_image_placeholder|>"},
          {"dtype", "bfloat16"},
          {"tie_word_embeddings", false},
          {"k3_synthetic", true},
          {"text_config", text}};
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

// One tensor to write: its layer group (whole-layer sharding), its unit (tensors that must share
// a shard: one routed expert's six) and how to fill it (empty: a hole of zeros).
struct Planned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  SafetensorsWriter::Fill fill;
  int shard;
  int64_t unit;
  uint64_t nbytes;
};

class Planner {
 public:
  Planner(uint64_t seed, bool sparse) : seed_(seed), sparse_(sparse) {}
  std::vector<Planned> tensors;
  int shard = 0;

  // Tensors added between these share one unit (never split over shards).
  void begin_unit() {
    ++next_unit_;
    in_unit_ = true;
  }
  void end_unit() { in_unit_ = false; }

  // Sparse: the fill is dropped, the tensor is a hole of zeros.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, SafetensorsWriter::Fill fill) {
    uint64_t n = dtype_size(dtype);
    for (int64_t x : shape) n *= static_cast<uint64_t>(x);
    if (!in_unit_) ++next_unit_;
    tensors.push_back({name, dtype, std::move(shape), sparse_ ? nullptr : std::move(fill), shard, next_unit_, n});
  }

  void bf16(const std::string& name, std::vector<int64_t> shape, double std, double mean = 0.0) {
    const uint64_t s = name_seed(seed_, name);
    add(name, DType::kBF16, std::move(shape), [s, std, mean](uint8_t* dst, size_t n) {
      // Chunks of 2^20 values with their own seeds, generated in parallel.
      auto* p = reinterpret_cast<uint16_t*>(dst);
      const int64_t count = static_cast<int64_t>(n / 2), chunk = int64_t{1} << 20;
      global_pool().run((count + chunk - 1) / chunk, [&](int64_t c, int) {
        Rng rng(s ^ (static_cast<uint64_t>(c) * 0x9e3779b97f4a7c15ULL));
        for (int64_t i = c * chunk; i < std::min(count, (c + 1) * chunk); ++i)
          p[i] = f32_to_bf16(static_cast<float>(mean + std * rng.fast_normal()));
      });
    });
  }
  void f32(const std::string& name, std::vector<int64_t> shape, std::function<float(Rng&, size_t)> gen) {
    const uint64_t s = name_seed(seed_, name);
    add(name, DType::kF32, std::move(shape), [s, gen](uint8_t* dst, size_t n) {
      Rng rng(s);
      auto* p = reinterpret_cast<float*>(dst);
      for (size_t i = 0; i < n / 4; ++i) p[i] = gen(rng, i);
    });
  }
  void mxfp4(const std::string& module, int64_t rows, int64_t cols, double std) {
    K3_CHECK(cols % 32 == 0, "synth: MXFP4 tensor ", module, " needs a width divisible by 32 (got ", cols, ")");
    // Both tensors are generated from the same rows; the scale pass re-generates them.
    const uint64_t s = name_seed(seed_, module);
    auto rowgen = [s, rows, cols, std](bool want_scales, uint8_t* dst) {
      global_pool().run(rows, [&](int64_t r, int) {  // one seed per row, rows in parallel
        Rng rng(s ^ (static_cast<uint64_t>(r + 1) * 0x9e3779b97f4a7c15ULL));
        std::vector<float> row(cols);
        std::vector<uint8_t> packed(cols / 2), scales(cols / 32);
        for (auto& v : row) v = static_cast<float>(std * rng.fast_normal());
        mxfp4_quant_row(row.data(), cols, packed.data(), scales.data());
        if (want_scales)
          std::copy(scales.begin(), scales.end(), dst + r * (cols / 32));
        else
          std::copy(packed.begin(), packed.end(), dst + r * (cols / 2));
      });
    };
    add(module + ".weight_packed", DType::kU8, {rows, cols / 2},
        [rowgen](uint8_t* dst, size_t) { rowgen(false, dst); });
    add(module + ".weight_scale", DType::kU8, {rows, cols / 32},
        [rowgen](uint8_t* dst, size_t) { rowgen(true, dst); });
  }
  void norm(const std::string& name, int64_t n) { bf16(name, {n}, 0.1, 1.0); }

 private:
  uint64_t seed_;
  bool sparse_;
  int64_t next_unit_ = -1;
  bool in_unit_ = false;
};

void plan_layer(Planner& p, const TextConfig& c, int l) {
  const std::string pre = cat("language_model.model.layers.", l, ".");
  const int64_t d = c.hidden_size;
  const double sd = 1.0 / std::sqrt(static_cast<double>(d));
  p.norm(pre + "input_layernorm.weight", d);
  p.norm(pre + "post_attention_layernorm.weight", d);
  p.norm(pre + "self_attention_res_norm.weight", d);
  p.norm(pre + "mlp_res_norm.weight", d);
  p.bf16(pre + "self_attention_res_proj.weight", {1, d}, 2.0 * sd);
  p.bf16(pre + "mlp_res_proj.weight", {1, d}, 2.0 * sd);
  const std::string a = pre + "self_attn.";
  if (c.layer_kinds[l] == LayerKind::kKda) {
    const int64_t H = c.kda.num_heads, D = c.kda.head_dim, P = c.kda_width(), W = c.kda.conv_kernel;
    for (const char* n : {"q_proj", "k_proj", "v_proj", "g_proj"}) p.bf16(a + n + ".weight", {P, d}, sd);
    for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"})
      p.f32(a + n + ".weight", {P, 1, W}, [](Rng& r, size_t) { return static_cast<float>(0.5 * r.normal()); });
    p.bf16(a + "f_a_proj.weight", {D, d}, sd);
    p.bf16(a + "f_b_proj.weight", {P, D}, 1.0 / std::sqrt(static_cast<double>(D)));
    p.bf16(a + "b_proj.weight", {H, d}, sd);
    // As released: A_log has head_dim entries, only the first num_heads live.
    p.f32(a + "A_log", {D}, [H](Rng& r, size_t i) {
      return i < static_cast<size_t>(H) ? static_cast<float>(std::log(r.uniform(0.47, 11.8))) : 0.0f;
    });
    p.f32(a + "dt_bias", {P}, [](Rng& r, size_t) { return static_cast<float>(r.uniform(-7.9, 0.18)); });
    p.f32(a + "o_norm.weight", {D}, [](Rng& r, size_t) { return static_cast<float>(1.0 + 0.1 * r.normal()); });
    p.bf16(a + "o_proj.weight", {d, P}, 1.0 / std::sqrt(static_cast<double>(P)));
  } else {
    const int64_t H = c.num_heads, qk = c.mla_qk_head_dim(), qr = c.q_lora_rank.value_or(0);
    p.bf16(a + "q_a_proj.weight", {qr, d}, sd);
    p.norm(a + "q_a_layernorm.weight", qr);
    p.bf16(a + "q_b_proj.weight", {H * qk, qr}, 1.0 / std::sqrt(static_cast<double>(qr)));
    p.bf16(a + "kv_a_proj_with_mqa.weight", {c.mla_cache_width(), d}, sd);
    p.norm(a + "kv_a_layernorm.weight", c.kv_lora_rank);
    p.bf16(a + "kv_b_proj.weight", {H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
           1.0 / std::sqrt(static_cast<double>(c.kv_lora_rank)));
    p.bf16(a + "g_proj.weight", {H * c.v_head_dim, d}, sd);
    p.bf16(a + "o_proj.weight", {d, H * c.v_head_dim}, 1.0 / std::sqrt(static_cast<double>(H * c.v_head_dim)));
  }
  if (!c.is_moe_layer(l)) {
    const int64_t I = c.intermediate_size;
    p.bf16(pre + "mlp.gate_proj.weight", {I, d}, sd);
    p.bf16(pre + "mlp.up_proj.weight", {I, d}, sd);
    p.bf16(pre + "mlp.down_proj.weight", {d, I}, 1.0 / std::sqrt(static_cast<double>(I)));
    return;
  }
  const std::string f = pre + "block_sparse_moe.";
  const int64_t E = c.num_experts, lat = c.latent_size.value_or(d), m = c.moe_intermediate_size;
  const int64_t s = m * c.num_shared_experts;
  p.bf16(f + "gate.weight", {E, d}, sd);
  p.f32(f + "gate.e_score_correction_bias", {E}, [](Rng& r, size_t) { return static_cast<float>(0.02 * r.normal()); });
  p.bf16(f + "routed_expert_down_proj.weight", {lat, d}, sd);
  p.bf16(f + "routed_expert_up_proj.weight", {d, lat}, 1.0 / std::sqrt(static_cast<double>(lat)));
  p.norm(f + "routed_expert_norm.weight", lat);
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = cat(f, "experts.", e, ".");
    p.begin_unit();  // one expert's six tensors stay in one shard (and adjacent: all U8)
    p.mxfp4(x + "w1", m, lat, 1.0 / std::sqrt(static_cast<double>(lat)));
    p.mxfp4(x + "w3", m, lat, 1.0 / std::sqrt(static_cast<double>(lat)));
    p.mxfp4(x + "w2", lat, m, 1.0 / std::sqrt(static_cast<double>(m)));
    p.end_unit();
  }
  if (s > 0) {
    p.bf16(f + "shared_experts.gate_proj.weight", {s, d}, sd);
    p.bf16(f + "shared_experts.up_proj.weight", {s, d}, sd);
    p.bf16(f + "shared_experts.down_proj.weight", {d, s}, 1.0 / std::sqrt(static_cast<double>(s)));
  }
}

std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%06d.safetensors", i + 1, n);
  return buf;
}

// Spreads the tensors over n shards in declaration order: shard s closes once the bytes so far
// reach (s+1)/n of the total, or when the units left are just enough to give every later shard
// one, so no shard is empty; a unit is never split.  Sets each tensor's shard.
void spread_over_shards(std::vector<Planned>& tensors, int n, uint64_t total) {
  int64_t units = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (i == 0 || tensors[i].unit != tensors[i - 1].unit) ++units;
  K3_CHECK(units >= n, "--shards ", n, ": the checkpoint has only ", units,
           " tensors (counting one routed expert's six as one) to spread, so some shards would be empty");
  int s = 0;
  int64_t unit_index = 0;
  unsigned __int128 cum = 0;
  for (size_t i = 0; i < tensors.size();) {
    size_t j = i;
    while (j < tensors.size() && tensors[j].unit == tensors[i].unit) {
      tensors[j].shard = s;
      cum += tensors[j].nbytes;
      ++j;
    }
    const int64_t units_left = units - 1 - unit_index;
    if (s < n - 1 && (cum * static_cast<unsigned>(n) >= static_cast<unsigned __int128>(total) * (s + 1) ||
                      units_left == n - 1 - s))
      ++s;
    ++unit_index;
    i = j;
  }
}

// Bytes free to an unprivileged writer on the file system that will hold `dir` (its nearest
// existing ancestor); nullopt when that cannot be asked.
std::optional<uint64_t> available_bytes(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

void write_json_file(const std::string& path, const json& j) {
  write_file_atomically(path, j.dump(2) + "\n");
}

}  // namespace

std::vector<std::string> synth_presets() { return {"tiny", "k3-width", "k3"}; }

json synth_config(const SynthOptions& options) {
  json flat = preset_text_config(options.preset);
  K3_CHECK(options.overrides.is_object(), "synth: overrides must be a JSON object");
  for (auto it = options.overrides.begin(); it != options.overrides.end(); ++it) {
    K3_CHECK(flat.contains(it.key()), "synth: unknown setting '", it.key(), "'");
    K3_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() > 0, "synth: setting '", it.key(),
             "' must be a positive integer");
    flat[it.key()] = it.value();
  }
  K3_CHECK(flat["num_experts_per_token"].get<int>() <= flat["num_experts"].get<int>(),
           "synth: num_experts_per_token exceeds num_experts");
  json cfg = build_config(flat);
  parse_model_config(cfg.dump(), "synthetic config");  // must load as-is
  return cfg;
}

std::string synth_vision_preset(const SynthOptions& options) {
  if (options.vision == "default") return options.preset == "tiny" ? "tiny" : options.preset == "k3" ? "k3" : "";
  if (options.vision == "none") return "";
  if (options.vision == "tiny" || options.vision == "k3") return options.vision;
  fail("unknown synth vision tower '", options.vision, "' (known: default, none, tiny, k3)");
}

void write_synth_checkpoint(const std::string& dir, const SynthOptions& options) {
  const std::string vision = synth_vision_preset(options);
  json cfg = synth_config(options);
  const ModelConfig mc = parse_model_config(cfg.dump(), "synthetic config");
  const TextConfig& c = mc.text;
  Planner p(options.seed, options.sparse);
  const int64_t d = c.hidden_size;
  for (int l = 0; l < c.num_layers; ++l) {
    p.shard = l;  // remapped to shard indices below
    plan_layer(p, c, l);
  }
  p.shard = c.num_layers;
  p.bf16("language_model.model.embed_tokens.weight", {c.vocab_size, d}, 0.7);
  p.bf16("language_model.lm_head.weight", {c.vocab_size, d}, 1.0 / std::sqrt(static_cast<double>(d)));
  p.norm("language_model.model.norm.weight", d);
  p.norm("language_model.model.output_attn_res_norm.weight", d);
  p.bf16("language_model.model.output_attn_res_proj.weight", {1, d}, 2.0 / std::sqrt(static_cast<double>(d)));
  uint64_t text_total = 0;
  for (const Planned& t : p.tensors) text_total += t.nbytes;

  int shards = options.shards;
  if (shards < 0) fail("--shards ", shards, ": must be positive");
  if (shards == 0) {
    // As released for k3; else one per 2 GiB, at most one per layer (+1).
    shards = options.preset == "k3"
                 ? 96
                 : static_cast<int>(std::min<uint64_t>(std::max<uint64_t>(2, (text_total + (2ull << 30) - 1) >> 31),
                                                       c.num_layers + 1));
  }
  // Up to one shard per layer (+1 for the top-level tensors) the shards hold whole layers and a
  // vision tower gets its own file; beyond that the tensors, the vision tower's too, are spread
  // by size in declaration order (the release's 96 shards for 93 layers).
  const bool by_size = shards > c.num_layers + 1;
  SynthVisionOptions vo;
  vo.preset = vision;
  vo.seed = options.seed;
  vo.sparse = options.sparse;
  if (by_size && !vision.empty()) {
    cfg["vision_config"] = synth_vision_config(vo, static_cast<int>(d));
    const VisionConfig vc = parse_vision_config(cfg, "synthetic config");  // as the loader will see it
    p.shard = c.num_layers;
    plan_synth_vision_tensors(vc, vo, [&p](const std::string& name, DType dtype, std::vector<int64_t> shape,
                                           SafetensorsWriter::Fill fill) {
      p.add(name, dtype, std::move(shape), std::move(fill));
    });
  }
  uint64_t total = 0;
  for (const Planned& t : p.tensors) total += t.nbytes;
  if (by_size) {
    spread_over_shards(p.tensors, shards, total);
  } else {
    // Layer l -> shard l*shards/(L+1); the top-level tensors go to the last shard, as released.
    for (Planned& t : p.tensors)
      t.shard = static_cast<int>(static_cast<int64_t>(t.shard) * shards / (c.num_layers + 1));
  }
  if (!options.sparse) {
    // Random weights take real disk: refuse up front rather than fail hours later.
    const std::optional<uint64_t> avail = available_bytes(dir);
    if (avail && *avail < total)
      fail(dir, ": the checkpoint needs ", total, " bytes of tensor data, the file system has ", *avail,
           " available (--sparse writes the same layout as file holes)");
  }

  // Created once every option has been checked, so a refused one leaves nothing behind.
  std::error_code ec;  // missing parents are created too, as mkdir -p would
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) fail(dir, ": cannot create directory (", ec.message(), ")");
  // An earlier checkpoint's config.json goes first, so a failure part-way leaves no mix that loads.
  if (::unlink((dir + "/config.json").c_str()) != 0 && errno != ENOENT)
    fail(dir, "/config.json: cannot remove the earlier checkpoint's config: ", std::strerror(errno));
  json weight_map = json::object();
  Progress progress("writing " + dir, total >> 20, "MiB");
  uint64_t written = 0;
  // Shard by shard, so only one shard's declarations are held by a writer at a time.
  std::vector<std::vector<Planned*>> members(shards);
  for (Planned& t : p.tensors) members[t.shard].push_back(&t);
  for (int s = 0; s < shards; ++s) {
    const std::string name = shard_name(s, shards);
    SafetensorsWriter writer;
    for (Planned* t : members[s]) {
      weight_map[t->name] = name;
      writer.add(t->name, t->dtype, std::move(t->shape), std::move(t->fill));
    }
    writer.write(dir + "/" + name, [&](uint64_t bytes) {
      written += bytes;
      progress.set(written >> 20);
    });
  }
  progress.finish();
  write_json_file(dir + "/model.safetensors.index.json",
                  {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  write_synth_tokenizer(dir, c.vocab_size);  // a byte-level BPE with the K3 specials
  if (!vision.empty()) {
    if (by_size) {
      write_json_file(dir + "/preprocessor_config.json", released_preprocessor_config());
    } else {
      cfg["vision_config"] = synth_vision_config(vo, static_cast<int>(d));
      write_synth_vision_files(dir, parse_vision_config(cfg, "synthetic config"), vo);
    }
  }
  // Last: until config.json exists the directory does not load, so a writer killed or out of
  // disk part-way never leaves something that passes for a checkpoint.
  write_json_file(dir + "/config.json", cfg);
}

}  // namespace k3
