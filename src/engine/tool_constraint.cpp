#include "engine/tool_constraint.h"

#include <algorithm>

#include "base/error.h"
#include "engine/json_constraint.h"
#include "text/py_json.h"
#include "text/tokenizer.h"
#include "text/xtml_writer.h"

namespace k3 {
namespace {

// The `type` attribute values a property's schema allows (the renderer's names: integers are
// "number"), each followed by its closing quote.
std::vector<std::string> type_texts(const CompiledSchema::Node& n) {
  const uint8_t types = n.starts;  // JSON types by first byte: enum members' and anyOf's too
  std::vector<std::string> out;
  if (types & CompiledSchema::kString) out.push_back("string\"");
  if (types & CompiledSchema::kNumber) out.push_back("number\"");
  if (types & CompiledSchema::kBoolean) out.push_back("boolean\"");
  if (types & CompiledSchema::kObject) out.push_back("object\"");
  if (types & CompiledSchema::kArray) out.push_back("array\"");
  if (types & CompiledSchema::kNull) out.push_back("null\"");
  return out;
}

}  // namespace

bool ChatToolConstraint::StringSet::feed(uint8_t c) {
  uint64_t m = 0;
  for (size_t i = 0; i < values->size(); ++i) {
    const std::string& v = (*values)[i];
    if ((mask >> i & 1) && v.size() > pos && static_cast<uint8_t>(v[pos]) == c) m |= uint64_t{1} << i;
  }
  if (!m) return false;
  mask = m;
  ++pos;
  return true;
}

bool ChatToolConstraint::StringSet::complete() const {
  for (size_t i = 0; i < values->size(); ++i)
    if ((mask >> i & 1) && (*values)[i].size() == pos) return true;
  return false;
}

ChatToolConstraint::ChatToolConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer,
                                       bool thinking, std::vector<int32_t> stop_tokens, std::vector<ForcedTool> tools,
                                       bool single_call)
    : index_(std::move(index)),
      tokenizer_(tokenizer),
      stops_(std::move(stop_tokens)),
      tools_(std::move(tools)),
      single_call_(single_call),
      t_(tokenizer) {
  K3_CHECK(!tools_.empty(), "a forced tool call needs at least one tool name");
  for (ForcedTool& t : tools_) {
    names_.push_back(xtml_escape_attr(t.name) + "\"");
    // Only an object schema shapes the argument blocks.
    if (t.parameters && (t.parameters->node(0).is_enum || !(t.parameters->node(0).types & CompiledSchema::kObject)))
      t.parameters = nullptr;
  }
  for (const SpecialToken& s : tokenizer.specials().tokens())
    if (s.id != t_.close) specials_but_close_.push_back(s.id);
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
  body_close_ = false;
  body_tag_.clear();
  force(std::move(items), Phase::kPickTool);
}

// What the forced text just spelled decides what comes next.
void ChatToolConstraint::after_forced() {
  using F = ForcedSequence;
  const std::string& got = forced_.last_text();
  switch (after_forced_) {
    case Phase::kPickTool: {
      tool_ = static_cast<int>(std::find(names_.begin(), names_.end(), got) - names_.begin());
      K3_CHECK(tool_ < static_cast<int>(names_.size()), "forced tool name not found");
      given_ = 0;
      force({F::text(" index=\"" + std::to_string(calls_) + "\""), F::special(t_.sep)},
            schema() ? Phase::kArgs : Phase::kBody);
      return;
    }
    case Phase::kPickKey: {
      const auto& props = schema()->node(0).properties;
      const size_t k = static_cast<size_t>(std::find(key_texts_.begin(), key_texts_.end(), got) - key_texts_.begin());
      K3_CHECK(k < key_texts_.size(), "forced argument key not found");
      prop_ = key_props_[k];
      given_ |= uint64_t{1} << prop_;
      type_texts_ = type_texts(schema()->node(props[static_cast<size_t>(prop_)].node));
      force({F::text(" type=\""), F::one_of(type_texts_), F::special(t_.sep)}, Phase::kPickType);
      return;
    }
    case Phase::kPickType: {
      const int node = schema()->node(0).properties[static_cast<size_t>(prop_)].node;
      if (got == "string\"") {
        const CompiledSchema::Node& n = schema()->node(schema()->branch(node, '"'));  // anyOf: the string one
        if (!n.is_enum) {
          raw_ = utf8::Checker();
          phase_ = Phase::kArgString;
          return;
        }
        enum_strings_.clear();
        for (const std::string& v : n.values)
          if (!v.empty() && v[0] == '"') enum_strings_.push_back(py_json_loads(v).value().get<std::string>());
        enum_ = StringSet{&enum_strings_, enum_strings_.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << enum_strings_.size()) - 1, 0};
        phase_ = Phase::kArgEnum;
        return;
      }
      value_.emplace(schema(), node);
      phase_ = Phase::kArgJson;
      return;
    }
    default:
      phase_ = after_forced_;
      return;
  }
}

