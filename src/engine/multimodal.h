// Images in language-model prompts, shared by `k3 generate --image`, ChatSession and `k3 chat`:
// loading a checkpoint's vision tower with a clear error when it has none, checking that tower,
// text model and tokenizer agree (width, <|media_pad|> id), and encoding images one by one into
// what a prompt needs (vision/media_prompt.h: the framing text and the pad embedding rows).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/k3_model.h"
#include "text/tokenizer.h"
#include "vision/image.h"
#include "vision/vision_model.h"

namespace k3 {

// DIR's vision tower for `model`; throws k3::Error saying so when DIR has no vision_config, or
// when the tower's projector width differs from the text model's hidden size.
std::unique_ptr<VisionModel> load_vision_for(const Model& model, const std::string& dir);

// The <|media_pad|> token id of the model (config media_placeholder_token_id), checked against
// the tokenizer's special token of that name.
int32_t media_pad_id(const Model& model, const Tokenizer& tokenizer);

// One image encoded for a prompt.
struct PromptImage {
  std::string source;       // for messages: a file name or label
  int width = 0, height = 0;
  MediaPrompt prompt;       // framing text with prompt.num_pads pads
  std::vector<float> rows;  // [num_pads, text_hidden]
};

// Preprocesses and encodes one decoded image (a packed pass per call; results equal packed runs).
PromptImage encode_prompt_image(const VisionModel& vision, const Image& image, std::string source);
// Reads, decodes and encodes an image file; errors name the file.
PromptImage encode_image_file(const VisionModel& vision, const std::string& path);

}  // namespace k3
