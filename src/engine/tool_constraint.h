// tool_choice "required" or a named function for K3 chat: the message must end in the tools
// channel with a call of one of `names` (exactly one call of it when single_call).  Token by token:
//   reasoning (thinking on)  free, but no stop token and no <|open|>, until <|close|>; then forced:
//                            think<|sep|><|open|>response<|sep|>
//   response                 free the same way until <|close|>; then forced:
//                            response<|sep|><|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
//                            (NAME one of the names, attribute-escaped as the parser unescapes)
//   call body                free but for stop tokens, until <|close|>call<|sep|>
//   after a call             <|close|> (then forced: tools<|sep|><|close|>message<|sep|><|end_of_msg|>),
//                            or, unless single_call, <|open|> (then forced: call tool="NAME"
//                            index="k"<|sep|> and another body)
// The argument blocks inside a call stay the model's own; only the frame and the names are forced.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/forced_sequence.h"
#include "engine/token_constraint.h"

namespace k3 {

class Tokenizer;
class VocabIndex;

class ChatToolConstraint : public TokenConstraint {
 public:
  ChatToolConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer, bool thinking,
                     std::vector<int32_t> stop_tokens, std::vector<std::string> names, bool single_call);
  void mask(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;

 private:
  enum class Phase { kReasoning, kResponse, kForced, kBody, kAfterCall, kEnd };
  void force(std::vector<ForcedSequence::Item> items, Phase then);
  void open_call(bool with_tools_channel);

  std::shared_ptr<const VocabIndex> index_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> stops_;
  std::vector<std::string> names_;  // escaped, each followed by its closing quote
  bool single_call_;
  FrameTokens t_;
  Phase phase_;
  ForcedSequence forced_;
  Phase after_forced_ = Phase::kBody;
  int calls_ = 0;
  bool body_close_ = false;  // kBody: a <|close|> came; its tag name collects until <|sep|>
  std::string body_tag_;
};

}  // namespace k3
