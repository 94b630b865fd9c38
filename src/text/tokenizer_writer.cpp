#include "text/tokenizer_writer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/safetensors_writer.h"
#include "text/bpe_ranks.h"
#include "text/special_tokens.h"

namespace k3 {

void write_k3_tokenizer_dir(const std::string& dir, const std::vector<std::string>& tokens) {
  const size_t n_ranks = tokens.size();
  K3_CHECK(n_ranks >= 256 && n_ranks <= (1u << 20) - 256, "tokenizer: ", n_ranks,
           " ordinary tokens is out of range [256, 1048320] (vocab_size 512 to 1048576)");
  const BpeRanks ranks(tokens);  // checks the tokens before anything is written
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  K3_CHECK(!ec, "cannot create ", dir, ": ", ec.message());
  write_file_atomically(dir + "/tiktoken.model", ranks.to_tiktoken());

  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  const SpecialTokens specials = SpecialTokens::k3_defaults(static_cast<int32_t>(n_ranks));
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
  write_file_atomically(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace k3
