// How an image enters the K3 prompt (as the released processor and chat template insert it):
//   <|media_begin|>image {W}x{H}<|media_content|> + N x <|media_pad|> + <|media_end|>
// with W x H the ORIGINAL upload size and N the image's token count; "image {W}x{H}" is ordinary
// BPE text.  This text replaces one `<|kimi_image_placeholder|>` (a plain string written by the
// chat renderer; ChatOptions::image_prompts).  After tokenising with specials allowed for this
// text only, the embeddings of the N <|media_pad|> tokens (163605 in the release;
// ModelConfig::media_placeholder_token_id) are overwritten, in order, by the projector rows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/k3_model.h"

namespace k3 {

inline constexpr std::string_view kMediaBegin = "<|media_begin|>";
inline constexpr std::string_view kMediaContent = "<|media_content|>";
inline constexpr std::string_view kMediaEnd = "<|media_end|>";
inline constexpr std::string_view kMediaPad = "<|media_pad|>";

struct MediaPrompt {
  std::string text;      // the framing with num_pads pads
  int64_t num_pads = 0;  // = the image's token count
};

// The framing for one image of original size width x height encoding to num_tokens rows.
MediaPrompt image_media_prompt(int width, int height, int64_t num_tokens);

// Pairs the pad tokens of `tokens` (in order) with consecutive rows of `rows`
// ([count, hidden]); the overrides point into `rows`, which must outlive them.  Throws
// k3::Error when the number of pads differs from the number of rows.
std::vector<EmbeddingOverride> media_embedding_overrides(std::span<const int32_t> tokens, int32_t pad_token_id,
                                                         std::span<const float> rows, int64_t hidden);

}  // namespace k3
