// The streaming output parser (text/chat_output_parser.h) on arbitrary generated tokens.  The
// first byte holds the options (bit 0 thinking, bit 1 parse_tools) and how the text is cut into
// tokens (bit 2: one token per byte, so UTF-8 characters split anywhere; else the synthetic
// tokenizer's BPE); the rest is the generated text with special tokens written literally
// (<|open|>, <|sep|>, ...), each of which becomes its special id.
// The same ids are parsed three ways: token by token (feed_token, as the server streams), whole
// (each run of ordinary tokens as one feed_text, each special by feed_special), and as one text
// through feed_with_specials.
// Properties: no exception; the three give the same message; for well-formed output
// (not degraded) the deltas of the token-by-token run concatenate to that message.
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_support.h"
#include "text/chat_output_parser.h"
#include "text/tokenizer.h"

using namespace k3;

namespace {

struct Run {
  ParsedChatMessage message;
  ChatDelta deltas;  // every delta, concatenated (tool calls appended)
};

void add(ChatDelta& all, ChatDelta d) {
  all.reasoning += d.reasoning;
  all.content += d.content;
  for (ParsedToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
}

std::string describe(const ParsedChatMessage& m) {
  ojson j = m.to_openai();
  j["stopped"] = m.stopped;
  j["degraded"] = m.degraded;
  return j.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = fuzz::synth_tokenizer();
  ChatParserOptions options;
  options.thinking = (data[0] & 1) != 0;
  options.parse_tools = (data[0] & 2) != 0;
  options.id_seed = 1;  // the same tool-call ids in every run
  const bool byte_tokens = (data[0] & 4) != 0;
  std::vector<int32_t> ids = tok.encode(fuzz::as_text(data + 1, size - 1), true);
  if (byte_tokens) {
    std::vector<int32_t> split;
    for (int32_t id : ids) {
      if (tok.is_special(id)) {
        split.push_back(id);
        continue;
      }
      for (char c : tok.token_bytes(id)) split.push_back(tok.ranks().byte_rank(static_cast<unsigned char>(c)));
    }
    ids = std::move(split);
  }

  Run by_token;
  {
    ChatOutputParser p(options, &tok);
    for (int32_t id : ids) add(by_token.deltas, p.feed_token(id));
    ChatDelta last;
    by_token.message = p.finish(&last);
    add(by_token.deltas, std::move(last));
  }
  Run whole;
  {
    ChatOutputParser p(options, &tok);
    std::string text;
    for (int32_t id : ids) {
      if (!tok.is_special(id)) {
        text += tok.token_bytes(id);
        continue;
      }
      add(whole.deltas, p.feed_text(text));
      text.clear();
      add(whole.deltas, p.feed_special(tok.token_bytes(id)));
    }
    add(whole.deltas, p.feed_text(text));
    whole.message = p.finish();
  }
  const std::string a = describe(by_token.message), b = describe(whole.message);
  K3_FUZZ_ASSERT(a == b, "token by token: ", a, "\nwhole: ", b);
  {
    ChatOutputParser p(options, &tok);
    p.feed_with_specials(tok.decode(ids), tok.specials());
    const std::string c = describe(p.finish());
    K3_FUZZ_ASSERT(a == c, "token by token: ", a, "\nfeed_with_specials: ", c);
  }
  const ParsedChatMessage& m = by_token.message;
  if (!m.degraded) {
    K3_FUZZ_ASSERT(by_token.deltas.reasoning == m.reasoning_content.value_or(""), "the reasoning deltas are '",
                   by_token.deltas.reasoning, "', the message: ", a);
    K3_FUZZ_ASSERT(by_token.deltas.content == m.content.value_or(""), "the content deltas are '",
                   by_token.deltas.content, "', the message: ", a);
    K3_FUZZ_ASSERT(by_token.deltas.tool_calls.size() == m.tool_calls.size(), by_token.deltas.tool_calls.size(),
                   " tool calls streamed, the message: ", a);
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      const ParsedToolCall &s = by_token.deltas.tool_calls[i], &t = m.tool_calls[i];
      K3_FUZZ_ASSERT(s.index == t.index && s.id == t.id && s.name == t.name && s.arguments == t.arguments,
                     "tool call ", i, " streamed differs, the message: ", a);
    }
  }
  return 0;
}
