// The special (control) tokens of a tokenizer: their literal text and ids, and a search for the
// earliest occurrence of any of them in text (used when specials are allowed in an encode).
//
// Kimi checkpoints reserve 256 special ids right after the ordinary ranks (K3: 163584..163839);
// each takes its text from tokenizer_config.json's `added_tokens_decoder`, else
// `<|reserved_token_{id}|>`.  k3_special_token_text() gives K3's own names by offset (those of
// the released tokenizer_config.json), used for the `k3` preset and the synthetic tokenizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3 {

struct SpecialToken {
  std::string text;
  int32_t id = -1;
};

// Where a special token occurs: byte offset and length in the searched text, and its id.
struct SpecialMatch {
  size_t pos = 0;
  size_t len = 0;
  int32_t id = -1;
};

class SpecialTokens {
 public:
  // Longest special token text (Kimi's are under 32 bytes).
  static constexpr size_t kMaxTextBytes = 256;

  SpecialTokens() = default;
  // Throws k3::Error on a duplicate text or id, or a text longer than kMaxTextBytes (naming `source`).
  SpecialTokens(std::vector<SpecialToken> tokens, const std::string& source);

  // The 256 Kimi specials at base..base+255, named from a parsed tokenizer_config.json.
  static SpecialTokens from_kimi_config(const nlohmann::json& config, int32_t base, const std::string& source);
  // K3's table at base..base+255.
  static SpecialTokens k3_defaults(int32_t base);

  const std::vector<SpecialToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }
  std::optional<int32_t> id(std::string_view text) const;
  // Text of a special id, or nullptr.
  const std::string* text(int32_t id) const;
  // The earliest occurrence at or after `from` (the longest one if several start there).
  std::optional<SpecialMatch> find(std::string_view text, size_t from) const;

 private:
  std::vector<SpecialToken> tokens_;
  std::unordered_map<std::string, int32_t> by_text_;
  std::unordered_map<int32_t, size_t> by_id_;
  // The texts as a byte trie (node 0 the root): find() walks it from each position, so a search
  // costs at most the text length times the longest text (kMaxTextBytes), however many specials
  // and lengths a tokenizer_config.json lists.  (Hashing every distinct length at every position
  // would take minutes on a hostile config of many long texts sharing a first byte.)
  struct TrieNode {
    std::vector<std::pair<unsigned char, int32_t>> next;  // byte -> child node
    int32_t id = -1;                                      // a special's id if its text ends here
  };
  std::vector<TrieNode> trie_ = std::vector<TrieNode>(1);
  int32_t trie_child(int32_t node, unsigned char b) const;  // -1: none
  bool first_byte_[256] = {};
};

// K3's special token text at offset 0..255 from the first special id (`id` = that token's id,
// used for the `<|reserved_token_{id}|>` names).
std::string k3_special_token_text(int offset, int32_t id);

}  // namespace k3
