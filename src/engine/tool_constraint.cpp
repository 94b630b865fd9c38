#include "engine/tool_constraint.h"

#include <limits>

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
    : index_(std::move(index)), tokenizer_(tokenizer), stops_(std::move(stop_tokens)), single_call_(single_call) {
  K3_CHECK(!names.empty(), "a forced tool call needs at least one tool name");
  for (const std::string& n : names) names_.push_back(attribute_escape(n) + "\"");
  open_ = tokenizer.require_special("<|open|>");
  close_ = tokenizer.require_special("<|close|>");
  sep_ = tokenizer.require_special("<|sep|>");
  end_ = tokenizer.require_special("<|end_of_msg|>");
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
    items = {F::text("response"), F::special(sep_), F::special(open_), F::text("tools"), F::special(sep_),
             F::special(open_)};
  ++calls_;
  items.push_back(F::text("call tool=\""));
  items.push_back(F::one_of(names_));
  items.push_back(F::text(" index=\"" + std::to_string(calls_) + "\""));
  items.push_back(F::special(sep_));
  body_close_ = false;
  body_tag_.clear();
  force(std::move(items), Phase::kBody);
}

void ChatToolConstraint::mask(float* logits, int64_t vocab) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const auto off = [&](int32_t t) {
    if (t >= 0 && t < vocab) logits[t] = kOff;
  };
  const auto only = [&](const std::vector<int32_t>& ids) {
    std::vector<uint8_t> allow(static_cast<size_t>(vocab), 0);
    for (int32_t t : ids)
      if (t >= 0 && t < vocab) allow[t] = 1;
    for (int64_t t = 0; t < vocab; ++t)
      if (!allow[t]) logits[t] = kOff;
  };
  switch (phase_) {
    case Phase::kReasoning:
    case Phase::kResponse:
      for (int32_t t : stops_) off(t);
      off(open_);
      return;
    case Phase::kBody:
      for (int32_t t : stops_) off(t);
      return;
    case Phase::kForced:
      only(forced_.allowed(*index_));
      return;
    case Phase::kAfterCall:
      only(single_call_ ? std::vector<int32_t>{close_} : std::vector<int32_t>{open_, close_});
      return;
    case Phase::kEnd:
      if (!stops_.empty()) only(stops_);
      return;
  }
}

void ChatToolConstraint::accept(int32_t token) {
  using F = ForcedSequence;
  switch (phase_) {
    case Phase::kReasoning:
      if (token == close_)
        force({F::text("think"), F::special(sep_), F::special(open_), F::text("response"), F::special(sep_)},
              Phase::kResponse);
      return;
    case Phase::kResponse:
      if (token == close_) open_call(true);
      return;
    case Phase::kForced:
      forced_.accept(token, tokenizer_);
      if (forced_.empty()) phase_ = after_forced_;
      return;
    case Phase::kBody:
      if (token == close_) {
        body_close_ = true;
        body_tag_.clear();
      } else if (token == sep_) {
        if (body_close_ && body_tag_ == "call") phase_ = Phase::kAfterCall;
        body_close_ = false;
      } else if (tokenizer_.is_special(token)) {
        body_close_ = false;
      } else if (body_close_) {
        body_tag_ += tokenizer_.token_bytes(token);
      }
      return;
    case Phase::kAfterCall:
      if (token == open_)
        open_call(false);
      else
        force({F::text("tools"), F::special(sep_), F::special(close_), F::text("message"), F::special(sep_),
               F::special(end_)},
              Phase::kEnd);
      return;
    case Phase::kEnd:
      return;
  }
}

}  // namespace k3
