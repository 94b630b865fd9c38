#include "model/k3_config.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/checkpoint.h"
#include "io/json_document.h"
#include "io/json_preview.h"

namespace k3 {

bool QuantConfig::is_quantized(const std::string& module) const {
  if (!enabled) return false;
  for (const std::string& e : exact_)
    if (e == module) return false;
  for (const std::regex& r : regexes_)  // compressed-tensors uses re.match: anchored at the start
    if (std::regex_search(module, r, std::regex_constants::match_continuous)) return false;
  return true;
}

bool TextConfig::is_moe_layer(int layer) const {
  return num_experts > 0 && layer >= first_k_dense_replace && moe_layer_freq > 0 && layer % moe_layer_freq == 0;
}

int TextConfig::num_kda_layers() const {
  int n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::kKda;
  return n;
}

int TextConfig::num_mla_layers() const { return num_layers - num_kda_layers(); }

std::string ModelConfig::schedule_string() const {
  std::string s;
  for (LayerKind k : text.layer_kinds) s += k == LayerKind::kKda ? 'K' : 'M';
  return s;
}

using nlohmann::json;

namespace {

// The exact value of a JSON integer, if it fits int64 and lies in [lo, hi].  nlohmann stores
// non-negative integers as uint64, which get<int64_t>() would wrap (2^64-1 -> -1) and get<int>()
// truncate (4294967297 -> 1); callers show the value with json_preview, which prints it as written.
bool int_in_range(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
  } else {
    *out = v.get<int64_t>();
  }
  return *out >= lo && *out <= hi;
}

// Longest "re:" pattern accepted in quantization_config.ignore: libstdc++ compiles a regex by
// recursion, so a deeply nested pattern (tens of thousands of parentheses) overflows the stack.
// Real ignore patterns are a few dozen characters.
constexpr size_t kMaxIgnorePatternChars = 1000;

}  // namespace

// Reads fields out of one JSON object, recording problems instead of stopping at the first.
struct ConfigParser {
  std::string source;
  std::vector<std::string> problems;

  void problem(const std::string& path, const std::string& what) { problems.push_back(cat(path, ": ", what)); }

  const json* field(const json& obj, const std::string& path, const char* key, bool required) {
    if (obj.contains(key) && !obj[key].is_null()) return &obj[key];
    if (required) problem(cat(path, key), "missing");
    return nullptr;
  }

