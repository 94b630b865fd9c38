// response_format json_object / json_schema for K3 chat: the assistant message must carry one
// JSON object (that satisfies the schema, text/json_schema.h) in its response channel, and
// nothing else there.  Token by token:
//   reasoning (thinking on)  anything but a stop token, until <|close|> (or <|open|>) starts the
//                            way into the response channel
//   opening                  forced: the rest of "<|close|>think<|sep|><|open|>response<|sep|>"
//   JSON                     only ordinary tokens whose bytes keep the response a prefix of a
//                            JSON object (JsonValidator, object_only) or of a document the
//                            schema accepts (SchemaValidator)
//   closing                  once the object is complete, forced:
//                            "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
// Forced text ("think", "response", "message") may come as any ordinary tokens that spell it.
// So the parsed message has the reasoning, and content = exactly the JSON object (no tool calls).
//
// The token budget (max_tokens: what the request may still generate, its max_tokens capped by
// the context; 0 = none).  A constraint that waited for the model to close its reasoning and its
// JSON would let a model that never does (one that rambles, or the random test model) spend the
// whole budget and end cut, with no JSON.  So, with a budget:
//   - the reasoning gets at most half of it: after budget / 2 reasoning tokens the constraint
//     forces <|close|> (and the opening above), whatever the model prefers;
//   - before each token the constraint counts the tokens that finishing would take from where it
//     is (the JSON's shortest completion, finish_text(), and the closing frame, each spelled by
//     the longest tokens that fit); once the budget left is within kFinishSlack of that, it
//     forces that completion, spelled so, and the message ends well formed within the budget.
// A budget too small for even that (or a token that opened more than the slack covers) still ends
// cut by max_tokens: finish_reason "length", and the parser reports the JSON text as far as it got.
//
// The JSON mask walks every ordinary token's bytes through a copy of the recogniser, in byte
// order (VocabIndex), so tokens that share a prefix share its work and a dead prefix is skipped.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/forced_sequence.h"
#include "engine/token_constraint.h"
#include "text/json_schema.h"
#include "text/json_validator.h"

namespace k3 {

class Tokenizer;

// The ordinary (non-special) tokens sorted by their bytes, with each one's common prefix length
// with the one before.  Built once per tokenizer; immutable and shareable.
class VocabIndex {
 public:
  explicit VocabIndex(const Tokenizer& tokenizer);
  size_t size() const { return ids_.size(); }
  int32_t id(size_t i) const { return ids_[i]; }
  std::string_view bytes(size_t i) const { return bytes_[i]; }
  size_t lcp(size_t i) const { return lcp_[i]; }
  // Ordinary tokens whose bytes are a non-empty prefix of `text`.
  std::vector<int32_t> prefixes_of(std::string_view text) const;
  // The longest of them (-1 when there is none).
  int32_t longest_prefix_of(std::string_view text) const;
  // How many tokens spell `text` taking the longest prefix each time (the way a constraint that is
  // finishing spells forced text); a byte no token starts with counts one.
  int64_t longest_match_tokens(std::string_view text) const;

 private:
  // The index of the longest token that is a prefix of `text` (size() when none is).
  size_t longest_index(std::string_view text) const;

  std::vector<int32_t> ids_;
  std::vector<std::string> bytes_;
  std::vector<uint32_t> lcp_;
};

// Every ordinary token whose bytes all continue the text `start` has read (R: a small copyable
// byte recogniser with bool feed(uint8_t), e.g. JsonValidator or SchemaValidator).  states[d] is the
// recogniser after d bytes of the current token; a token shares states[0..lcp] with the one
// before, and a token that shares a prefix that already failed fails too (`dead`: the length of
// that prefix).
template <class R>
std::vector<int32_t> viable_tokens(const VocabIndex& index, const R& start) {
  thread_local std::vector<R> states;
  std::vector<int32_t> ok;
  states.assign(1, start);
  size_t dead = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < index.size(); ++i) {
    const std::string_view b = index.bytes(i);
    const size_t l = index.lcp(i);
    if (l >= dead) continue;
    dead = std::numeric_limits<size_t>::max();
    if (states.size() > l + 1) states.erase(states.begin() + static_cast<std::ptrdiff_t>(l + 1), states.end());
    bool good = true;
    for (size_t d = states.size() - 1; d < b.size(); ++d) {
      R v = states[d];
      if (!v.feed(static_cast<uint8_t>(b[d]))) {
        dead = d + 1;
        good = false;
        break;
      }
      states.push_back(v);
    }
    if (good) ok.push_back(index.id(i));
  }
  return ok;
}

