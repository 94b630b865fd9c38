#include "model/weights.h"

#include <cstring>
#include <set>

#include "base/error.h"
#include "base/numeric_types.h"
#include "kernels/mxfp4.h"

namespace k3 {
namespace {

class Binder {
 public:
  Binder(const Checkpoint& ckpt, const ModelConfig& cfg, const BindOptions& opt, ModelWeights* out)
      : ckpt_(ckpt), cfg_(cfg), opt_(opt), out_(out) {}

  // The first kMaxKeptProblems problems, and how many there were in all.  A config naming a
  // million experts against a small checkpoint would otherwise build millions of messages.
  static constexpr size_t kMaxKeptProblems = 60;
  std::vector<std::string> problems;
  size_t problem_count = 0;
  std::set<std::string> used;

  void problem(std::string what) {
    ++problem_count;
    if (problems.size() < kMaxKeptProblems) problems.push_back(std::move(what));
  }

  // A Linear module: "<module>.weight" (bf16/f32) or "<module>.weight_packed" + "weight_scale" (MXFP4).
  Matrix linear(const std::string& module, int64_t rows, int64_t cols) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.row_split = true;  // the latency layout splits every product by output rows, but for the few below
    const TensorView* dense = ckpt_.find(module + ".weight");
    const TensorView* packed = ckpt_.find(module + ".weight_packed");
    const TensorView* scale = ckpt_.find(module + ".weight_scale");
    if (dense == nullptr && packed == nullptr) {
      if (cfg_.text.quant.is_quantized(module))
        missing(module + ".weight_packed", cat("U8 [", rows, ", ", cols / 2, "] (mxfp4-packed per quantization_config)"));
      else
        missing(module + ".weight", cat("BF16 [", rows, ", ", cols, "]"));
      return m;
    }
    if (dense != nullptr) {
      used.insert(dense->name);
      if (!check_shape(*dense, {rows, cols})) return m;
      if (dense->dtype == DType::kBF16) {
        m.format = WeightFormat::kBF16;
      } else if (dense->dtype == DType::kF32) {
        m.format = WeightFormat::kF32;
      } else {
        wrong_dtype(*dense, "BF16 or F32");
        return m;
      }
      m.data = aligned(*dense);
      return m;
    }
    used.insert(packed->name);
    if (cols % 32 != 0) {
      problem(cat(module, ": MXFP4 needs the input width (", cols, ") to be a multiple of 32"));
      return m;
    }
    if (scale == nullptr) {
      missing(module + ".weight_scale", cat("U8 [", rows, ", ", cols / 32, "] (E8M0 scales)"));
      return m;
    }
    used.insert(scale->name);
    // Both shapes are checked (each reports its own mismatch) before they are combined.
    const bool packed_ok = check_shape(*packed, {rows, cols / 2});
    const bool scale_ok = check_shape(*scale, {rows, cols / 32});
    bool ok = packed_ok && scale_ok;
    if (packed->dtype != DType::kU8) ok = wrong_dtype(*packed, "U8");
    if (scale->dtype != DType::kU8) ok = wrong_dtype(*scale, "U8");
    if (!ok) return m;
    bool zero_free = false;
    // In memory the scan is cheap; a mapped or streamed checkpoint's experts are checked when
    // first read (model/weight_store.h), so that loading reads none of their bytes.
    if (opt_.verify_mxfp4_scales && ckpt_.residency() == Residency::kMemory) {
      const Mxfp4ScaleScan scan = scan_mxfp4_scales(scale->data, scale->nbytes);
      const int64_t bad = scan.first_nan;
      zero_free = !scan.has_zero;
      if (bad >= 0) {
        problem(cat(*scale->file, ": tensor '", scale->name, "': E8M0 scale 0xFF (NaN) at row ", bad / (cols / 32),
                    ", group ", bad % (cols / 32)));
        return m;
      }
    }
    m.format = WeightFormat::kMxfp4;
    m.data = packed->data;
    m.scales = scale->data;
    m.scales_zero_free = zero_free;
    return m;
  }

