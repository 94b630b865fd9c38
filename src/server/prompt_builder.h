// Turns request bodies into prompt tokens for the scheduler:
//   chat:       parse_chat_request (validates) -> images from data: URLs through the vision tower
//               -> render_chat with the media prompts -> tokens (specials only where the format
//               puts them) -> the <|media_pad|> positions paired with the projector rows;
//   completion: `prompt` as a string (special-token text becomes special tokens) or token ids.
// Everything a client can get wrong is an ApiError naming the field: 400 (413 for an image
// data URL over the byte limit).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tool_constraint.h"
#include "server/engine_host.h"
#include "text/chat_output_parser.h"
#include "text/py_json.h"

namespace k3::server {

struct ImageLimits {
  int max_images = 8;                   // per request
  uint64_t max_url_bytes = 16ull << 20;  // one data: URL (413 beyond)
  uint64_t max_pixels = 16ull << 20;    // decoded width * height per image
};

struct PreparedPrompt {
  std::vector<int32_t> tokens;
  std::vector<int64_t> media_positions;  // prompt positions of <|media_pad|> tokens
  std::vector<float> media_rows;         // their embeddings [positions, hidden]
  int images = 0;
};

struct PreparedChat {
  PreparedPrompt prompt;
  ChatParserOptions parser;
  // tool_choice "required" (every tool's name) or a named function (that name, single_call):
  // decoding must end in such a call (engine/tool_constraint.h).  Empty otherwise.
  std::vector<ForcedTool> forced_tools;
  bool single_call = false;
};

// check_fit: refuse prompts longer than the context (false for /tokenize).
PreparedChat prepare_chat(const EngineHost& host, const ojson& body, const ImageLimits& limits, bool check_fit = true);
PreparedPrompt prepare_completion(const EngineHost& host, const ojson& body, bool check_fit = true);
// Throws ApiError 400 (code context_length_exceeded) when the prompt does not fit the context.
void check_prompt_fits(const EngineHost& host, const PreparedPrompt& prompt, const char* param);

}  // namespace k3::server
