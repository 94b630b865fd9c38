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

bool ChatToolConstraint::KeyText::feed(uint8_t c) {
  if (closed) return false;
  if (c == '"') {
    if (bytes == 0 || !utf8.complete()) return false;
    closed = true;
    return true;
  }
  if (c < 0x20 || c == '&' || c == 0x7f) return false;
  ++bytes;
  return utf8.feed(c);
}

namespace {

// "<|close|>response<|sep|><|open|>tools<|sep|><|open|>": from the response channel the
// generation prompt (or the reasoning's close) opened, empty, to the first call.
std::vector<ForcedSequence::Item> response_to_tools(const FrameTokens& t) {
  using F = ForcedSequence;
  return {F::special(t.close), F::text("response"), F::special(t.sep), F::special(t.open), F::text("tools"),
          F::special(t.sep), F::special(t.open)};
}

std::vector<ForcedSequence::Item> think_to_tools(const FrameTokens& t) {
  std::vector<ForcedSequence::Item> items = think_to_response(t);
  for (ForcedSequence::Item& i : response_to_tools(t)) items.push_back(std::move(i));
  return items;
}

constexpr int64_t kNoFinish = 1 << 20;  // a value whose completion was not found

// What finish_text() tries for a free key: its closing quote, else a letter.
constexpr std::string_view kKeyFinishOrder = "\"abcdefghijklmnopqrstuvwxyz";

int64_t finish_tokens(const VocabIndex& index, const std::optional<std::string>& rest) {
  return rest ? index.longest_match_tokens(*rest) : kNoFinish;
}

}  // namespace

ChatToolConstraint::ChatToolConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer,
                                       bool thinking, std::vector<int32_t> stop_tokens, std::vector<ForcedTool> tools,
                                       bool single_call, int64_t max_tokens)
    : index_(std::move(index)),
      tokenizer_(tokenizer),
      stops_(std::move(stop_tokens)),
      tools_(std::move(tools)),
      single_call_(single_call),
      t_(tokenizer),
      budget_(std::max<int64_t>(max_tokens, 0)),
      reasoning_budget_(budget_ / 2) {
  K3_CHECK(!tools_.empty(), "a forced tool call needs at least one tool name");
  const auto tokens = [&](std::string_view text) { return index_->longest_match_tokens(text); };
  key_open_ = tokens("argument key=\"");
  type_open_ = tokens(" type=\"");
  for (const char* type : {"string\"", "number\"", "boolean\"", "object\"", "array\"", "null\""})
    longest_type_ = std::max(longest_type_, tokens(type));
  arg_close_ = 2 + tokens("argument");
  call_close_ = 2 + tokens("call");
  message_end_ = 5 + tokens("tools") + tokens("message");
  call_open_ = tokens("call tool=\"");
  index_open_ = tokens(" index=\"");
  // One property per type (a schema's root must be an object), each property's node a value of it.
  ojson types = ojson::object();
  for (const char* type : {"number", "boolean", "object", "array", "null"}) types[type] = {{"type", type}};
  free_schema_ = std::make_shared<const CompiledSchema>(
      CompiledSchema::compile(ojson{{"type", "object"}, {"properties", std::move(types)}}));
  for (const CompiledSchema::Property& p : free_schema_->node(0).properties)
    free_types_.emplace_back(p.name + "\"", p.node);
  // A free block: the key finish_text() writes, the longest type, the longest shortest value.
  int64_t free_value = 0;
  for (const auto& [type, node] : free_types_)
    free_value = std::max(free_value, finish_tokens(*index_, finish_text(SchemaValidator(free_schema_.get(), node),
                                                                         [](const SchemaValidator& v) { return v.complete_at_end(); })));
  free_block_tokens_ = 1 + key_open_ + tokens("a\"") + type_open_ + longest_type_ + 1 + free_value + arg_close_;
  for (ForcedTool& t : tools_) {
    names_.push_back(xtml_escape_attr(t.name) + "\"");
    // Only an object schema shapes the argument blocks.
    if (t.parameters && (t.parameters->node(0).is_enum || !(t.parameters->node(0).types & CompiledSchema::kObject)))
      t.parameters = nullptr;
    std::vector<int64_t> blocks;
    if (t.parameters) {
      const CompiledSchema& s = *t.parameters;
      for (const CompiledSchema::Property& p : s.node(0).properties) {
        // The value's shortest completion from its start, as a JSON value, or as a string (raw
        // text: nothing; an enum: its longest member).
        int64_t value = finish_tokens(*index_, finish_text(SchemaValidator(&s, p.node),
                                                           [](const SchemaValidator& v) { return v.complete_at_end(); }));
        const int str = s.branch(p.node, '"');
        if (str >= 0 && s.node(str).is_enum)
          for (const std::string& v : s.node(str).values) value = std::max(value, tokens(v));
        blocks.push_back(1 + key_open_ + tokens(xtml_escape_attr(p.name) + "\"") + type_open_ + longest_type_ + 1 +
                         value + arg_close_);
      }
    }
    block_tokens_.push_back(std::move(blocks));
  }
  for (const SpecialToken& s : tokenizer.specials().tokens())
    if (s.id != t_.close) specials_but_close_.push_back(s.id);
  if (thinking)
    phase_ = Phase::kReasoning;
  else
    open_call(response_to_tools(t_));
}