  // A small parameter vector widened to fp32; `shapes` lists the accepted shapes, `keep` how many
  // leading values are live (A_log stores head_dim entries, only num_heads are used) and
  // `keep_why` says what they are for the error when the tensor holds fewer.
  Vec vec(const std::string& name, const std::vector<std::vector<int64_t>>& shapes, int64_t keep = -1,
          const std::string& keep_why = "") {
    const TensorView* t = ckpt_.find(name);
    if (t == nullptr) {
      missing(name, cat("[", shapes.front().empty() ? 0 : shapes.front()[0], "] fp32/bf16"));
      return {};
    }
    used.insert(name);
    bool shape_ok = false;
    for (const auto& s : shapes) shape_ok |= t->shape == s;
    if (!shape_ok) {
      check_shape(*t, shapes.front());
      return {};
    }
    // An accepted shape can still hold fewer values than `keep` (A_log stored as [head_dim] with
    // num_heads > head_dim); reading past it would read another tensor's bytes.
    if (keep > t->numel()) {
      problem(cat(*t->file, ": tensor '", name, "' has shape ", t->shape_str(), " (", t->numel(),
                  " values) but the config needs ", keep, keep_why.empty() ? "" : " (", keep_why,
                  keep_why.empty() ? "" : ")"));
      return {};
    }
    const int64_t n = keep >= 0 ? keep : t->numel();
    Vec v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      switch (t->dtype) {
        case DType::kF32: {
          float f;
          std::memcpy(&f, t->data + i * 4, 4);
          v[i] = f;
          break;
        }
        case DType::kBF16: {
          uint16_t h;
          std::memcpy(&h, t->data + i * 2, 2);
          v[i] = bf16_to_f32(h);
          break;
        }
        case DType::kF16: {
          uint16_t h;
          std::memcpy(&h, t->data + i * 2, 2);
          v[i] = f16_to_f32(h);
          break;
        }
        default: wrong_dtype(*t, "F32, BF16 or F16"); return {};
      }
    }
    return v;
  }

  Vec vec1(const std::string& name, int64_t n) { return vec(name, {{n}}); }

  // AttnRes pseudo-query with the norm gain folded in.
  Vec res_query(const std::string& norm, const std::string& proj, int64_t d) {
    Vec g = vec1(norm, d);
    Vec w = vec(proj, {{1, d}, {d}});
    if (g.size() != static_cast<size_t>(d) || w.size() != static_cast<size_t>(d)) return {};
    for (int64_t i = 0; i < d; ++i) g[i] *= w[i];
    return g;
  }

