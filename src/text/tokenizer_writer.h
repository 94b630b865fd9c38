// Writes a tokenizer directory in the K3 checkpoint layout, which Tokenizer::from_model_dir(dir)
// loads back:
//   tiktoken.model: the given ordinary tokens, token r at rank r (tokens.size() = vocab_size - 256);
//   tokenizer_config.json: K3's 256 special tokens at the K3 offsets from vocab_size - 256
//     ([BOS] = vocab_size-256, [EOS] +1, <|end_of_msg|> +2, <|open|> +3, <|close|> +4, <|sep|> +5,
//     ..., [UNK] = vocab_size-2, [PAD] = vocab_size-1), with bos/eos/pad/unk and the tokenizer class.
// Used by the synthetic tokenizer (synth_tokenizer.h) and `k3 train-tokenizer` (bpe_trainer.h).
#pragma once

#include <string>
#include <vector>

namespace k3 {

// Requires 256 <= tokens.size() <= (1 << 20) - 256 and tokens that BpeRanks accepts (unique; an
// empty one leaves its rank unused); both are checked before anything is written.  Creates dir if
// needed; each file is replaced atomically.  Throws k3::Error.
void write_k3_tokenizer_dir(const std::string& dir, const std::vector<std::string>& tokens);

}  // namespace k3