void ChatToolConstraint::force(std::vector<ForcedSequence::Item> items, Phase then) {
  forced_.assign(std::move(items));
  after_forced_ = then;
  phase_ = Phase::kForced;
}

// The call header: `call tool="NAME" index="k"<|sep|>`, after `frame` (the way from the channel
// the model is in to the <|open|> that begins the call).
void ChatToolConstraint::open_call(std::vector<ForcedSequence::Item> frame) {
  using F = ForcedSequence;
  std::vector<ForcedSequence::Item> items = std::move(frame);
  ++calls_;
  items.push_back(F::text("call tool=\""));
  items.push_back(F::one_of(names_));
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
      force({F::text(" index=\"" + std::to_string(calls_) + "\""), F::special(t_.sep)}, Phase::kArgs);
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
      if (prop_ < 0) {  // a free argument
        if (got == "string\"") {
          raw_ = utf8::Checker();
          phase_ = Phase::kArgString;
          return;
        }
        const auto it = std::find_if(free_types_.begin(), free_types_.end(), [&](const auto& f) { return f.first == got; });
        K3_CHECK(it != free_types_.end(), "forced argument type not found");
        value_.emplace(free_schema_.get(), it->second);
        phase_ = Phase::kArgJson;
        return;
      }
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

int64_t ChatToolConstraint::block_tokens(int t, int p) const {
  return p < 0 ? free_block_tokens_ : block_tokens_[static_cast<size_t>(t)][static_cast<size_t>(p)];
}

int64_t ChatToolConstraint::call_rest_tokens(int t, uint64_t given) const {
  int64_t n = call_close_ + message_end_;
  if (const CompiledSchema* s = tools_[static_cast<size_t>(t)].parameters.get()) {
    const uint64_t left = s->node(0).required_mask & ~given;
    for (size_t p = 0; p < s->node(0).properties.size(); ++p)
      if (left >> p & 1) n += block_tokens(t, static_cast<int>(p));
  }
  return n;
}

int64_t ChatToolConstraint::new_call_tokens() const {
  int64_t n = 0;
  for (size_t t = 0; t < tools_.size(); ++t)
    n = std::max(n, index_->longest_match_tokens(names_[t]) + call_rest_tokens(static_cast<int>(t), 0));
  // call tool="NAME" index="k"<|sep|>
  return call_open_ + index_open_ + index_->longest_match_tokens(std::to_string(calls_ + 1) + "\"") + 1 + n;
}

std::optional<std::string> ChatToolConstraint::value_finish() const {
  switch (phase_) {
    case Phase::kArgKey: return finish_text(key_, [](const KeyText& k) { return k.complete(); }, kKeyFinishOrder);
    case Phase::kArgString: return finish_text(raw_, [](const utf8::Checker& c) { return c.complete(); });
    case Phase::kArgEnum: return finish_text(enum_, [](const StringSet& e) { return e.complete(); });
    case Phase::kArgJson:
      return finish_text(*value_, [](const SchemaValidator& v) { return v.complete_at_end(); });
    default: return std::string();
  }
}

int64_t ChatToolConstraint::tokens_to_finish() const {
  // Between argument blocks of the current call: its rest, and one more block if the model may
  // still open one (it may, until finishing begins).
  const auto args = [&] {
    int64_t more = 0;
    if (const CompiledSchema* s = schema()) {
      const uint64_t open = s->node(0).all_mask & ~given_;
      for (size_t p = 0; p < s->node(0).properties.size(); ++p)
        if (open >> p & 1) more = std::max(more, block_tokens(tool_, static_cast<int>(p)));
    } else {
      more = free_block_tokens_;
    }
    return call_rest_tokens(tool_, given_) + more;
  };
  const auto after_call = [&] { return message_end_ + (single_call_ ? 0 : new_call_tokens()); };
  const auto value_end = [&] { return finish_tokens(*index_, value_finish()) + arg_close_ + call_rest_tokens(tool_, given_); };
  switch (phase_) {
    case Phase::kReasoning: return 1 + ForcedSequence::tokens(*index_, think_to_tools(t_)) + new_call_tokens();
    case Phase::kForced: {
      const int64_t forced = forced_.tokens_left(*index_);
      switch (after_forced_) {
        case Phase::kPickTool: {
          // The name is in the forced part; the index, <|sep|> and the longest tool's rest follow.
          int64_t rest = 0;
          for (size_t t = 0; t < tools_.size(); ++t) rest = std::max(rest, call_rest_tokens(static_cast<int>(t), 0));
          return forced + index_open_ + index_->longest_match_tokens(std::to_string(calls_) + "\"") + 1 + rest;
        }
        case Phase::kPickKey:
        case Phase::kArgKey:
        case Phase::kArgs: return forced + args();
        case Phase::kPickType: return forced + block_tokens(tool_, prop_) + call_rest_tokens(tool_, given_);
        case Phase::kAfterCall: return forced + after_call();
        default: return forced;
      }
    }
    case Phase::kArgs: return args();
    case Phase::kArgKey: return value_end() + type_open_ + longest_type_ + 1 + free_block_tokens_;
    case Phase::kArgString:
    case Phase::kArgEnum:
    case Phase::kArgJson: return value_end();
    case Phase::kAfterCall: return after_call();
    case Phase::kEnd:
    case Phase::kPickTool:
    case Phase::kPickKey:
    case Phase::kPickType: return 0;
  }
  return 0;
}

void ChatToolConstraint::mask(float* logits, int64_t vocab) {
  if (budget_ > 0 && !finishing_ && phase_ != Phase::kEnd && budget_ - generated_ <= tokens_to_finish() + kFinishSlack)
    finishing_ = true;
  // Finishing, a value (or free key) ends by its shortest completion, then its <|close|>.
  const auto finish_value = [&](bool done) {
    if (!finishing_) return false;
    if (done) {
      keep_only(logits, vocab, {t_.close});
      return true;
    }
    const std::optional<std::string> rest = value_finish();
    const int32_t next = rest ? index_->longest_prefix_of(*rest) : -1;
    if (next < 0) return false;
    keep_only(logits, vocab, {next});
    return true;
  };
  switch (phase_) {
    case Phase::kReasoning:
      if (finishing_ || (budget_ > 0 && generated_ >= reasoning_budget_)) {
        keep_only(logits, vocab, {t_.close});  // the reasoning budget is spent
        return;
      }
      // Free text up to <|close|>: no other special token.
      forbid(logits, vocab, stops_);
      forbid(logits, vocab, specials_but_close_);
      return;
    case Phase::kArgs: {
      std::vector<int32_t> ok;
      if (const CompiledSchema* s = schema()) {
        const CompiledSchema::Node& root = s->node(0);
        const bool required_left = (given_ & root.required_mask) != root.required_mask;
        if ((root.all_mask & ~given_) && (!finishing_ || required_left)) ok.push_back(t_.open);
        if (!required_left) ok.push_back(t_.close);
      } else {
        if (!finishing_) ok.push_back(t_.open);
        ok.push_back(t_.close);
      }
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kArgKey: {
      if (finish_value(false)) return;
      keep_only(logits, vocab, viable_tokens(*index_, key_));
      return;
    }
    case Phase::kArgString: {  // ordinary tokens that keep the value well-formed UTF-8
      if (finish_value(raw_.complete())) return;
      std::vector<int32_t> ok = viable_tokens(*index_, raw_);
      if (raw_.complete()) ok.push_back(t_.close);
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kArgEnum: {
      if (finish_value(enum_.complete())) return;
      std::vector<int32_t> ok = viable_tokens(*index_, enum_);
      if (enum_.complete()) ok.push_back(t_.close);
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kArgJson: {
      if (finish_value(value_->complete_at_end())) return;
      std::vector<int32_t> ok = viable_tokens(*index_, *value_);
      if (value_->complete_at_end()) ok.push_back(t_.close);
      K3_CHECK(!ok.empty(), "no token can continue the tool-call argument");
      keep_only(logits, vocab, ok);
      return;
    }
    case Phase::kForced:
      keep_only(logits, vocab, forced_.allowed(*index_, finishing_));
      return;
    case Phase::kAfterCall:
      keep_only(logits, vocab,
                single_call_ || finishing_ ? std::vector<int32_t>{t_.close} : std::vector<int32_t>{t_.open, t_.close});
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
  ++generated_;
  switch (phase_) {
    case Phase::kReasoning:
      if (token == t_.close) open_call(think_to_tools(t_));
      return;
    case Phase::kForced:
      forced_.accept(token, tokenizer_);
      if (forced_.empty()) after_forced();
      return;
    case Phase::kArgs:
      if (token != t_.open) {
        force({F::text("call"), F::special(t_.sep)}, Phase::kAfterCall);
      } else if (const CompiledSchema* s = schema()) {
        // Finishing, only the required properties left are begun.
        const CompiledSchema::Node& root = s->node(0);
        const uint64_t candidates = finishing_ ? root.required_mask & ~given_ : root.all_mask & ~given_;
        key_texts_.clear();
        key_props_.clear();
        for (size_t i = 0; i < root.properties.size(); ++i)
          if (candidates >> i & 1) {
            key_texts_.push_back(xtml_escape_attr(root.properties[i].name) + "\"");
            key_props_.push_back(static_cast<int>(i));
          }
        force({F::text("argument key=\""), F::one_of(key_texts_)}, Phase::kPickKey);
      } else {
        key_ = KeyText();
        force({F::text("argument key=\"")}, Phase::kArgKey);
      }
      return;
    case Phase::kArgKey:
      key_.feed(tokenizer_.token_bytes(token));
      if (key_.complete()) {
        prop_ = -1;
        type_texts_ = {"string\""};
        for (const auto& f : free_types_) type_texts_.push_back(f.first);
        force({F::text(" type=\""), F::one_of(type_texts_), F::special(t_.sep)}, Phase::kPickType);
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
    case Phase::kAfterCall:
      if (token == t_.open)
        open_call({});
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
