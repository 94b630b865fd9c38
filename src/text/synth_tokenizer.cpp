#include "text/synth_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "base/error.h"
#include "io/safetensors_writer.h"
#include "text/bpe_ranks.h"
#include "text/pretokenizer.h"
#include "text/special_tokens.h"
#include "text/synth_sample_text.h"
#include "text/tokenizer_presets.h"

namespace k3 {
namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

std::vector<Word> sample_words() {
  std::map<std::string, int64_t> counts;  // ordered, so training is deterministic
  Pretokenizer(preset_pattern(TokenizerPreset::kK3)).for_each_piece(synth_sample_text(), [&](std::string_view p) {
    ++counts[std::string(p)];
  });
  std::vector<Word> words;
  for (const auto& [piece, count] : counts) {
    Word w;
    w.count = count;
    for (const char c : piece) w.symbols.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(w));
  }
  return words;
}

void write_file(const std::string& path, const std::string& data) { write_file_atomically(path, data); }

}  // namespace

std::vector<std::string> synth_tokenizer_tokens(int n_ranks) {
  K3_CHECK(n_ranks >= 256, "synthetic tokenizer: need at least 256 ranks, got ", n_ranks);
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    ids[tokens.back()] = b;
  }
  std::vector<Word> words = sample_words();
  while (static_cast<int>(tokens.size()) < n_ranks) {
    std::unordered_map<uint64_t, int64_t> pairs;  // (a << 32 | b) -> weighted count
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
        pairs[(uint64_t(w.symbols[i]) << 32) | uint32_t(w.symbols[i + 1])] += w.count;
    if (pairs.empty()) break;
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pairs)  // the most frequent pair; ties: the lowest (a, b)
      if (count > best_count || (count == best_count && key < best)) {
        best = key;
        best_count = count;
      }
    const int32_t a = static_cast<int32_t>(best >> 32), b = static_cast<int32_t>(best & 0xFFFFFFFFu);
    const std::string merged = tokens[a] + tokens[b];
    auto found = ids.find(merged);
    int32_t id = 0;
    if (found != ids.end()) {
      id = found->second;
    } else {
      id = static_cast<int32_t>(tokens.size());
      tokens.push_back(merged);
      ids[merged] = id;
    }
    for (Word& w : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(out);
    }
    // A word that is one token has no pairs left to count.
    words.erase(std::remove_if(words.begin(), words.end(), [](const Word& w) { return w.symbols.size() < 2; }),
                words.end());
  }
  for (uint32_t k = 0; static_cast<int>(tokens.size()) < n_ranks; ++k)
    tokens.push_back(std::string("\xFF") + static_cast<char>((k >> 16) & 0xFF) + static_cast<char>((k >> 8) & 0xFF) +
                     static_cast<char>(k & 0xFF));
  return tokens;
}

void write_synth_tokenizer(const std::string& dir, int vocab_size) {
  K3_CHECK(vocab_size >= 512 && vocab_size <= (1 << 20), "synthetic tokenizer: vocab_size ", vocab_size,
           " must be in [512, 1048576] (256 bytes + 256 special tokens at least)");
  const int n_ranks = vocab_size - 256;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  K3_CHECK(!ec, "cannot create ", dir, ": ", ec.message());
  write_file(dir + "/tiktoken.model", BpeRanks(synth_tokenizer_tokens(n_ranks)).to_tiktoken());

  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  const SpecialTokens specials = SpecialTokens::k3_defaults(n_ranks);
  for (const SpecialToken& s : specials.tokens())
    decoder[std::to_string(s.id)] = {{"content", s.text}, {"lstrip", false}, {"normalized", false},
                                     {"rstrip", false}, {"single_word", false}, {"special", true}};
  nlohmann::ordered_json config = {
      {"added_tokens_decoder", decoder},
      {"additional_special_tokens", {"<|end_of_msg|>"}},
      {"bos_token", "[BOS]"},
      {"eos_token", "[EOS]"},
      {"pad_token", "[PAD]"},
      {"unk_token", "[UNK]"},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", 1048576},
      {"tokenizer_class", "TikTokenTokenizer"},
  };
  write_file(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace k3
