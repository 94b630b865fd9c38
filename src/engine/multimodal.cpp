#include "engine/multimodal.h"

#include "base/error.h"
#include "vision/image_decode.h"
#include "vision/media_prompt.h"

namespace k3 {

std::unique_ptr<VisionModel> load_vision_for(const Model& model, const std::string& dir) {
  K3_CHECK(model.config().has_vision, dir,
           ": this model has no vision tower (config.json has no vision_config), so it cannot take images");
  auto vision = VisionModel::load(dir);
  K3_CHECK(vision->text_hidden_size() == model.text().hidden_size, dir, ": the vision projector outputs ",
           vision->text_hidden_size(), " values per token but the text model's hidden_size is ",
           model.text().hidden_size);
  return vision;
}

int32_t media_pad_id(const Model& model, const Tokenizer& tokenizer) {
  const int id = model.config().media_placeholder_token_id;
  K3_CHECK(id >= 0 && id < model.text().vocab_size,
           "the model's config.json has no valid media_placeholder_token_id, so images cannot be placed");
  const auto tok = tokenizer.special_id(kMediaPad);
  K3_CHECK(tok.has_value() && *tok == id, "the tokenizer's ", kMediaPad, " (",
           tok ? std::to_string(*tok) : std::string("missing"), ") differs from media_placeholder_token_id ", id);
  return id;
}

PromptImage encode_prompt_image(const VisionModel& vision, const Image& image, std::string source) {
  EncodedImages e = vision.encode_images(std::span<const Image>(&image, 1));
  PromptImage p;
  p.source = std::move(source);
  p.width = image.width;
  p.height = image.height;
  p.prompt = std::move(e.prompts.at(0));
  p.rows = std::move(e.rows);
  return p;
}

PromptImage encode_image_file(const VisionModel& vision, const std::string& path) {
  Image image = load_image_file(path);
  try {
    return encode_prompt_image(vision, image, path);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

}  // namespace k3
