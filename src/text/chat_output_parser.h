// Splits what K3 generates after the generation prompt into an OpenAI assistant message, token by
// token: reasoning (think channel), content (response channel) and tool calls (tools channel).
//
// The model emits (thinking; the prompt already opened the think channel):
//   reasoning <|close|>think<|sep|> <|open|>response<|sep|> content <|close|>response<|sep|>
//   [<|open|>tools<|sep|> (<|open|>call tool="name" index="i"<|sep|>
//       (<|open|>argument key="k" type="t"<|sep|> value <|close|>argument<|sep|>)*
//    <|close|>call<|sep|>)* <|close|>tools<|sep|>] <|close|>message<|sep|> <|end_of_msg|>
// or, without thinking, the same from `content` on (the prompt opened the response channel).
//
// Results match vLLM's kimi_k3 reasoning + tool parsers (fixtures/chat/completions.jsonl), but for
// one deliberate difference, the unclosed think channel described below:
//   - reasoning / content empty -> null; whitespace-only content -> null when tool calls were parsed;
//   - tool calls only when ChatParserOptions::parse_tools (the request has tools and tool_choice is
//     not "none"); otherwise the tools channel is skipped;
//   - argument values: type="string" raw, any other type JSON-decoded (the raw string if that
//     fails); `arguments` = Python json.dumps of the {key: value} object (py_json.h); attribute
//     values are unescaped (&quot; then &amp;); a `json` block body gives arguments "{}";
//   - ids are fresh "chatcmpl-tool-<32 hex>" strings, unique within the message; `index` counts the
//     message's calls from 0 (the OpenAI streaming index).
// Malformed or truncated output never throws: it degrades, and `degraded` says so.  A think channel
// that never closes (the output stops, or closes the message, inside it) is reasoning with content
// null, as its text streamed, so a reply reads the same streamed or not (vLLM's non-streaming
// parser calls that text content; fixture case truncated_in_think); a response or tools channel
// opened without closing the think channel ends it there; a tool call that never closes is
// dropped, and so is a tag whose header the end of the output cut off (never literal text: a
// reply cut by max_tokens shows no markup); text outside any channel goes to content when no
// response channel exists (and is dropped after one); an <|open|> that breaks a tool call moves
// that call's raw text into content;
// unexpected tags, stray <|sep|> and other special tokens are kept as literal text in the current
// channel; anything after <|end_of_msg|> is ignored.  `degraded` is false exactly for output that
// stops on <|end_of_msg|> and follows the grammar above.
//
// Streaming: every feed returns the delta it completed.  Reasoning and content stream as they come
// (whitespace-only content is held back until it is known not to become null); a tool call is
// delivered whole when its <|close|>call<|sep|> arrives.  For well-formed output the deltas
// concatenate to finish()'s message; for malformed output finish() is authoritative.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "text/py_json.h"
#include "text/stream_decoder.h"

namespace k3 {

class SpecialTokens;
class Tokenizer;

struct ChatParserOptions {
  bool thinking = true;      // the generation prompt ended inside the think channel
  bool parse_tools = false;  // request has tools and tool_choice != "none"
  uint64_t id_seed = 0;      // tool-call id generator seed; 0 = random
};

struct ChatRequest;
// The parser options a rendered request implies: thinking as rendered (the generation prompt opened
// the think channel), tools parsed when the request declares tools and tool_choice is not "none".
ChatParserOptions chat_parser_options(const ChatRequest& request);

struct ParsedToolCall {
  int index = 0;  // 0-based position among this message's tool calls
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;  // completed calls
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct ParsedChatMessage {
  std::optional<std::string> reasoning_content;
  std::optional<std::string> content;
  std::vector<ParsedToolCall> tool_calls;
  bool stopped = false;   // <|end_of_msg|> was seen
  bool degraded = false;  // not well-formed (see above)
  // {"role": "assistant", "content", "reasoning_content", "tool_calls" (only when non-empty)}
  ojson to_openai() const;
};

class ChatOutputParser {
 public:
  // With a tokenizer, feed_token() decodes ids itself (specials by id, text streamed as UTF-8).
  // Text may arrive split anywhere, even inside a UTF-8 character; it is reassembled, and
  // ill-formed bytes become U+FFFD, so every string the parser returns is valid UTF-8.
  explicit ChatOutputParser(const ChatParserOptions& options, const Tokenizer* tokenizer = nullptr);
  ~ChatOutputParser();

  ChatDelta feed_token(int32_t id);
  // The stop token that ended generation: <|end_of_msg|> as itself; any other (e.g. [EOS]) ends
  // the message the same way, and its text never reaches the content.
  ChatDelta feed_stop_token(int32_t id);
  // A special token by its text ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", or any other).
  ChatDelta feed_special(std::string_view token);
  ChatDelta feed_text(std::string_view text);
  // Text in which the given special tokens are written literally (e.g. a completion string).
  ChatDelta feed_with_specials(std::string_view text, const SpecialTokens& specials);

  // Ends the stream: the final delta (held-back text) and the complete message.
  ParsedChatMessage finish(ChatDelta* last_delta = nullptr);

 private:
  class Machine;
  std::unique_ptr<Machine> machine_;
  const Tokenizer* tokenizer_;
  StreamDecoder decoder_;
};

}  // namespace k3