  std::optional<int> opt_int(const json& obj, const std::string& path, const char* key, bool required, int lo = 0,
                             int hi = 1 << 30) {
    const json* v = field(obj, path, key, required);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) {
      problem(cat(path, key), cat("expected an integer, got ", json_preview(*v)));
      return std::nullopt;
    }
    int64_t x = 0;
    if (!int_in_range(*v, lo, hi, &x)) {
      problem(cat(path, key), cat("value ", json_preview(*v), " is outside [", lo, ", ", hi, "]"));
      return std::nullopt;
    }
    return static_cast<int>(x);
  }

  int req_int(const json& obj, const std::string& path, const char* key, int lo = 1, int hi = 1 << 30) {
    return opt_int(obj, path, key, true, lo, hi).value_or(0);
  }

  std::optional<double> opt_num(const json& obj, const std::string& path, const char* key, bool required) {
    const json* v = field(obj, path, key, required);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) {
      problem(cat(path, key), cat("expected a number, got ", json_preview(*v)));
      return std::nullopt;
    }
    return v->get<double>();
  }

  // A number stored as float, which must lie in [lo, hi] (bounds that are themselves finite,
  // normal floats).  Checked on the double and again after the cast: a value such as 1e300 would
  // otherwise become inf, and 1e-50 would flush to 0 and then fail a sign check it passes.
  std::optional<float> opt_float(const json& obj, const std::string& path, const char* key, double lo, double hi) {
    const std::optional<double> d = opt_num(obj, path, key, false);
    if (!d) return std::nullopt;
    const float f = static_cast<float>(*d);
    if (!(*d >= lo && *d <= hi) || !std::isfinite(f) || (f != 0 && !std::isnormal(f))) {
      problem(cat(path, key), cat("value ", json_preview(obj[key]), " is outside [", lo, ", ", hi, "]"));
      return std::nullopt;
    }
    return f;
  }

  std::optional<bool> opt_bool(const json& obj, const std::string& path, const char* key) {
    const json* v = field(obj, path, key, false);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      problem(cat(path, key), cat("expected true or false, got ", json_preview(*v)));
      return std::nullopt;
    }
    return v->get<bool>();
  }

  std::optional<std::string> opt_str(const json& obj, const std::string& path, const char* key, bool required) {
    const json* v = field(obj, path, key, required);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) {
      problem(cat(path, key), cat("expected a string, got ", json_preview(*v)));
      return std::nullopt;
    }
    return v->get<std::string>();
  }

  // A list of integers in [lo, hi]; each bad entry is reported by its index.
  std::vector<int> int_list(const json& obj, const std::string& path, const char* key,
                            int lo = std::numeric_limits<int>::min(), int hi = std::numeric_limits<int>::max()) {
    std::vector<int> out;
    const json* v = field(obj, path, key, true);
    if (v == nullptr) return out;
    if (!v->is_array()) {
      problem(cat(path, key), cat("expected a list of integers, got ", json_preview(*v)));
      return out;
    }
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      const std::string where = cat(path, key, "[", i, "]");
      if (!e.is_number_integer()) {
        problem(where, cat("expected an integer, got ", json_preview(e)));
        continue;
      }
      int64_t x = 0;
      if (!int_in_range(e, lo, hi, &x)) {
        problem(where, cat("value ", json_preview(e), " is outside [", lo, ", ", hi, "]"));
        continue;
      }
      out.push_back(static_cast<int>(x));
    }
    return out;
  }

  void parse_quant(const json& q, const std::string& path, QuantConfig* out) {
    if (!q.is_object()) {
      problem(path.substr(0, path.size() - 1), cat("expected an object, got ", json_preview(q)));
      return;
    }
    const std::string method = opt_str(q, path, "quant_method", true).value_or("");
    if (!method.empty() && method != "compressed-tensors") {
      problem(path + "quant_method", cat("'", method, "' is not supported (k3 runs compressed-tensors mxfp4-pack-quantized)"));
      return;
    }
    const std::string format = opt_str(q, path, "format", false).value_or("mxfp4-pack-quantized");
    if (format != "mxfp4-pack-quantized") {
      problem(path + "format", cat("'", format, "' is not supported (expected mxfp4-pack-quantized)"));
      return;
    }
    out->enabled = true;
    if (q.contains("config_groups") && q["config_groups"].is_object()) {
      for (auto it = q["config_groups"].begin(); it != q["config_groups"].end(); ++it) {
        const std::string gp = cat(path, "config_groups.", it.key(), ".");
        const json& g = it.value();
        if (g.contains("format") && g["format"].is_string() && g["format"] != "mxfp4-pack-quantized")
          problem(gp + "format", cat("'", g["format"].get<std::string>(), "' is not supported"));
        if (g.contains("input_activations") && !g["input_activations"].is_null())
          problem(gp + "input_activations", "activation quantisation is not supported (expected null)");
        if (!g.contains("weights") || !g["weights"].is_object()) continue;
        const json& w = g["weights"];
        const std::string wp = gp + "weights.";
        if (auto bits = opt_int(w, wp, "num_bits", false, 0); bits && *bits != 4)
          problem(wp + "num_bits", cat(*bits, " is not supported (MXFP4 has 4)"));
        if (auto type = opt_str(w, wp, "type", false); type && *type != "float")
          problem(wp + "type", cat("'", *type, "' is not supported (MXFP4 is 'float')"));
        if (auto gs = opt_int(w, wp, "group_size", false, 1); gs) {
          if (*gs != 32) problem(wp + "group_size", cat(*gs, " is not supported (MXFP4 groups are 32)"));
          out->group_size = *gs;
        }
        if (auto sym = opt_bool(w, wp, "symmetric"); sym && !*sym)
          problem(wp + "symmetric", "asymmetric quantisation is not supported");
      }
    }
    if (q.contains("ignore")) {
      if (!q["ignore"].is_array()) {
        problem(path + "ignore", cat("expected a list of strings, got ", json_preview(q["ignore"])));
      } else {
        const json& list = q["ignore"];
        for (size_t i = 0; i < list.size(); ++i) {
          const json& e = list[i];
          const std::string where = cat(path, "ignore[", i, "]");
          if (!e.is_string()) {
            problem(where, cat("expected a string, got ", json_preview(e)));
            continue;
          }
          const std::string pat = e.get<std::string>();
          if (pat.rfind("re:", 0) == 0 && pat.size() - 3 > kMaxIgnorePatternChars) {
            problem(where, cat("regular expression ", json_preview(e), " is longer than ", kMaxIgnorePatternChars,
                               " characters"));
            continue;
          }
          out->ignore_patterns.push_back(pat);
          if (pat.rfind("re:", 0) == 0) {
            try {
              out->regexes_.emplace_back(pat.substr(3), std::regex::ECMAScript);
            } catch (const std::regex_error& err) {
              problem(where, cat("invalid regular expression ", json_preview(e, 200), ": ", err.what()));
            }
          } else {
            out->exact_.push_back(pat);
          }
        }
      }
    }
  }

  // Widths derived from several fields (products and sums) must stay far below INT_MAX: the
  // model code sizes buffers and indexes with them.  Fields already failing their own range
  // check read as 0 here and add nothing.
  void check_derived_widths(const std::string& p, const TextConfig& c) {
    const int64_t lim = TextConfig::kMaxDerivedWidth;
    auto check = [&](int64_t value, const std::string& what) {
      if (value > lim)
        problem(p.empty() ? "config" : p.substr(0, p.size() - 1), cat(what, " = ", value, " exceeds ", lim));
    };
    check(int64_t{c.kda.num_heads} * c.kda.head_dim,
          "linear_attn_config.num_heads * linear_attn_config.head_dim (the KDA width)");
    check(int64_t{c.qk_nope_head_dim} + c.qk_rope_head_dim,
          "qk_nope_head_dim + qk_rope_head_dim (the MLA q/k head width)");
    check(int64_t{c.kv_lora_rank} + c.qk_rope_head_dim, "kv_lora_rank + qk_rope_head_dim (the MLA cache width)");
    check(int64_t{c.qk_nope_head_dim} + c.v_head_dim, "qk_nope_head_dim + v_head_dim (the MLA kv_b head width)");
    check(int64_t{c.num_heads} * (int64_t{c.qk_nope_head_dim} + c.qk_rope_head_dim),
          "num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)");
    check(int64_t{c.num_heads} * (int64_t{c.qk_nope_head_dim} + c.v_head_dim),
          "num_attention_heads * (qk_nope_head_dim + v_head_dim)");
  }

  void parse_text(const json& t, const std::string& p, TextConfig* c) {
    const std::string mt = opt_str(t, p, "model_type", false).value_or("kimi_linear");
    if (mt != "kimi_linear") problem(p + "model_type", cat("'", mt, "' is not supported (expected kimi_linear)"));
    c->hidden_size = req_int(t, p, "hidden_size");
    c->num_layers = req_int(t, p, "num_hidden_layers", 1, 4096);
    c->vocab_size = req_int(t, p, "vocab_size");
    // A positive normal float; above 1 it would swamp the variance it regularises.
    c->rms_norm_eps = opt_float(t, p, "rms_norm_eps", FLT_MIN, 1.0).value_or(1e-5f);
    c->max_position_embeddings = opt_int(t, p, "max_position_embeddings", false, 1).value_or(1 << 20);
    c->tie_word_embeddings = opt_bool(t, p, "tie_word_embeddings").value_or(false);

    // Layer schedule from linear_attn_config (1-based lists).
    const std::string lp = p + "linear_attn_config.";
    if (!t.contains("linear_attn_config") || !t["linear_attn_config"].is_object()) {
      problem(lp.substr(0, lp.size() - 1), "missing (k3 needs the KDA/MLA layer schedule)");
    } else {
      const json& l = t["linear_attn_config"];
      c->kda.num_heads = req_int(l, lp, "num_heads");
      c->kda.head_dim = req_int(l, lp, "head_dim");
      c->kda.conv_kernel = opt_int(l, lp, "short_conv_kernel_size", false, 1, 64).value_or(4);
      if (auto lb = opt_num(l, lp, "gate_lower_bound", false)) {
        // A log-space decay bound: negative, and far from -inf (K3 uses -5).
        if (*lb >= 0) {
          problem(lp + "gate_lower_bound", cat("must be negative, got ", json_preview(l["gate_lower_bound"])));
        } else if (*lb < -1e4) {
          problem(lp + "gate_lower_bound",
                  cat("value ", json_preview(l["gate_lower_bound"]), " is outside [-10000, 0)"));
        } else {
          c->kda.gate_lower_bound = static_cast<float>(*lb);
        }
      }
      c->kda.full_rank_gate = opt_bool(l, lp, "use_full_rank_gate").value_or(false);
      c->kda.low_rank_gate_dim = c->kda.head_dim;
      // Bounds here only catch values that do not fit an int; the 1..num_layers check follows.
      const std::vector<int> kda = int_list(l, lp, "kda_layers");
      const std::vector<int> full = int_list(l, lp, "full_attn_layers");
      if (c->num_layers > 0) {
        std::vector<int> count(c->num_layers, 0);
        c->layer_kinds.assign(c->num_layers, LayerKind::kKda);
        auto mark = [&](const std::vector<int>& list, LayerKind kind, const char* key) {
          for (int one_based : list) {
            if (one_based < 1 || one_based > c->num_layers) {
              problem(lp + key, cat("layer ", one_based, " is outside 1..", c->num_layers, " (the lists are 1-based)"));
              continue;
            }
            count[one_based - 1]++;
            c->layer_kinds[one_based - 1] = kind;
          }
        };
        mark(kda, LayerKind::kKda, "kda_layers");
        mark(full, LayerKind::kMla, "full_attn_layers");
        for (int i = 0; i < c->num_layers; ++i) {
          if (count[i] == 0)
            problem(lp.substr(0, lp.size() - 1), cat("layer ", i + 1, " (1-based) is in neither kda_layers nor full_attn_layers"));
          if (count[i] > 1)
            problem(lp.substr(0, lp.size() - 1), cat("layer ", i + 1, " (1-based) is listed more than once"));
        }
      }
    }

    // MLA.
    c->num_heads = req_int(t, p, "num_attention_heads");
    if (auto kvh = opt_int(t, p, "num_key_value_heads", false, 1); kvh && *kvh != c->num_heads)
      problem(p + "num_key_value_heads", "must equal num_attention_heads for MLA");
    c->q_lora_rank = opt_int(t, p, "q_lora_rank", false, 1);
    c->kv_lora_rank = req_int(t, p, "kv_lora_rank");
    c->qk_nope_head_dim = req_int(t, p, "qk_nope_head_dim");
    c->qk_rope_head_dim = req_int(t, p, "qk_rope_head_dim", 0);
    c->v_head_dim = req_int(t, p, "v_head_dim");
    if (auto nope = opt_bool(t, p, "mla_use_nope"); !nope || !*nope)
      problem(p + "mla_use_nope", "k3 runs NoPE MLA only (Kimi K3 / Kimi Linear); rotary MLA is not supported");
    c->mla_output_gate = opt_bool(t, p, "mla_use_output_gate").value_or(false);

    // FFN and MoE.
    const std::string act = opt_str(t, p, "hidden_act", false).value_or("silu");
    if (act == "situ") {
      c->act = Activation::kSitu;
    } else if (act == "silu" || act == "swish") {
      c->act = Activation::kSilu;
    } else {
      problem(p + "hidden_act", cat("'", act, "' is not supported (expected situ or silu)"));
    }
    // SiTU's betas scale a sigmoid's argument: positive, and 1e6 is far past any useful sharpness.
    c->situ_beta = opt_float(t, p, "activation_situ_beta", FLT_MIN, 1e6).value_or(4.0f);
    c->situ_linear_beta = opt_float(t, p, "activation_situ_linear_beta", FLT_MIN, 1e6).value_or(25.0f);
    c->intermediate_size = req_int(t, p, "intermediate_size");
    c->first_k_dense_replace = opt_int(t, p, "first_k_dense_replace", false, 0).value_or(0);
    c->moe_layer_freq = opt_int(t, p, "moe_layer_freq", false, 1).value_or(1);
    c->num_experts = opt_int(t, p, "num_experts", false, 0).value_or(0);
    if (c->num_experts > 0) {
      c->top_k = req_int(t, p, "num_experts_per_token", 1, c->num_experts);
      c->num_shared_experts = opt_int(t, p, "num_shared_experts", false, 0).value_or(0);
      c->moe_intermediate_size = req_int(t, p, "moe_intermediate_size");
      c->latent_size = opt_int(t, p, "routed_expert_hidden_size", false, 1);
      c->latent_norm = opt_bool(t, p, "latent_moe_use_norm").value_or(false);
      if (c->latent_norm && !c->latent_size)
        problem(p + "latent_moe_use_norm", "set without routed_expert_hidden_size");
      c->renormalize = opt_bool(t, p, "moe_renormalize").value_or(true);
      // Multiplies the routed experts' output: positive (0 or less would drop or flip them), and
      // real models use single digits (K2: 2.827), so 1000 already means a broken config.
      c->routed_scaling_factor = opt_float(t, p, "routed_scaling_factor", FLT_MIN, 1000.0).value_or(1.0f);
      const std::string func = opt_str(t, p, "moe_router_activation_func", false).value_or("sigmoid");
      if (func != "sigmoid") problem(p + "moe_router_activation_func", cat("'", func, "' is not supported (expected sigmoid)"));
      const std::string method = opt_str(t, p, "topk_method", false).value_or("noaux_tc");
      if (method != "noaux_tc") problem(p + "topk_method", cat("'", method, "' is not supported (expected noaux_tc)"));
      const int groups = opt_int(t, p, "num_expert_group", false, 1).value_or(1);
      const int topk_group = opt_int(t, p, "topk_group", false, 1).value_or(1);
      if (groups != 1 || topk_group != 1)
        problem(p + "num_expert_group", cat("group-limited routing (", groups, " groups, top ", topk_group,
                                            ") is not supported; Kimi models use 1 group"));
    }
    check_derived_widths(p, *c);
    if (auto b = opt_int(t, p, "attn_res_block_size", false, 1)) c->attn_res_block_size = b;
    if (auto n = opt_int(t, p, "num_nextn_predict_layers", false, 0); n && *n > 0)
      problem(p + "num_nextn_predict_layers", "multi-token-prediction layers are not supported");
    if (t.contains("quantization_config") && !t["quantization_config"].is_null())
      parse_quant(t["quantization_config"], p + "quantization_config.", &c->quant);
  }
};

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json root = parse_json_document(json_text, source);
  if (!root.is_object()) fail(source, ": expected a JSON object");
  ConfigParser parser{source, {}};
  ModelConfig mc;
  mc.model_type = parser.opt_str(root, "", "model_type", true).value_or("");
  const json* text = nullptr;
  std::string text_path;
  if (mc.model_type == "kimi_k3") {
    mc.tensor_prefix = "language_model.";
    if (!root.contains("text_config") || !root["text_config"].is_object()) {
      parser.problem("text_config", "missing (a kimi_k3 config keeps the language model in text_config)");
    } else {
      text = &root["text_config"];
      text_path = "text_config.";
    }
    mc.has_vision = root.contains("vision_config") && root["vision_config"].is_object();
  } else if (mc.model_type == "kimi_linear") {
    text = &root;
  } else if (!mc.model_type.empty()) {
    parser.problem("model_type", cat("'", mc.model_type, "' is not supported (k3 runs kimi_k3 and kimi_linear)"));
  }
  if (text != nullptr) {
    parser.parse_text(*text, text_path, &mc.text);
    // Quantisation may also sit at the top level (transformers-5 re-serialisation copies it there).
    if (!mc.text.quant.enabled && text != &root && root.contains("quantization_config") &&
        !root["quantization_config"].is_null())
      parser.parse_quant(root["quantization_config"], "quantization_config.", &mc.text.quant);
    const json& ids = root.contains("eos_token_id") ? root : *text;
    // Special token ids index the embedding table: each must lie in the vocabulary.
    const int vocab = mc.text.vocab_size;
    const int max_id = vocab > 0 ? vocab - 1 : std::numeric_limits<int>::max();
    mc.bos_token_id = parser.opt_int(ids, "", "bos_token_id", false, 0, max_id).value_or(-1);
    mc.pad_token_id = parser.opt_int(ids, "", "pad_token_id", false, 0, max_id).value_or(-1);
    if (mc.model_type == "kimi_k3")
      mc.media_placeholder_token_id =
          parser.opt_int(root, "", "media_placeholder_token_id", false, 0, max_id).value_or(-1);
    if (ids.contains("eos_token_id") && !ids["eos_token_id"].is_null()) {
      const json& e = ids["eos_token_id"];
      auto add = [&](const json& x, const std::string& where) {
        int64_t id = 0;
        if (!x.is_number_integer())
          parser.problem(where, cat("expected an integer token id, got ", json_preview(x)));
        else if (!int_in_range(x, 0, max_id, &id))
          parser.problem(where, cat(json_preview(x), " is outside the vocabulary [0, ", max_id, "]"));
        else
          mc.stop_token_ids.push_back(static_cast<int>(id));
      };
      if (e.is_array()) {
        // An empty list would leave generation with no stop token at all.
        if (e.empty()) parser.problem("eos_token_id", "is an empty list (expected a token id or a list of them)");
        for (size_t i = 0; i < e.size(); ++i) add(e[i], cat("eos_token_id[", i, "]"));
      } else {
        add(e, "eos_token_id");
      }
    }
  }
  if (!parser.problems.empty()) {
    std::string msg = cat(source, ": unsupported or invalid configuration (", parser.problems.size(), " problem",
                          parser.problems.size() == 1 ? "" : "s", "):");
    for (const std::string& p : parser.problems) msg += "\n  " + p;
    throw Error(msg);
  }
  return mc;
}

ModelConfig load_model_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_model_config(read_text_file(path), path);
}

}  // namespace k3
