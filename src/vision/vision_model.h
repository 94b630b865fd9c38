// Kimi K3's vision path as one object: a checkpoint directory's vision_config, media_proc_cfg
// (preprocessor_config.json) and vision_tower.* / mm_projector.* tensors, turning decoded images
// into language-model embedding rows (one per <|media_pad|>).
//
//   auto vision = VisionModel::load(dir);
//   PreprocessedImage a = vision->preprocess(load_image_file("cat.png"));
//   std::vector<float> rows = vision->encode({&a, 1});   // [a.num_tokens(), text_hidden]
//
// Several images passed to one encode() run packed in one sequence with block-diagonal
// attention; the rows come out in image order and equal separate runs.  The work runs on the
// global thread pool (base/thread_pool.h: K3_THREADS, set_num_threads()).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "vision/image.h"
#include "vision/media_config.h"
#include "vision/media_prompt.h"
#include "vision/preprocess.h"
#include "vision/vision_config.h"
#include "vision/vision_tower.h"
#include "vision/vision_weights.h"

namespace k3 {

// What a prompt needs from its images: the media prompt of each (in order; the text for
// ChatOptions::image_prompts) and the embedding rows of all their pads.
struct EncodedImages {
  std::vector<MediaPrompt> prompts;
  std::vector<float> rows;  // [sum of prompts[i].num_pads, text_hidden]
};

class VisionModel {
 public:
  // Reads DIR/config.json (vision_config), DIR/preprocessor_config.json (released defaults when
  // absent) and binds the tensors.  Throws k3::Error naming every problem.
  static std::unique_ptr<VisionModel> load(const std::string& dir);

  const VisionConfig& config() const { return config_; }
  const MediaProcConfig& media_config() const { return media_; }
  const VisionWeights& weights() const { return weights_; }
  int text_hidden_size() const { return config_.text_hidden_size; }

  PreprocessedImage preprocess(const Image& image) const { return preprocess_image(image, media_); }

  // Tower + merge + projector over images packed in order: [sum of num_tokens, text_hidden].
  std::vector<float> encode(std::span<const PreprocessedImage> images, VisionTrace* trace = nullptr) const;
  // Preprocesses and encodes decoded images in one packed pass, with their prompts.
  EncodedImages encode_images(std::span<const Image> images) const;
  // The same from raw inputs: pixel_values [sum of patches, 3, p, p] and one grid per image.
  std::vector<float> encode(std::span<const float> pixel_values, std::span<const GridThw> grids,
                            VisionTrace* trace = nullptr) const;

 private:
  VisionModel(VisionConfig config, MediaProcConfig media, std::unique_ptr<Checkpoint> ckpt, VisionWeights weights);

  VisionConfig config_;
  MediaProcConfig media_;
  std::unique_ptr<Checkpoint> checkpoint_;
  VisionWeights weights_;
};

// Concatenates the pixel_values of several images in order (the packed tower input).
std::vector<float> pack_pixel_values(std::span<const PreprocessedImage> images);

}  // namespace k3
