#include "engine/tool_constraint.h"

#include "base/error.h"
#include "engine/json_constraint.h"
#include "text/tokenizer.h"

namespace k3 {
namespace {

// The attribute form the chat parser reads back (it unescapes &quot; then &amp;).
std::string attribute_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

}  // namespace

ChatToolConstraint::ChatToolConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer,
                                       bool thinking, std::vector<int32_t> stop_tokens, std::vector<std::string> names,
                                       bool single_call)
    : index_(std::move(index)),
      tokenizer_(tokenizer),
      stops_(std::move(stop_tokens)),
      single_call_(single_call),
      t_(tokenizer) {
  K3_CHECK(!names.empty(), "a forced tool call needs at least one tool name");
  for (const std::string& n : names) names_.push_back(attribute_escape(n) + "\"");
  phase_ = thinking ? Phase::kReasoning : Phase::kResponse;
}

void ChatToolConstraint::force(std::vector<ForcedSequence::Item> items, Phase then) {
  forced_.assign(std::move(items));
  after_forced_ = then;
  phase_ = Phase::kForced;
}

// The call header: `call tool="NAME" index="k"<|sep|>`, after <|open|>.
void ChatToolConstraint::open_call(bool with_tools_channel) {
  using F = ForcedSequence;
  std::vector<ForcedSequence::Item> items;
  if (with_tools_channel)
    items = {F::text("response"), F::special(t_.sep), F::special(t_.open), F::text("tools"), F::special(t_.sep),
             F::special(t_.open)};
  ++calls_;
  items.push_back(F::text("call tool=\""));
  items.push_back(F::one_of(names_));
  items.push_back(F::text(" index=\"" + std::to_string(calls_) + "\""));
  items.push_back(F::special(t_.sep));
  body_close_ = false;
  body_tag_.clear();
  force(std::move(items), Phase::kBody);
}

void ChatToolConstraint::mask(float* logits, int64_t vocab) {
  switch (phase_) {
    case Phase::kReasoning:
    case Phase::kResponse:
      forbid(logits, vocab, stops_);
      forbid(logits, vocab, {t_.open});
      return;
    case Phase::kBody:
      forbid(logits, vocab, stops_);
      return;
    case Phase::kForced:
      keep_only(logits, vocab, forced_.allowed(*index_));
      return;
    case Phase::kAfterCall:
      keep_only(logits, vocab, single_call_ ? std::vector<int32_t>{t_.close} : std::vector<int32_t>{t_.open, t_.close});
      return;
    case Phase::kEnd:
      if (!stops_.empty()) keep_only(logits, vocab, stops_);
      return;
  }
}

void ChatToolConstraint::accept(int32_t token) {
  using F = ForcedSequence;
  switch (phase_) {
    case Phase::kReasoning:
      if (token == t_.close)
        force({F::text("think"), F::special(t_.sep), F::special(t_.open), F::text("response"), F::special(t_.sep)},
              Phase::kResponse);
      return;
    case Phase::kResponse:
      if (token == t_.close) open_call(true);
      return;
    case Phase::kForced:
      forced_.accept(token, tokenizer_);
      if (forced_.empty()) phase_ = after_forced_;
      return;
    case Phase::kBody:
      if (token == t_.close) {
        body_close_ = true;
        body_tag_.clear();
      } else if (token == t_.sep) {
        if (body_close_ && body_tag_ == "call") phase_ = Phase::kAfterCall;
        body_close_ = false;
      } else if (tokenizer_.is_special(token)) {
        body_close_ = false;
      } else if (body_close_) {
        body_tag_ += tokenizer_.token_bytes(token);
      }
      return;
    case Phase::kAfterCall:
      if (token == t_.open)
        open_call(false);
      else
        force({F::text("tools"), F::special(t_.sep), F::special(t_.close), F::text("message"), F::special(t_.sep),
               F::special(t_.end)},
              Phase::kEnd);
      return;
    case Phase::kEnd:
      return;
  }
}

}  // namespace k3