// The order in which finish_text() tries bytes: what closes a JSON container or value first,
// then what opens the shortest values, then any other byte; whitespace last.
std::string_view json_finish_order();

// The text a greedy writer appends to what `r` has read to finish it: byte by byte, a '"' that
// closes a string (inside a string every other byte, '}' included, is just more string), else the
// first byte of `order` that the recogniser accepts, until done(r).  A '"' closes a string when
// after it the text is done or a ',', ':', '}' or ']' may follow, but no letter (which may only
// follow a '"' that opens one).  The way a constraint closes a value within the token
// budget.  nullopt when no byte continues, or after max_bytes.  The same state always gives the
// same text, so feeding a prefix of it and asking again gives the rest.
template <class R, class Done>
std::optional<std::string> finish_text(R r, Done done, std::string_view order = json_finish_order(),
                                       size_t max_bytes = 4096) {
  const auto closes_string = [&](const R& after) {
    if (R letter = after; letter.feed(static_cast<uint8_t>('a'))) return false;
    if (done(after)) return true;
    for (char c : std::string_view(",:}]")) {
      R next = after;
      if (next.feed(static_cast<uint8_t>(c))) return true;
    }
    return false;
  };
  std::string out;
  while (!done(r)) {
    if (out.size() >= max_bytes) return std::nullopt;
    R quote = r;
    if (quote.feed(static_cast<uint8_t>('"')) && closes_string(quote)) {
      r = quote;
      out.push_back('"');
      continue;
    }
    bool moved = false;
    for (char c : order) {
      R next = r;
      if (next.feed(static_cast<uint8_t>(c))) {
        r = next;
        out.push_back(c);
        moved = true;
        break;
      }
    }
    if (!moved) return std::nullopt;
  }
  return out;
}

// Throws k3::Error (naming the schema path) when a value the constrained decoder may start has no
// way to finish: a required property, array item (minItems > 0) or anyOf alternative with no
// finite value (a required property that refers back to its own object), or one that needs more
// than SchemaValidator::kMaxFrames nested containers.  The decoder only looks one byte ahead, so
// it would walk into such a value and then find no token to continue with (the request failed
// with a 500 after generating).  Every property, item and alternative reachable from the root
// (node 0) is checked, optional ones too: the decoder may choose them.
void check_schema_decodable(const CompiledSchema& schema);
// CompiledSchema::compile, then check_schema_decodable: the schema a request may constrain with.
std::shared_ptr<const CompiledSchema> compile_decodable_schema(const ojson& schema);

class ChatJsonConstraint : public TokenConstraint {
 public:
  // thinking: the generation prompt opened the think channel (else the response channel);
  // stop_tokens: the request's stop tokens, kept out until the message is closed; schema: null
  // for any JSON object.
  // max_tokens: the token budget described above (0: none).
  ChatJsonConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer, bool thinking,
                     std::vector<int32_t> stop_tokens, std::shared_ptr<const CompiledSchema> schema = nullptr,
                     int64_t max_tokens = 0);
  void mask(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;

  // Tokens of budget kept beyond the bound on finishing (a token may open more than it closes).
  static constexpr int64_t kFinishSlack = 8;

 private:
  enum class Phase { kReasoning, kForced, kJson, kEnd };
  void force(std::vector<ForcedSequence::Item> items, Phase then);
  // The shortest completion of the JSON read so far (nullopt: none found).
  std::optional<std::string> json_finish() const;
  // At most how many tokens finishing the message takes from here.
  int64_t tokens_to_finish() const;

  std::shared_ptr<const VocabIndex> index_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> stops_;
  FrameTokens t_;
  Phase phase_;
  ForcedSequence forced_;
  Phase after_forced_ = Phase::kJson;
  std::shared_ptr<const CompiledSchema> schema_;
  std::variant<JsonValidator, SchemaValidator> json_;
  int64_t budget_ = 0;            // 0: none
  int64_t generated_ = 0;         // tokens accepted
  int64_t reasoning_budget_ = 0;  // budget_ / 2
  bool finishing_ = false;        // forcing the shortest way to the end
};

}  // namespace k3
