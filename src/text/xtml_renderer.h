// Renders an OpenAI-format conversation into the Kimi K3 XTML prompt (a port of the behaviour of
// Moonshot's encoding_k3.build_chat_segments, as pinned by fixtures/chat/expected.jsonl).
//
// Order: [tool-declare system message if `tools`] [thinking-effort system message if thinking and
// an effort is set] messages... [tool-choice message for required/none] [response-format message
// for json_object/json_schema] [generation prompt: assistant message opened, then the think
// channel (thinking) or the response channel].  There is no default system prompt and no BOS.
//
// Messages: system/user `open(message, role[, name])` content; a system message carrying `tools`
// becomes a "## New Tools Available" declaration; assistant: think channel (only when thinking:
// reasoning_content, else `reasoning`, whitespace-only rendered empty), response channel, then
// the tools channel with one `call tool=... index=i` per tool call and one typed `argument` per
// argument (strings raw, other values as Python json.dumps; unparseable argument strings as a
// `json type="object"` block); tool results `open(message, role="tool", tool=name, index=i)`,
// re-sorted into call order when every result of the run matches a preceding call by
// tool_call_id, otherwise kept in order and named by `tool`/`name` or by position.  Other roles
// are skipped.  Content may be a string or parts (text, image_url / image -> an image placeholder
// segment).  With options.image_prompts, each placeholder (also a literal one inside text) is
// replaced by the next media prompt.
//
// Throws k3::Error naming the field for invalid input (unsupported effort when thinking, tool-call
// arguments that are not a JSON object, a tool result whose name cannot be resolved, malformed
// message fields, a placeholder / image_prompts count mismatch).
#pragma once

#include <vector>

#include "text/chat_request.h"
#include "text/xtml_writer.h"

namespace k3 {

std::vector<ChatSegment> render_chat(const ojson& messages, const ojson& tools, const ChatOptions& options);
std::vector<ChatSegment> render_chat(const ChatRequest& request);

}  // namespace k3