 private:
  void missing(const std::string& name, const std::string& expected) {
    problem(cat("missing tensor '", name, "' (expected ", expected, ")"));
  }
  bool wrong_dtype(const TensorView& t, const char* expected) {
    problem(cat(*t.file, ": tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", expected ", expected));
    return false;
  }
  bool check_shape(const TensorView& t, const std::vector<int64_t>& want) {
    if (t.shape == want) return true;
    TensorView w;
    w.shape = want;
    problem(cat(*t.file, ": tensor '", t.name, "' has shape ", t.shape_str(), ", expected ", w.shape_str()));
    return false;
  }
  // Returns the data pointer, copying the tensor if it is not naturally aligned in the file.
  const void* aligned(const TensorView& t) {
    const size_t a = dtype_size(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % a == 0) return t.data;
    auto buf = std::make_unique<uint8_t[]>(t.nbytes + 64);
    uint8_t* p = buf.get();
    while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
    std::memcpy(p, t.data, t.nbytes);
    out_->owned.push_back(std::move(buf));
    return p;
  }

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const BindOptions& opt_;
  ModelWeights* out_;
};

}  // namespace

ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& config, const BindOptions& options) {
  const TextConfig& c = config.text;
  ModelWeights w;
  Binder b(ckpt, config, options, &w);
  const std::string top = config.tensor_prefix + "model.";
  const int64_t d = c.hidden_size;

  w.embed = b.linear(top + "embed_tokens", c.vocab_size, d);
  w.embed.row_split = false;  // read a row per token, never multiplied
  w.lm_head = c.tie_word_embeddings ? w.embed : b.linear(config.tensor_prefix + "lm_head", c.vocab_size, d);
  w.lm_head.row_split = true;
  w.final_norm = b.vec1(top + "norm.weight", d);
  if (c.attn_res_block_size)
    w.out_res_query = b.res_query(top + "output_attn_res_norm.weight", top + "output_attn_res_proj.weight", d);

  const int64_t H = c.kda.num_heads, D = c.kda.head_dim, P = c.kda_width(), W = c.kda.conv_kernel;
  const int64_t mh = c.num_heads, qk = c.mla_qk_head_dim();
  w.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string p = cat(top, "layers.", l, ".");
    L.kind = c.layer_kinds[l];
    L.input_norm = b.vec1(p + "input_layernorm.weight", d);
    L.post_norm = b.vec1(p + "post_attention_layernorm.weight", d);
    if (c.attn_res_block_size) {
      L.attn_res_query = b.res_query(p + "self_attention_res_norm.weight", p + "self_attention_res_proj.weight", d);
      L.mlp_res_query = b.res_query(p + "mlp_res_norm.weight", p + "mlp_res_proj.weight", d);
    }
    const std::string a = p + "self_attn.";
    if (L.kind == LayerKind::kKda) {
      KdaWeights& k = L.kda;
      k.q = b.linear(a + "q_proj", P, d);
      k.k = b.linear(a + "k_proj", P, d);
      k.v = b.linear(a + "v_proj", P, d);
      k.q_conv = b.vec(a + "q_conv1d.weight", {{P, 1, W}, {P, W}});
      k.k_conv = b.vec(a + "k_conv1d.weight", {{P, 1, W}, {P, W}});
      k.v_conv = b.vec(a + "v_conv1d.weight", {{P, 1, W}, {P, W}});
      k.f_a = b.linear(a + "f_a_proj", D, d);
      k.f_b = b.linear(a + "f_b_proj", P, D);
      k.b = b.linear(a + "b_proj", H, d);
      k.a_log = b.vec(a + "A_log", {{D}, {H}, {1, 1, H, 1}}, H, cat("one per KDA head, num_heads = ", H));
      k.dt_bias = b.vec1(a + "dt_bias", P);
      if (c.kda.full_rank_gate) {
        k.g = b.linear(a + "g_proj", P, d);
      } else {
        k.g_a = b.linear(a + "g_a_proj", c.kda.low_rank_gate_dim, d);
        k.g_b = b.linear(a + "g_b_proj", P, c.kda.low_rank_gate_dim);
      }
      k.o_norm = b.vec1(a + "o_norm.weight", D);
      k.o = b.linear(a + "o_proj", d, P);
    } else {
      MlaWeights& m = L.mla;
      if (c.q_lora_rank) {
        m.q_a = b.linear(a + "q_a_proj", *c.q_lora_rank, d);
        m.q_a_norm = b.vec1(a + "q_a_layernorm.weight", *c.q_lora_rank);
        m.q_b = b.linear(a + "q_b_proj", mh * qk, *c.q_lora_rank);
      } else {
        m.q_b = b.linear(a + "q_proj", mh * qk, d);
      }
      m.kv_a = b.linear(a + "kv_a_proj_with_mqa", c.mla_cache_width(), d);
      m.kv_a_norm = b.vec1(a + "kv_a_layernorm.weight", c.kv_lora_rank);
      m.kv_b = b.linear(a + "kv_b_proj", mh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      m.kv_b.row_split = false;  // used a head at a time, inside the attention's pool tasks
      if (c.mla_output_gate) m.g = b.linear(a + "g_proj", mh * c.v_head_dim, d);
      m.o = b.linear(a + "o_proj", d, mh * c.v_head_dim);
    }
    L.moe = c.is_moe_layer(l);
    if (!L.moe) {
      const std::string f = p + "mlp.";
      L.dense = {b.linear(f + "gate_proj", c.intermediate_size, d), b.linear(f + "up_proj", c.intermediate_size, d),
                 b.linear(f + "down_proj", d, c.intermediate_size)};
    } else {
      MoeWeights& m = L.moe_w;
      const std::string f = p + "block_sparse_moe.";
      m.router = b.linear(f + "gate", c.num_experts, d);
      m.router.row_split = false;  // small, and every rank routes
      m.router_bias = b.vec1(f + "gate.e_score_correction_bias", c.num_experts);
      const int64_t inner = c.latent_size.value_or(d);
      if (c.latent_size) {
        m.latent_down = b.linear(f + "routed_expert_down_proj", inner, d);
        m.latent_up = b.linear(f + "routed_expert_up_proj", d, inner);
        if (c.latent_norm) m.latent_norm = b.vec1(f + "routed_expert_norm.weight", inner);
      }
      // The router has one row per expert.  If it did not bind (missing, or a shape that
      // disagrees with num_experts, already reported), skip the experts: checking a bogus count
      // such as 1,000,000 would allocate and look up millions of entries before failing anyway.
      if (!m.router.empty()) m.experts.resize(c.num_experts);
      for (int e = 0; e < static_cast<int>(m.experts.size()); ++e) {
        const std::string x = cat(f, "experts.", e, ".");
        m.experts[e] = {b.linear(x + "w1", c.moe_intermediate_size, inner),
                        b.linear(x + "w3", c.moe_intermediate_size, inner),
                        b.linear(x + "w2", inner, c.moe_intermediate_size)};
      }
      if (c.num_shared_experts > 0) {
        const int64_t s = static_cast<int64_t>(c.moe_intermediate_size) * c.num_shared_experts;
        m.shared = {b.linear(f + "shared_experts.gate_proj", s, d), b.linear(f + "shared_experts.up_proj", s, d),
                    b.linear(f + "shared_experts.down_proj", d, s)};
      }
    }
  }

  if (b.problem_count > 0) {
    const size_t n = b.problem_count;
    std::string msg = cat(ckpt.dir(), ": the checkpoint does not match its config (", n, " problem", n == 1 ? "" : "s",
                          "):");
    const size_t show = b.problems.size();  // (at most kMaxKeptProblems)
    for (size_t i = 0; i < show; ++i) msg += "\n  " + b.problems[i];
    if (show < n) msg += cat("\n  ... and ", n - show, " more");
    throw Error(msg);
  }
  auto ends_with = [](const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  for (const auto& [name, view] : ckpt.tensors()) {
    if (b.used.count(name) == 0) {
      w.unused_tensors.push_back(name);
      continue;
    }
    w.total_bytes += view->nbytes;
    ++w.tensor_count;
    if (ends_with(name, ".weight_packed")) w.total_params += 2 * static_cast<uint64_t>(view->numel());
    else if (!ends_with(name, ".weight_scale")) w.total_params += static_cast<uint64_t>(view->numel());
  }
  return w;
}

}  // namespace k3
