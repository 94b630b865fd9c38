#include "engine/forced_sequence.h"

#include <algorithm>

#include "engine/json_constraint.h"
#include "text/tokenizer.h"

namespace k3 {

FrameTokens::FrameTokens(const Tokenizer& tokenizer)
    : open(tokenizer.require_special("<|open|>")),
      close(tokenizer.require_special("<|close|>")),
      sep(tokenizer.require_special("<|sep|>")),
      end(tokenizer.require_special("<|end_of_msg|>")) {}

void ForcedSequence::assign(std::vector<Item> items) {
  items_.assign(items.begin(), items.end());
  pos_ = 0;
}

std::vector<int32_t> ForcedSequence::allowed(const VocabIndex& index) const {
  if (items_.empty()) return {};
  const Item& f = items_.front();
  if (f.special >= 0) return {f.special};
  std::vector<int32_t> out;
  for (const std::string& t : f.texts) {
    const std::vector<int32_t> p = index.prefixes_of(std::string_view(t).substr(pos_));
    out.insert(out.end(), p.begin(), p.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void ForcedSequence::accept(int32_t token, const Tokenizer& tokenizer) {
  if (items_.empty()) return;
  Item& f = items_.front();
  bool done = f.special >= 0;
  if (!done) {
    const std::string_view b = tokenizer.token_bytes(token);
    std::vector<std::string> keep;
    for (std::string& t : f.texts)
      if (std::string_view(t).substr(pos_).substr(0, b.size()) == b) keep.push_back(std::move(t));
    f.texts = std::move(keep);
    pos_ += b.size();
    const auto whole = std::find_if(f.texts.begin(), f.texts.end(), [&](const std::string& t) { return t.size() == pos_; });
    done = f.texts.empty() || whole != f.texts.end();
    if (whole != f.texts.end()) last_ = *whole;
  }
  if (done) {
    items_.pop_front();
    pos_ = 0;
  }
}

std::vector<ForcedSequence::Item> think_to_response(const FrameTokens& t) {
  using F = ForcedSequence;
  return {F::text("think"), F::special(t.sep), F::special(t.open), F::text("response"), F::special(t.sep)};
}

}  // namespace k3
