#include "vision/media_config.h"

#include <cmath>
#include <limits>

#include "base/error.h"
#include "io/json_document.h"
#include "io/checkpoint.h"
#include "vision/json_fields.h"

namespace k3 {

MediaProcConfig parse_media_proc_config(const std::string& json_text, const std::string& source) {
  const nlohmann::json root = parse_json_document(json_text, source);
  K3_CHECK(root.is_object(), source, ": not a JSON object");
  const bool nested = root.contains("media_proc_cfg");
  JsonFields top(root, "");
  const nlohmann::json& cfg = nested ? top.object("media_proc_cfg") : root;
  JsonFields f(cfg, nested ? "media_proc_cfg." : "");
  MediaProcConfig c;
  c.in_patch_limit = f.integer("in_patch_limit", c.in_patch_limit);
  // Bounded so that patch_limit_on_one_side * patch_size (the longest side in pixels) fits an int.
  c.patch_limit_on_one_side = f.integer("patch_limit_on_one_side", c.patch_limit_on_one_side, 1, 1 << 16);
  c.patch_size = f.integer("patch_size", c.patch_size, 1, 1024);
  c.merge_kernel_size = f.integer("merge_kernel_size", c.merge_kernel_size, 1, 16);
  const auto mean = f.numbers("image_mean", {0.5, 0.5, 0.5}, 3);
  const auto stdv = f.numbers("image_std", {0.5, 0.5, 0.5}, 3);
  // The normalisation runs in float32: a mean or std that is out of float range (1e39), or a
  // std so small that (x - mean) / std overflows (1e-50 rounds to 0), turned every pixel into
  // inf and the embeddings into NaN without a word.
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  bool std_ok = true, mean_ok = true;
  for (int i = 0; i < 3; ++i) {
    const bool m_ok = std::abs(mean[i]) <= kFloatMax, s_ok = stdv[i] > 0 && stdv[i] <= kFloatMax;
    mean_ok = mean_ok && m_ok;
    std_ok = std_ok && s_ok;
    if (!m_ok || !s_ok) continue;  // (converting an out-of-range double to float is undefined)
    c.image_mean[i] = static_cast<float>(mean[i]);
    c.image_std[i] = static_cast<float>(stdv[i]);
    const float lo = (0.0f - c.image_mean[i]) / c.image_std[i], hi = (1.0f - c.image_mean[i]) / c.image_std[i];
    std_ok = std_ok && std::isfinite(lo) && std::isfinite(hi);
  }
  if (!mean_ok) f.problem("image_mean", "entries must be finite float32 numbers");
  if (!std_ok)
    f.problem("image_std", "entries must be positive, and large enough that (x - mean) / std stays finite in float32");
  if (cfg.is_object() && cfg.contains("fixed_output_tokens") && !cfg["fixed_output_tokens"].is_null())
    f.problem("fixed_output_tokens", "only null is supported (the released value)");
  const nlohmann::json& bg = f.object("transparent_bg_config");
  JsonFields b(bg, f.path() + "transparent_bg_config.");
  b.choice("pattern", {"chessboard"}, "chessboard");
  c.chessboard_square_size = b.integer("chessboard_square_size", c.chessboard_square_size, 1, 1 << 16);
  c.chessboard_white_on_top_left = b.boolean("chessboard_square_on_top_left", true);
  c.chessboard_white_value = b.integer("chessboard_white_value", c.chessboard_white_value, 0, 255);
  c.chessboard_gray_value = b.integer("chessboard_gray_value", c.chessboard_gray_value, 0, 255);
  c.fill_after_resize =
      f.choice("transparent_bg_fill_stage", {"after_resize", "before_resize"}, "after_resize") == "after_resize";

  std::vector<std::string> problems = top.problems();
  for (auto* r : {&f, &b}) problems.insert(problems.end(), r->problems().begin(), r->problems().end());
  throw_if_problems(problems, source, "media_proc_cfg");
  return c;
}

MediaProcConfig load_media_proc_config(const std::string& dir) {
  const std::string path = dir + "/preprocessor_config.json";
  if (!file_exists(path)) return {};
  return parse_media_proc_config(read_text_file(path), path);
}

}  // namespace k3
