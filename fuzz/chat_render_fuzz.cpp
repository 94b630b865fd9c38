// The K3 XTML chat renderer (text/chat_request.h, text/xtml_renderer.h) from an arbitrary request
// body: parsed as the server parses one (nesting bounded, then py_json_parse), then
// parse_chat_request, render_chat and encode_segments with the synthetic tokenizer.
// Properties: only k3::Error is thrown; the prompt decodes back to the rendered text
// (segments_text, invalid UTF-8 replaced); special tokens come only from the renderer's own
// control segments, never from request text (a "<|open|>" typed by a user stays text).
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_support.h"
#include "text/chat_output_parser.h"
#include "text/chat_request.h"
#include "text/py_json.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text/xtml_renderer.h"
#include "text/xtml_writer.h"

using namespace k3;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  if (json_nests_deeper_than(text)) return 0;  // the server refuses these before parsing
  const Tokenizer& tok = fuzz::synth_tokenizer();
  try {
    const ojson body = py_json_parse(text);
    if (!body.is_object()) return 0;
    const ChatRequest req = parse_chat_request(body);
    chat_parser_options(req);
    const std::vector<ChatSegment> segments = render_chat(req);
    const std::vector<int32_t> ids = encode_segments(tok, segments);
    const std::string rendered = segments_text(segments);
    K3_FUZZ_ASSERT(tok.decode(ids) == utf8::sanitize(rendered), "the prompt does not decode to the rendered text");
    size_t control = 0;
    for (const ChatSegment& s : segments) {
      if (!s.allow_special) continue;
      for (int32_t id : tok.encode(s.text, true)) control += tok.is_special(id);
    }
    size_t specials = 0;
    for (int32_t id : ids) specials += tok.is_special(id);
    K3_FUZZ_ASSERT(specials == control, "the prompt has ", specials, " special tokens, the renderer wrote ", control);
  } catch (const Error&) {
  }
  return 0;
}
