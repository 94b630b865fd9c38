#include "vision/vision_model.h"

#include "base/error.h"
#include "base/log.h"
#include "vision/projector.h"

namespace k3 {

VisionModel::VisionModel(VisionConfig config, MediaProcConfig media, std::unique_ptr<Checkpoint> ckpt,
                         VisionWeights weights)
    : config_(config), media_(media), checkpoint_(std::move(ckpt)), weights_(std::move(weights)) {}

std::unique_ptr<VisionModel> VisionModel::load(const std::string& dir) {
  VisionConfig config = load_vision_config(dir);
  MediaProcConfig media = load_media_proc_config(dir);
  K3_CHECK(media.patch_size == config.patch_size, dir, ": preprocessor_config.json patch_size (", media.patch_size,
           ") differs from vision_config.patch_size (", config.patch_size, ")");
  K3_CHECK(media.merge_kernel_size == config.merge_h && media.merge_kernel_size == config.merge_w, dir,
           ": preprocessor_config.json merge_kernel_size (", media.merge_kernel_size,
           ") differs from vision_config.merge_kernel_size");
  // The longest grid side a resized image can get (after padding to whole merge cells) must fit
  // the tower, or every large image fails at encode time with a message about its grid.
  const int m = media.merge_kernel_size, max_grid_side = (media.patch_limit_on_one_side + m - 1) / m * m;
  K3_CHECK(max_grid_side <= config.rope_max_side, dir, ": preprocessor_config.json patch_limit_on_one_side (",
           media.patch_limit_on_one_side, ") lets images reach ", max_grid_side,
           " patches a side; the vision tower takes at most ", config.rope_max_side);
  auto ckpt = std::make_unique<Checkpoint>(dir);
  VisionWeights weights = bind_vision_weights(*ckpt, config);
  log_info("vision tower: ", config.num_layers, " blocks, width ", config.hidden_size, ", ", config.num_heads,
           " heads of ", config.head_dim(), ", projector to ", config.text_hidden_size);
  return std::unique_ptr<VisionModel>(new VisionModel(config, media, std::move(ckpt), std::move(weights)));
}

std::vector<float> VisionModel::encode(std::span<const float> pixel_values, std::span<const GridThw> grids,
                                       VisionTrace* trace) const {
  check_vision_grids(config_, grids);
  int64_t patches = 0;
  for (const GridThw& g : grids) patches += g.patches();
  K3_CHECK(static_cast<int64_t>(pixel_values.size()) == patches * config_.patch_dim(), "vision: pixel_values has ",
           pixel_values.size(), " values; the grids need ", patches, " patches of ", config_.patch_dim());
  const std::vector<float> enc = run_vision_tower(config_, weights_, pixel_values.data(), grids, trace);
  std::vector<float> merged = merge_sd2_tpool(config_, enc.data(), grids);
  std::vector<float> out = run_projector(config_, weights_, merged);
  if (trace != nullptr) trace->merged = std::move(merged);
  return out;
}

std::vector<float> VisionModel::encode(std::span<const PreprocessedImage> images, VisionTrace* trace) const {
  std::vector<GridThw> grids;
  for (const PreprocessedImage& im : images) grids.push_back(im.grid());
  const std::vector<float> pixels = pack_pixel_values(images);
  return encode(pixels, grids, trace);
}

EncodedImages VisionModel::encode_images(std::span<const Image> images) const {
  std::vector<PreprocessedImage> pre;
  EncodedImages out;
  for (const Image& image : images) {
    pre.push_back(preprocess(image));
    out.prompts.push_back(image_media_prompt(pre.back().width, pre.back().height, pre.back().num_tokens()));
  }
  if (!pre.empty()) out.rows = encode(pre);
  return out;
}

std::vector<float> pack_pixel_values(std::span<const PreprocessedImage> images) {
  std::vector<float> out;
  for (const PreprocessedImage& im : images) out.insert(out.end(), im.pixel_values.begin(), im.pixel_values.end());
  return out;
}

}  // namespace k3
