// tool_choice "required" or a named function for K3 chat: the message must end in the tools
// channel with a call of one of the forced tools (exactly one call when single_call).  Token by
// token:
//   reasoning (thinking on)  free, but no stop or other special token, until <|close|>; then forced:
//                            think<|sep|><|open|>response<|sep|>
//   response                 free the same way until <|close|>; then forced:
//                            response<|sep|><|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
//                            (NAME one of the names, attribute-escaped as the parser unescapes)
//   call body                see below, until <|close|>call<|sep|>
//   after a call             <|close|> (then forced: tools<|sep|><|close|>message<|sep|><|end_of_msg|>),
//                            or, unless single_call, <|open|> (then forced: call tool="NAME"
//                            index="k"<|sep|> and another body)
//
// The call body.  A tool whose `parameters` compiled (text/json_schema.h) gets arguments that
// satisfy them, in the block form the chat parser reads:
//   (<|open|>argument key="K" type="T"<|sep|> VALUE <|close|>argument<|sep|>)*
//   - K: a property not given yet in this call; <|close|>call<|sep|> only once every required
//     property is given (and <|open|> only while one is left);
//   - T: a JSON type the property's schema allows (integers are "number", as the renderer
//     writes them);
//   - VALUE: for type "string" the raw text (well-formed UTF-8, no special tokens; one of the
//     members for a string enum); for any other type one JSON value the property's schema
//     accepts.
// So the call's `arguments` parse back to an object that satisfies the schema.  A tool without
// a usable schema (none given, or keywords outside the subset) keeps a free body: anything but
// a stop token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/forced_sequence.h"
#include "engine/token_constraint.h"
#include "text/json_schema.h"
#include "text/utf8.h"

namespace k3 {

class Tokenizer;
class VocabIndex;

struct ForcedTool {
  ForcedTool(std::string n, std::shared_ptr<const CompiledSchema> p = nullptr)
      : name(std::move(n)), parameters(std::move(p)) {}
  ForcedTool(const char* n) : name(n) {}
  std::string name;
  std::shared_ptr<const CompiledSchema> parameters;  // null: the arguments stay free
};

class ChatToolConstraint : public TokenConstraint {
 public:
  ChatToolConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer, bool thinking,
                     std::vector<int32_t> stop_tokens, std::vector<ForcedTool> tools, bool single_call);
  void mask(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;

 private:
  enum class Phase {
    kReasoning, kResponse, kForced,
    kBody,                         // a free call body
    kArgs,                         // schema'd body: between argument blocks
    kArgString, kArgEnum, kArgJson,  // schema'd body: an argument's value
    kAfterCall, kEnd,
    // run once the forced text before them is spelled:
    kPickTool, kPickKey, kPickType,
  };
  // Accepts exactly the prefixes of a set of strings (a raw string-enum value); a small value
  // for viable_tokens().
  struct StringSet {
    const std::vector<std::string>* values = nullptr;
    uint64_t mask = 0;
    size_t pos = 0;
    bool feed(uint8_t c);
    bool feed(std::string_view b) { return feed_each(*this, b); }
    bool complete() const;
  };

  void force(std::vector<ForcedSequence::Item> items, Phase then);
  void open_call(bool with_tools_channel);
  void after_forced();
  void close_value();
  const CompiledSchema* schema() const { return tools_[static_cast<size_t>(tool_)].parameters.get(); }

  std::shared_ptr<const VocabIndex> index_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> stops_;
  std::vector<int32_t> specials_but_close_;  // kept out of raw string values
  std::vector<ForcedTool> tools_;
  std::vector<std::string> names_;  // escaped, each followed by its closing quote
  bool single_call_;
  FrameTokens t_;
  Phase phase_;
  ForcedSequence forced_;
  Phase after_forced_ = Phase::kBody;
  int calls_ = 0;
  bool body_close_ = false;  // kBody: a <|close|> came; its tag name collects until <|sep|>
  std::string body_tag_;
  // The call being written (schema'd body).
  int tool_ = -1;
  uint64_t given_ = 0;  // properties already given
  int prop_ = -1;       // the property whose block is open
  std::vector<std::string> key_texts_, type_texts_;
  std::vector<int> key_props_;  // the property of each key_texts_ entry (those not given yet)
  std::vector<std::string> enum_strings_;  // kArgEnum: the members, decoded
  StringSet enum_;
  utf8::Checker raw_;  // kArgString
  std::optional<SchemaValidator> value_;  // kArgJson
};

}  // namespace k3
