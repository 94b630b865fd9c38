// tool_choice "required" or a named function for K3 chat: the message must end in the tools
// channel with a call of one of the forced tools (exactly one call when single_call), and its
// response channel holds nothing: a required call is the whole answer, as with OpenAI and vLLM
// (content null).  Token by token:
//   reasoning (thinking on)  free, but no stop or other special token, until <|close|>; then forced:
//                            think<|sep|><|open|>response<|sep|>
//   (the response channel)   forced at once: <|close|>response<|sep|><|open|>tools<|sep|>
//                            <|open|>call tool="NAME" index="1"<|sep|>
//                            (NAME one of the names, attribute-escaped as the parser unescapes)
//   call body                see below, until <|close|>call<|sep|>
//   after a call             <|close|> (then forced: tools<|sep|><|close|>message<|sep|><|end_of_msg|>),
//                            or, unless single_call, <|open|> (then forced: call tool="NAME"
//                            index="k"<|sep|> and another body)
//
// The call body, in the block form the chat parser reads:
//   (<|open|>argument key="K" type="T"<|sep|> VALUE <|close|>argument<|sep|>)*
// A tool whose `parameters` compiled (text/json_schema.h) gets arguments that satisfy them:
//   - K: a property not given yet in this call; <|close|>call<|sep|> only once every required
//     property is given (and <|open|> only while one is left);
//   - T: a JSON type the property's schema allows (integers are "number", as the renderer
//     writes them);
//   - VALUE: for type "string" the raw text (well-formed UTF-8, no special tokens; one of the
//     members for a string enum); for any other type one JSON value the property's schema
//     accepts.
// So the call's `arguments` parse back to an object that satisfies the schema.  A tool without a
// usable schema (none given, or keywords outside the subset) gets the same blocks with free keys
// (well-formed UTF-8 without '"', '&' or control characters) and any of the six types, each value
// one JSON value of its type (raw text for "string").
//
// The token budget (max_tokens: what the request may still generate, its max_tokens capped by the
// context; 0 = none), as for response_format (engine/json_constraint.h): the reasoning gets at
// most half of it, after which <|close|> is forced; and once the budget left is within
// kFinishSlack of the tokens that finishing takes from where the message is (each text spelled by
// the longest tokens that fit), the constraint forces the shortest way to a closed call and
// message, spelled so: only required arguments are begun, a value ends as soon as it can (its
// shortest completion, finish_text()), and no further call is opened.  So a
// model that never closes its reasoning or a value (the random test model) still returns the
// call within max_tokens.  A budget too small for even that ends cut by max_tokens: finish_reason
// "length", and the unfinished call is not reported (the parser drops a call that never closes).
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
  // max_tokens: the token budget described above (0: none).
  ChatToolConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer, bool thinking,
                     std::vector<int32_t> stop_tokens, std::vector<ForcedTool> tools, bool single_call,
                     int64_t max_tokens = 0);
  void mask(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;

  // Tokens of budget kept beyond the bound on finishing (a token may open more than it closes).
  static constexpr int64_t kFinishSlack = 8;

 private:
  enum class Phase {
    kReasoning, kForced,
    kArgs,                            // between argument blocks
    kArgKey,                          // a free key (a tool without a schema)
    kArgString, kArgEnum, kArgJson,   // an argument's value
    kAfterCall, kEnd,
    // run once the forced text before them is spelled:
    kPickTool, kPickKey, kPickType,
  };
  // A free key: well-formed UTF-8 without '"', '&' or control characters, at least one byte,
  // ended by '"'.
  struct KeyText {
    utf8::Checker utf8;
    uint32_t bytes = 0;
    bool closed = false;
    bool feed(uint8_t c);
    bool feed(std::string_view b) { return feed_each(*this, b); }
    bool complete() const { return closed; }
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
  void open_call(std::vector<ForcedSequence::Item> frame);
  void after_forced();
  void close_value();
  const CompiledSchema* schema() const { return tools_[static_cast<size_t>(tool_)].parameters.get(); }
  // The bounds behind the budget: at most how many tokens finishing takes from here; an argument
  // block of tool t's property p (or, p = -1, a free one) from <|open|> to <|close|>argument<|sep|>;
  // the rest of tool t's call once the properties in `given` are there (blocks of the required
  // ones left, <|close|>call<|sep|>, the end of the message).
  int64_t tokens_to_finish() const;
  int64_t block_tokens(int t, int p) const;
  int64_t call_rest_tokens(int t, uint64_t given) const;
  int64_t new_call_tokens() const;  // a call header and its rest, for the longest tool
  // The shortest completion of the value (or free key) being written; nullopt: none found.
  std::optional<std::string> value_finish() const;

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
  Phase after_forced_ = Phase::kArgs;
  int calls_ = 0;
  // The call being written.
  int tool_ = -1;
  uint64_t given_ = 0;  // properties already given
  int prop_ = -1;       // the property whose block is open (-1: a free key's)
  std::vector<std::string> key_texts_, type_texts_;
  std::vector<int> key_props_;  // the property of each key_texts_ entry (those not given yet)
  std::vector<std::string> enum_strings_;  // kArgEnum: the members, decoded
  StringSet enum_;
  utf8::Checker raw_;  // kArgString
  KeyText key_;        // kArgKey
  std::optional<SchemaValidator> value_;  // kArgJson
  // A free argument's value of a non-string type: one JSON value of that type, checked against
  // the node of free_schema_ paired with its type text.
  std::shared_ptr<const CompiledSchema> free_schema_;
  std::vector<std::pair<std::string, int>> free_types_;
  std::vector<std::vector<int64_t>> block_tokens_;  // [tool][property]: block_tokens()
  int64_t free_block_tokens_ = 0;
  // Tokens of fixed pieces, spelled by the longest tokens: `argument key="`, ` type="`, the
  // longest type text, <|close|>argument<|sep|>, <|close|>call<|sep|>, the end of the message
  // from after the last call, `call tool="`, ` index="`.
  int64_t key_open_ = 0, type_open_ = 0, longest_type_ = 0, arg_close_ = 0, call_close_ = 0, message_end_ = 0,
          call_open_ = 0, index_open_ = 0;
  // The budget.
  int64_t budget_ = 0;            // 0: none
  int64_t generated_ = 0;         // tokens accepted
  int64_t reasoning_budget_ = 0;  // budget_ / 2
  bool finishing_ = false;        // forcing the shortest way to the end
};

}  // namespace k3
