#include "vision/media_prompt.h"

#include "base/error.h"

namespace k3 {

MediaPrompt image_media_prompt(int width, int height, int64_t num_tokens) {
  K3_CHECK(num_tokens > 0, "an image prompt needs at least one token");
  MediaPrompt p;
  p.num_pads = num_tokens;
  p.text = cat(kMediaBegin, "image ", width, "x", height, kMediaContent);
  p.text.reserve(p.text.size() + kMediaPad.size() * num_tokens + kMediaEnd.size());
  for (int64_t i = 0; i < num_tokens; ++i) p.text += kMediaPad;
  p.text += kMediaEnd;
  return p;
}

std::vector<EmbeddingOverride> media_embedding_overrides(std::span<const int32_t> tokens, int32_t pad_token_id,
                                                         std::span<const float> rows, int64_t hidden) {
  K3_CHECK(hidden > 0 && rows.size() % hidden == 0, "image embeddings: ", rows.size(), " values are not whole rows of ",
           hidden);
  const int64_t n_rows = static_cast<int64_t>(rows.size()) / hidden;
  std::vector<EmbeddingOverride> out;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == pad_token_id) {
      if (static_cast<int64_t>(out.size()) < n_rows)
        out.push_back({static_cast<int64_t>(i), rows.data() + out.size() * hidden});
      else
        out.push_back({static_cast<int64_t>(i), nullptr});  // counted only, for the message below
    }
  K3_CHECK(static_cast<int64_t>(out.size()) == n_rows, "the prompt has ", out.size(), " image pad tokens (id ",
           pad_token_id, ") but the images encode to ", n_rows, " rows");
  return out;
}

}  // namespace k3
