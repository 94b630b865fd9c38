#include "engine/json_constraint.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "text/tokenizer.h"

namespace k3 {

VocabIndex::VocabIndex(const Tokenizer& tokenizer) {
  std::vector<std::pair<std::string, int32_t>> all;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id)) continue;
    try {
      std::string_view b = tokenizer.token_bytes(id);
      if (!b.empty()) all.emplace_back(std::string(b), id);
    } catch (const Error&) {  // an id without bytes (a gap in the ranks)
    }
  }
  std::sort(all.begin(), all.end());
  ids_.reserve(all.size());
  bytes_.reserve(all.size());
  lcp_.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    size_t l = 0;
    if (i > 0) {
      const std::string& a = all[i - 1].first;
      const std::string& b = all[i].first;
      while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
    }
    lcp_.push_back(static_cast<uint32_t>(l));
    ids_.push_back(all[i].second);
    bytes_.push_back(std::move(all[i].first));
  }
}

std::vector<int32_t> VocabIndex::prefixes_of(std::string_view text) const {
  std::vector<int32_t> out;
  for (size_t len = 1; len <= text.size(); ++len) {
    const std::string_view p = text.substr(0, len);
    auto it = std::lower_bound(bytes_.begin(), bytes_.end(), p, [](const std::string& a, std::string_view b) { return a < b; });
    // No token starts with p: none equals a longer prefix either.  (Stopping here matters: for a
    // forced tool name of 100 KB, walking on to the end of the text would cost 100 KB of searches
    // per generated token.)
    if (it == bytes_.end() || std::string_view(*it).substr(0, len) != p) break;
    if (*it == p) out.push_back(ids_[static_cast<size_t>(it - bytes_.begin())]);
  }
  return out;
}

std::string_view json_finish_order() {
  static const std::string order = [] {
    std::string o = "}]\",:0nft{[";  // ',' before '0': a number ends rather than grows
    const auto add = [&](int lo, int hi) {
      for (int c = lo; c <= hi; ++c)
        if (o.find(static_cast<char>(c)) == std::string::npos && c != ' ') o.push_back(static_cast<char>(c));
    };
    add('a', 'z');
    add('A', 'Z');
    add('1', '9');
    add(0x21, 0x7e);
    add(0x80, 0xff);
    add(0x01, 0x1f);
    o.push_back(' ');
    return o;
  }();
  return order;
}

size_t VocabIndex::longest_index(std::string_view text) const {
  size_t best = bytes_.size();
  for (size_t len = 1; len <= text.size(); ++len) {
    const std::string_view p = text.substr(0, len);
    auto it = std::lower_bound(bytes_.begin(), bytes_.end(), p, [](const std::string& a, std::string_view b) { return a < b; });
    if (it == bytes_.end() || std::string_view(*it).substr(0, len) != p) break;
    if (*it == p) best = static_cast<size_t>(it - bytes_.begin());
  }
  return best;
}

int32_t VocabIndex::longest_prefix_of(std::string_view text) const {
  const size_t i = longest_index(text);
  return i < ids_.size() ? ids_[i] : -1;
}

int64_t VocabIndex::longest_match_tokens(std::string_view text) const {
  int64_t n = 0;
  while (!text.empty()) {
    const size_t i = longest_index(text);
    text.remove_prefix(i < ids_.size() ? bytes_[i].size() : 1);
    ++n;
  }
  return n;
}

void check_schema_decodable(const CompiledSchema& schema) {
  using S = CompiledSchema;
  const size_t count = static_cast<size_t>(schema.any_node()) + 1;
  // min_frames: the fewest nested containers a value of the node takes (compile() counts them).
  const auto fits = [&](int i) { return schema.node(i).min_frames <= SchemaValidator::kMaxFrames; };
  // Every node the decoder can reach, with its path for the message.
  std::vector<std::pair<int, std::string>> todo = {{0, "#"}};
  std::vector<char> seen(count, 0);
  seen[0] = 1;
  while (!todo.empty()) {
    const int i = todo.back().first;
    const std::string where = std::move(todo.back().second);
    todo.pop_back();
    K3_CHECK(fits(i), "json_schema: no value the decoder can produce satisfies the schema at ", where,
             " (a required property, minItems item or alternative that refers back to itself, or more than ",
             SchemaValidator::kMaxFrames, " nested objects / arrays)");
    const S::Node& n = schema.node(i);
    const auto visit = [&](int next, std::string path) {
      if (!seen[static_cast<size_t>(next)]) {
        seen[static_cast<size_t>(next)] = 1;
        todo.emplace_back(next, std::move(path));
      }
    };
    if (n.is_enum) continue;
    for (size_t a = 0; a < n.alternatives.size(); ++a) visit(n.alternatives[a], cat(where, "/anyOf/", a));
    if (!n.alternatives.empty()) continue;
    if (n.types & S::kObject)
      for (const S::Property& p : n.properties) visit(p.node, cat(where, "/properties/", p.name));
    if ((n.types & S::kArray) && n.max_items > 0 && n.items >= 0) visit(n.items, cat(where, "/items"));
  }
}