void ChatToolConstraint::close_value() {
  using F = ForcedSequence;
  value_.reset();
  force({F::text("argument"), F::special(t_.sep)}, Phase::kArgs);
}

void ChatToolConstraint::mask(float* logits, int64_t vocab) {
  switch (phase_) {
    case Phase::kReasoning:
    case Phase::kResponse:  // free text up to <|close|>: no other special token
      forbid(logits, vocab, stops_);
      forbid(logits, vocab, specials_but_close_);
      return;
    case Phase::kBody:
      forbid(logits, vocab, stops_);
      return;
    case Phase::kArgs: {
      const CompiledSchema::Node& root = schema()->node(0);
      std::vector<int32_t> ok;
      if (root.all_mask & ~given_) ok.push_back(t_.open);
      if ((given_ & root.required_mask) == root.required_mask) ok.push_back(t_.close);
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kArgString: {  // ordinary tokens that keep the value well-formed UTF-8
      std::vector<int32_t> ok = viable_tokens(*index_, raw_);
      if (raw_.complete()) ok.push_back(t_.close);
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kArgEnum: {
      std::vector<int32_t> ok = viable_tokens(*index_, enum_);
      if (enum_.complete()) ok.push_back(t_.close);
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kArgJson: {
      std::vector<int32_t> ok = viable_tokens(*index_, *value_);
      if (value_->complete_at_end()) ok.push_back(t_.close);
      K3_CHECK(!ok.empty(), "no token can continue the tool-call argument");
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kForced:
      keep_only(logits, vocab, forced_.allowed(*index_));
      return;
    case Phase::kAfterCall:
      keep_only(logits, vocab, single_call_ ? std::vector<int32_t>{t_.close} : std::vector<int32_t>{t_.open, t_.close});
      return;
    case Phase::kEnd:
      if (!stops_.empty()) keep_only(logits, vocab, stops_);
      return;
    case Phase::kPickTool:
    case Phase::kPickKey:
    case Phase::kPickType:
      return;  // never current: after_forced() moves on at once
  }
}

void ChatToolConstraint::accept(int32_t token) {
  using F = ForcedSequence;
  switch (phase_) {
    case Phase::kReasoning:
      if (token == t_.close)
        force(think_to_response(t_), Phase::kResponse);
      return;
    case Phase::kResponse:
      if (token == t_.close) open_call(true);
      return;
    case Phase::kForced:
      forced_.accept(token, tokenizer_);
      if (forced_.empty()) after_forced();
      return;
    case Phase::kArgs:
      if (token == t_.open) {
        const auto& props = schema()->node(0).properties;
        key_texts_.clear();
        key_props_.clear();
        for (size_t i = 0; i < props.size(); ++i)
          if (!(given_ >> i & 1)) {
            key_texts_.push_back(xtml_escape_attr(props[i].name) + "\"");
            key_props_.push_back(static_cast<int>(i));
          }
        force({F::text("argument key=\""), F::one_of(key_texts_)}, Phase::kPickKey);
      } else {
        force({F::text("call"), F::special(t_.sep)}, Phase::kAfterCall);
      }
      return;
    case Phase::kArgString:
      if (token == t_.close) close_value();
      else raw_.feed(tokenizer_.token_bytes(token));
      return;
    case Phase::kArgEnum:
      if (token == t_.close) close_value();
      else enum_.feed(tokenizer_.token_bytes(token));
      return;
    case Phase::kArgJson:
      if (token == t_.close) close_value();
      else value_->feed(tokenizer_.token_bytes(token));
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
    case Phase::kPickTool:
    case Phase::kPickKey:
    case Phase::kPickType:
      return;
  }
}

}  // namespace k3
