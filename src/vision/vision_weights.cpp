#include "vision/vision_weights.h"

#include <cstring>
#include <set>
#include <string>

#include "base/error.h"
#include "base/numeric_types.h"
#include "vision/json_fields.h"

namespace k3 {
namespace {

class VisionBinder {
 public:
  VisionBinder(const Checkpoint& ckpt, VisionWeights* out) : ckpt_(ckpt), out_(out) {}
  std::vector<std::string> problems;
  std::set<std::string> used;

  // A BF16 or F32 tensor of `shape`, viewed as a [rows, cols] matrix.
  Matrix matrix(const std::string& name, std::vector<int64_t> shape, int64_t rows, int64_t cols) {
    Matrix m;
    const TensorView* t = get(name, shape, true);
    if (t == nullptr) return m;
    m.format = t->dtype == DType::kBF16 ? WeightFormat::kBF16 : WeightFormat::kF32;
    m.rows = rows;
    m.cols = cols;
    m.data = aligned(*t);
    return m;
  }

  std::vector<float> vec(const std::string& name, std::vector<int64_t> shape) {
    const TensorView* t = get(name, shape, false);
    if (t == nullptr) return {};
    std::vector<float> v(static_cast<size_t>(t->numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      if (t->dtype == DType::kF32) {
        std::memcpy(&v[i], t->data + i * 4, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, t->data + i * 2, 2);
        v[i] = t->dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
    return v;
  }

  // Whether the checkpoint holds any tensor whose name starts with `prefix`.
  bool has_prefix(const std::string& prefix) const {
    const auto it = ckpt_.tensors().lower_bound(prefix);
    return it != ckpt_.tensors().end() && it->first.starts_with(prefix);
  }

  // Tensors under the vision prefixes that nothing bound.
  void report_unused() {
    for (const auto& [name, view] : ckpt_.tensors())
      if ((name.starts_with("vision_tower.") || name.starts_with("mm_projector.")) && !used.count(name))
        problems.push_back(cat(*view->file, ": unexpected tensor '", name, "' ", view->shape_str(),
                               " (the released tower has no such parameter; k3 would ignore it)"));
  }

 private:
  const TensorView* get(const std::string& name, const std::vector<int64_t>& shape, bool matrix) {
    TensorView want;
    want.shape = shape;
    const TensorView* t = ckpt_.find(name);
    if (t == nullptr) {
      problems.push_back(cat("missing tensor '", name, "' (expected BF16 ", want.shape_str(), ")"));
      return nullptr;
    }
    used.insert(name);
    bool ok = true;
    if (t->shape != shape) {
      problems.push_back(
          cat(*t->file, ": tensor '", name, "' has shape ", t->shape_str(), ", expected ", want.shape_str()));
      ok = false;
    }
    const bool dtype_ok = t->dtype == DType::kBF16 || t->dtype == DType::kF32 || (!matrix && t->dtype == DType::kF16);
    if (!dtype_ok) {
      problems.push_back(cat(*t->file, ": tensor '", name, "' has dtype ", dtype_name(t->dtype), ", expected ",
                             matrix ? "BF16 or F32" : "BF16, F16 or F32"));
      ok = false;
    }
    return ok ? t : nullptr;
  }

  const void* aligned(const TensorView& t) {
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0) return t.data;
    auto buf = std::make_unique<uint8_t[]>(t.nbytes);
    std::memcpy(buf.get(), t.data, t.nbytes);
    out_->owned.push_back(std::move(buf));
    return out_->owned.back().get();
  }

  const Checkpoint& ckpt_;
  VisionWeights* out_;
};

}  // namespace

VisionWeights bind_vision_weights(const Checkpoint& ckpt, const VisionConfig& c) {
  VisionWeights w;
  VisionBinder b(ckpt, &w);
  const int64_t D = c.hidden_size, Q = c.qkv_hidden_size, I = c.intermediate_size, p = c.patch_size;
  const int64_t M = static_cast<int64_t>(c.mm_hidden_size) * c.merge_cells(), T = c.text_hidden_size;
  w.patch_embed = b.matrix("vision_tower.patch_embed.proj.weight", {D, 3, p, p}, D, 3 * p * p);
  w.pos_emb = b.vec("vision_tower.patch_embed.pos_emb.weight", {c.pos_emb_height, c.pos_emb_width, D});
  // A block with no tensors at all ends the list with one problem: vt_num_hidden_layers is a
  // config number (up to 2^30), and a block slot and six "missing tensor" lines for each of them
  // ran out of memory.
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string pre = cat("vision_tower.encoder.blocks.", l, ".");
    if (!b.has_prefix(pre)) {
      b.problems.push_back(cat("vision_config.vt_num_hidden_layers is ", c.num_layers,
                               " but the checkpoint has no tensors for vision block ", l, " (",
                               pre, "*); it has ", l, " block", l == 1 ? "" : "s"));
      break;
    }
    VisionBlockWeights& B = w.blocks.emplace_back();
    B.norm0 = b.vec(pre + "norm0.weight", {D});
    B.norm1 = b.vec(pre + "norm1.weight", {D});
    B.wqkv = b.matrix(pre + "wqkv.weight", {3 * Q, D}, 3 * Q, D);
    B.wo = b.matrix(pre + "wo.weight", {D, Q}, D, Q);
    B.fc0 = b.matrix(pre + "mlp.fc0.weight", {I, D}, I, D);
    B.fc1 = b.matrix(pre + "mlp.fc1.weight", {D, I}, D, I);
  }
  w.final_norm = b.vec("vision_tower.encoder.final_layernorm.weight", {D});
  w.proj0 = b.matrix("mm_projector.proj.0.weight", {M, M}, M, M);
  w.proj2 = b.matrix("mm_projector.proj.2.weight", {T, M}, T, M);
  w.post_norm = b.vec("mm_projector.post_norm.weight", {T});
  b.report_unused();
  throw_if_problems(b.problems, ckpt.dir(), "vision weights");
  return w;
}

}  // namespace k3