std::shared_ptr<const CompiledSchema> compile_decodable_schema(const ojson& schema) {
  auto compiled = std::make_shared<const CompiledSchema>(CompiledSchema::compile(schema));
  check_schema_decodable(*compiled);
  return compiled;
}

namespace {

// "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>": the frame after the JSON.
std::vector<ForcedSequence::Item> json_to_end(const FrameTokens& t) {
  using F = ForcedSequence;
  return {F::special(t.close), F::text("response"), F::special(t.sep), F::special(t.close), F::text("message"),
          F::special(t.sep), F::special(t.end)};
}

}  // namespace

ChatJsonConstraint::ChatJsonConstraint(std::shared_ptr<const VocabIndex> index, const Tokenizer& tokenizer,
                                       bool thinking, std::vector<int32_t> stop_tokens,
                                       std::shared_ptr<const CompiledSchema> schema, int64_t max_tokens)
    : index_(std::move(index)),
      tokenizer_(tokenizer),
      stops_(std::move(stop_tokens)),
      t_(tokenizer),
      schema_(std::move(schema)),
      json_(JsonValidator(true)),
      budget_(std::max<int64_t>(max_tokens, 0)),
      reasoning_budget_(budget_ / 2) {
  if (schema_) json_ = SchemaValidator(schema_.get());
  phase_ = thinking ? Phase::kReasoning : Phase::kJson;
}

void ChatJsonConstraint::force(std::vector<ForcedSequence::Item> items, Phase then) {
  forced_.assign(std::move(items));
  after_forced_ = then;
  phase_ = Phase::kForced;
}

std::optional<std::string> ChatJsonConstraint::json_finish() const {
  return std::visit([](const auto& r) { return finish_text(r, [](const auto& v) { return v.complete(); }); }, json_);
}

int64_t ChatJsonConstraint::tokens_to_finish() const {
  // A JSON text with no completion found counts as the whole budget: finishing cannot help.
  const auto json_tokens = [&]() -> int64_t {
    const std::optional<std::string> rest = json_finish();
    return rest ? index_->longest_match_tokens(*rest) : budget_;
  };
  const int64_t frame = ForcedSequence::tokens(*index_, json_to_end(t_));
  switch (phase_) {
    case Phase::kReasoning: return 1 + ForcedSequence::tokens(*index_, think_to_response(t_)) + json_tokens() + frame;
    case Phase::kForced:
      return forced_.tokens_left(*index_) + (after_forced_ == Phase::kJson ? json_tokens() + frame : 0);
    case Phase::kJson: return json_tokens() + frame;
    case Phase::kEnd: return 0;
  }
  return 0;
}

void ChatJsonConstraint::mask(float* logits, int64_t vocab) {
  if (budget_ > 0 && !finishing_ && phase_ != Phase::kEnd && budget_ - generated_ <= tokens_to_finish() + kFinishSlack)
    finishing_ = true;
  switch (phase_) {
    case Phase::kReasoning:
      if (finishing_ || (budget_ > 0 && generated_ >= reasoning_budget_)) {
        keep_only(logits, vocab, {t_.close});  // the reasoning budget is spent
        return;
      }
      forbid(logits, vocab, stops_);
      return;
    case Phase::kForced:
      keep_only(logits, vocab, forced_.allowed(*index_, finishing_));
      return;
    case Phase::kEnd:  // the message is closed: only a stop (with ignore_eos, anything)
      if (!stops_.empty()) keep_only(logits, vocab, stops_);
      return;
    case Phase::kJson: {
      if (finishing_) {
        const std::optional<std::string> rest = json_finish();
        const int32_t next = rest ? index_->longest_prefix_of(*rest) : -1;
        if (next >= 0) {
          keep_only(logits, vocab, {next});
          return;
        }
      }
      const std::vector<int32_t> ok = std::visit([&](const auto& r) { return viable_tokens(*index_, r); }, json_);
      K3_CHECK(!ok.empty(), "no token can continue the JSON text");
      keep_only(logits, vocab, ok);
      return;
    }
  }
}

void ChatJsonConstraint::accept(int32_t token) {
  using F = ForcedSequence;
  ++generated_;
  switch (phase_) {
    case Phase::kReasoning:
      if (token == t_.close)
        force(think_to_response(t_), Phase::kJson);
      else if (token == t_.open)
        force({F::text("response"), F::special(t_.sep)}, Phase::kJson);
      return;
    case Phase::kForced:
      forced_.accept(token, tokenizer_);
      if (forced_.empty()) phase_ = after_forced_;
      return;
    case Phase::kJson:
      if (std::visit([&](auto& r) { return r.feed(tokenizer_.token_bytes(token)) && r.complete(); }, json_))
        force(json_to_end(t_), Phase::kEnd);
      return;
    case Phase::kEnd:
      return;
  }
}

}  // namespace k3
