// The checkpoint configs: the input is config.json text, given to the text model's parser
// (model/k3_config.h) and the vision tower's (vision/vision_config.h), and also read as
// preprocessor_config.json (vision/media_config.h).
// Properties: each parser returns or throws k3::Error; an accepted text config describes a model
// whose shapes are positive, and its quantization ignore patterns match module names quickly (a
// pattern that backtracks for seconds is a timeout); an accepted vision config's head size
// divides its width.
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_support.h"
#include "io/json_document.h"
#include "model/k3_config.h"
#include "vision/media_config.h"
#include "vision/vision_config.h"

using namespace k3;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  try {
    const ModelConfig c = parse_model_config(text, "config.json");
    K3_FUZZ_ASSERT(c.text.hidden_size > 0 && c.text.num_layers > 0 && c.text.vocab_size > 0,
                   "accepted a text config with hidden_size ", c.text.hidden_size, ", ", c.text.num_layers,
                   " layers, vocab_size ", c.text.vocab_size);
    // The quantization ignore list (exact names and "re:" patterns) as weight binding asks it.
    for (const char* module : {"language_model.model.layers.0.mlp.experts.7.down_proj",
                               "language_model.model.layers.12.self_attn.q_a_proj", "language_model.lm_head"})
      c.text.quant.is_quantized(module);
  } catch (const Error&) {
  }
  try {
    const VisionConfig v = parse_vision_config(parse_json_document(text, "config.json"), "config.json");
    K3_FUZZ_ASSERT(v.num_heads > 0 && v.qkv_hidden_size % v.num_heads == 0 && v.head_dim() > 0,
                   "accepted a vision config with ", v.num_heads, " heads over ", v.qkv_hidden_size);
  } catch (const Error&) {
  }
  try {
    parse_media_proc_config(text, "preprocessor_config.json");
  } catch (const Error&) {
  }
  return 0;
}
