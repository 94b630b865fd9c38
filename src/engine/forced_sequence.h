// A run of tokens a constraint dictates: special tokens, and texts that ordinary tokens may spell
// in any split ("response" as one token or as "resp" + "onse"), each text item possibly a choice
// among several strings (a tool name).  Used by the chat constraints (json_constraint.h,
// tool_constraint.h) for the K3 frame around what they leave free.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace k3 {

class Tokenizer;
class VocabIndex;

// The K3 chat frame's special tokens.
struct FrameTokens {
  explicit FrameTokens(const Tokenizer& tokenizer);
  int32_t open, close, sep, end;  // <|open|> <|close|> <|sep|> <|end_of_msg|>
};

class ForcedSequence {
 public:
  struct Item {
    int32_t special = -1;            // this special token, or ...
    std::vector<std::string> texts;  // ... one of these texts (none a prefix of another)
  };
  static Item special(int32_t id) { return {id, {}}; }
  static Item text(std::string t) { return {-1, {std::move(t)}}; }
  static Item one_of(std::vector<std::string> ts) { return {-1, std::move(ts)}; }

  void assign(std::vector<Item> items);
  bool empty() const { return items_.empty(); }
  // The tokens that may come next (empty only when nothing is forced); with `longest`, of the
  // ordinary tokens only the longest that continues each text (a constraint that is finishing).
  std::vector<int32_t> allowed(const VocabIndex& index, bool longest = false) const;
  // Advances past `token` (one allowed() listed).
  void accept(int32_t token, const Tokenizer& tokenizer);
  // The text of the text item completed last (which of a one_of's texts was spelled).
  const std::string& last_text() const { return last_; }
  // The tokens the rest takes when spelled as allowed(index, true) does: one per special token,
  // per text its longest-match count (the most of a one_of's texts).
  int64_t tokens_left(const VocabIndex& index) const;
  static int64_t tokens(const VocabIndex& index, const std::vector<Item>& items);

 private:
  std::deque<Item> items_;
  size_t pos_ = 0;  // bytes of the front text item already spelled
  std::string last_;
};

// What follows the <|close|> that ends the reasoning: "think<|sep|><|open|>response<|sep|>".
std::vector<ForcedSequence::Item> think_to_response(const FrameTokens& t);

}  // namespace k3
