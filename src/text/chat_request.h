// The inputs of the K3 prompt renderer, and how an OpenAI /v1/chat/completions body maps onto them
// (docs/api.md, tests/data/fixtures/chat/README.md):
//   reasoning_effort low|high|max             -> thinking_effort (default "max")
//   chat_template_kwargs.thinking (bool)      -> thinking (default true)
//   chat_template_kwargs.thinking_effort      -> thinking_effort; an explicit null means "no effort
//                                                message"; it takes precedence over reasoning_effort
//   tool_choice, response_format              -> passed through (validated)
//   add_generation_prompt (bool)              -> default true
// Other fields (sampling, stream, ...) are ignored here.  Malformed fields throw k3::Error naming
// the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "text/py_json.h"

namespace k3 {

struct ChatOptions {
  bool add_generation_prompt = true;
  bool thinking = true;
  std::optional<std::string> thinking_effort = "max";  // nullopt: no thinking-effort message
  ojson tool_choice;                                    // null = not given
  ojson response_format;                                // null = not given
  // Media prompts from the vision processor, one per image placeholder, in order.
  std::optional<std::vector<std::string>> image_prompts;
};

struct ChatRequest {
  ojson messages = ojson::array();
  ojson tools;  // null or an array of OpenAI tool objects
  ChatOptions options;
};

ChatRequest parse_chat_request(const ojson& body);

}  // namespace k3
