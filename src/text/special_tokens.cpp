#include "text/special_tokens.h"

#include <charconv>

#include "base/error.h"

namespace k3 {

SpecialTokens::SpecialTokens(std::vector<SpecialToken> tokens, const std::string& source) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const SpecialToken& t = tokens_[i];
    K3_CHECK(!t.text.empty(), source, ": special token ", t.id, " has empty text");
    K3_CHECK(t.id >= 0, source, ": special token '", t.text, "' has a negative id");
    K3_CHECK(by_text_.emplace(t.text, t.id).second, source, ": special token '", t.text, "' appears twice");
    K3_CHECK(by_id_.emplace(t.id, i).second, source, ": special token id ", t.id, " appears twice");
    K3_CHECK(t.text.size() <= kMaxTextBytes, source, ": special token ", t.id, " is ", t.text.size(),
             " bytes long; at most ", kMaxTextBytes, " are supported");
    first_byte_[static_cast<unsigned char>(t.text[0])] = true;
    int32_t node = 0;
    for (const char ch : t.text) {
      const auto b = static_cast<unsigned char>(ch);
      int32_t child = trie_child(node, b);
      if (child < 0) {
        child = static_cast<int32_t>(trie_.size());
        trie_[static_cast<size_t>(node)].next.emplace_back(b, child);
        trie_.emplace_back();
      }
      node = child;
    }
    trie_[static_cast<size_t>(node)].id = t.id;
  }
}

std::string k3_special_token_text(int offset, int32_t id) {
  switch (offset) {
    case 0: return "[BOS]";
    case 1: return "[EOS]";
    case 2: return "<|end_of_msg|>";
    case 3: return "<|open|>";
    case 4: return "<|close|>";
    case 5: return "<|sep|>";
    case 6: return "[start_header_id]";
    case 7: return "[end_header_id]";
    case 9: return "[EOT]";
    case 18: return "<|media_begin|>";
    case 19: return "<|media_content|>";
    case 20: return "<|media_end|>";
    case 21: return "<|media_pad|>";
    case 65: return "<osagent_mode>";
    case 254: return "[UNK]";
    case 255: return "[PAD]";
    default: return "<|reserved_token_" + std::to_string(id) + "|>";
  }
}

SpecialTokens SpecialTokens::k3_defaults(int32_t base) {
  std::vector<SpecialToken> tokens;
  for (int i = 0; i < 256; ++i) tokens.push_back({k3_special_token_text(i, base + i), base + i});
  return SpecialTokens(std::move(tokens), "K3 special tokens");
}

SpecialTokens SpecialTokens::from_kimi_config(const nlohmann::json& config, int32_t base, const std::string& source) {
  std::unordered_map<int32_t, std::string> named;
  if (config.contains("added_tokens_decoder")) {
    const nlohmann::json& decoder = config.at("added_tokens_decoder");
    K3_CHECK(decoder.is_object(), source, ": added_tokens_decoder must be an object");
    for (const auto& [key, entry] : decoder.items()) {
      int32_t id = -1;
      const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      K3_CHECK(ec == std::errc() && ptr == key.data() + key.size(), source, ": added_tokens_decoder key '", key,
               "' is not a token id");
      // Only the plain decimal form: "0163584" next to "163584" would name id 163584 twice, and
      // the later entry would silently replace the earlier one.
      K3_CHECK(key == std::to_string(id), source, ": added_tokens_decoder key '", key, "' is not written as a plain ",
               "decimal token id (", id, ")");
      K3_CHECK(entry.is_object() && entry.contains("content") && entry.at("content").is_string(), source,
               ": added_tokens_decoder[\"", key, "\"].content must be a string");
      K3_CHECK(id >= base, source, ": added_tokens_decoder[\"", key, "\"] collides with the ordinary vocabulary (",
               base, " ranks)");
      // (An id near 2^31 overflowed the vocabulary size computed from it.)
      K3_CHECK(id < (1 << 30), source, ": added_tokens_decoder key '", key, "' is beyond the largest supported id (2^30)");
      named[id] = entry.at("content").get<std::string>();
    }
  }
  std::vector<SpecialToken> tokens;
  for (int32_t id = base; id < base + 256; ++id) {
    auto it = named.find(id);
    tokens.push_back({it != named.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>", id});
  }
  for (const auto& [id, text] : named)
    if (id >= base + 256) tokens.push_back({text, id});
  return SpecialTokens(std::move(tokens), source);
}

std::optional<int32_t> SpecialTokens::id(std::string_view text) const {
  auto it = by_text_.find(std::string(text));
  if (it == by_text_.end()) return std::nullopt;
  return it->second;
}

const std::string* SpecialTokens::text(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second].text;
}

int32_t SpecialTokens::trie_child(int32_t node, unsigned char b) const {
  for (const auto& [byte, to] : trie_[static_cast<size_t>(node)].next)
    if (byte == b) return to;
  return -1;
}

std::optional<SpecialMatch> SpecialTokens::find(std::string_view text, size_t from) const {
  if (tokens_.empty()) return std::nullopt;
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    std::optional<SpecialMatch> longest;
    int32_t node = 0;
    for (size_t end = pos; end < text.size(); ++end) {
      const auto b = static_cast<unsigned char>(text[end]);
      const int32_t child = trie_child(node, b);
      if (child < 0) break;
      node = child;
      if (trie_[static_cast<size_t>(node)].id >= 0) longest = SpecialMatch{pos, end + 1 - pos, trie_[static_cast<size_t>(node)].id};
    }
    if (longest) return longest;
  }
  return std::nullopt;
}

}  // namespace k3
