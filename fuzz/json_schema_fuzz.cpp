// The JSON-schema compiler (text/json_schema.h) and the constrained-decoding masks built on it
// (engine/json_constraint.h for response_format, engine/tool_constraint.h for a forced tool call)
// with the synthetic tokenizer.  The input is a schema's JSON text, then a NUL byte, then the
// bytes that drive a random walk.  The schema is compiled as a request's is
// (compile_decodable_schema); the JSON text `null` stands for response_format json_object.
// The walk's first byte picks the constraint (bit 0: a forced call of a tool with these
// parameters instead of response_format; bit 1: thinking) and the next one the token budget
// (0: none, else 1..127 tokens); each later byte picks one of the tokens the mask allows.  When
// the bytes run out, a walk with a budget goes on taking the first allowed token, up to the
// budget (which makes the constraint force the end).
// Properties: the compiler returns or throws k3::Error; for a schema it accepts, the mask never
// allows no token before the message is closed; a message the walk closes parses (the streaming
// output parser) to what was asked for: content a JSON object the schema accepts, or one
// well-formed tool call whose arguments it accepts.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/json_constraint.h"
#include "engine/tool_constraint.h"
#include "fuzz_support.h"
#include "text/chat_output_parser.h"
#include "text/json_schema.h"
#include "text/json_validator.h"
#include "text/tokenizer.h"

using namespace k3;

namespace {

constexpr int kMaxSteps = 160;

// Whether `text` is one JSON value the schema accepts (any JSON object without a schema).
bool satisfies(const std::shared_ptr<const CompiledSchema>& schema, const std::string& text) {
  if (!schema) {
    const std::optional<ojson> v = py_json_loads(text);
    return v && v->is_object();
  }
  SchemaValidator v(schema.get());
  return v.feed(text) && v.complete();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const size_t nul = input.find('\0');
  const std::string_view schema_text = input.substr(0, nul);
  const std::string_view walk = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  if (json_nests_deeper_than(schema_text)) return 0;  // the server refuses these before parsing

  std::shared_ptr<const CompiledSchema> schema;
  try {
    const ojson doc = py_json_parse(schema_text);
    if (!doc.is_null()) schema = compile_decodable_schema(doc);
  } catch (const Error&) {
    return 0;
  }

  const Tokenizer& tok = fuzz::synth_tokenizer();
  static const std::shared_ptr<const VocabIndex> index = std::make_shared<const VocabIndex>(tok);
  const bool tool_call = !walk.empty() && (walk[0] & 1) != 0;
  const bool thinking = !walk.empty() && (walk[0] & 2) != 0;
  const int64_t budget = walk.size() > 1 ? static_cast<uint8_t>(walk[1]) % 128 : 0;
  if (tool_call && !schema) return 0;  // (json_object has no tool form)
  const int32_t end_of_msg = tok.require_special("<|end_of_msg|>");
  const std::vector<int32_t> stops = {end_of_msg, tok.require_special("[EOS]")};
  std::unique_ptr<TokenConstraint> constraint;
  if (tool_call)
    constraint = std::make_unique<ChatToolConstraint>(index, tok, thinking, stops,
                                                      std::vector<ForcedTool>{ForcedTool("f", schema)}, true, budget);
  else
    constraint = std::make_unique<ChatJsonConstraint>(index, tok, thinking, stops, schema, budget);

  std::vector<int32_t> generated;
  std::vector<float> logits(static_cast<size_t>(tok.vocab_size()));
  bool closed = false;
  // (The scheduler stops a request at its budget: the mask is never asked past it.)
  const int steps = budget > 0 ? static_cast<int>(budget) : kMaxSteps;
  for (int step = 0; step < steps && !closed; ++step) {
    const size_t pick_at = static_cast<size_t>(step) + 2;
    if (pick_at >= walk.size() && budget == 0) break;
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint->mask(logits.data(), static_cast<int64_t>(logits.size()));
    std::vector<int32_t> allowed;
    for (size_t i = 0; i < logits.size(); ++i)
      if (!std::isinf(logits[i])) allowed.push_back(static_cast<int32_t>(i));
    K3_FUZZ_ASSERT(!allowed.empty(), "no token is allowed after ", generated.size(), " tokens: '",
                   tok.decode(generated), "'");
    const int32_t token =
        pick_at < walk.size() ? allowed[static_cast<uint8_t>(walk[pick_at]) % allowed.size()] : allowed.front();
    constraint->accept(token);
    generated.push_back(token);
    closed = token == end_of_msg;
  }
  if (!closed) return 0;

  ChatParserOptions options;
  options.thinking = thinking;
  options.parse_tools = tool_call;
  options.id_seed = 1;
  ChatOutputParser parser(options, &tok);
  for (int32_t id : generated) parser.feed_token(id);
  const ParsedChatMessage m = parser.finish();
  const std::string text = tok.decode(generated);
  if (tool_call) {
    // (The tool constraint keeps special tokens out of the reasoning; response_format lets the
    // reasoning have stray ones, which the parser keeps as text but calls degraded.)
    K3_FUZZ_ASSERT(!m.degraded, "the constrained message is not well formed: '", text, "'");
    K3_FUZZ_ASSERT(m.tool_calls.size() == 1 && m.tool_calls[0].name == "f", "the message has ", m.tool_calls.size(),
                   " tool calls: '", text, "'");
    K3_FUZZ_ASSERT(satisfies(schema, m.tool_calls[0].arguments), "the arguments ", m.tool_calls[0].arguments,
                   " do not satisfy the schema: '", text, "'");
  } else {
    K3_FUZZ_ASSERT(m.content && satisfies(schema, *m.content), "the content does not satisfy the schema: '", text,
                   "'");
  }
  return 0;
}
