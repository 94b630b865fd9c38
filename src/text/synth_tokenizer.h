// A small, deterministic Kimi-style tokenizer for synthetic checkpoints (the built-in default
// model), so that chat and serving work end to end without the real 2.8 MB K3 vocabulary.
//
// tiktoken.model: vocab_size - 256 ranks.  Ranks 0..255 are the single bytes (rank = byte value);
// the rest are BPE merges learned from built-in sample text (synth_sample_text.h) pre-tokenized
// with the K3 regex: repeatedly the most frequent adjacent pair (ties: the lowest pair of ids) is
// merged, in rank order, exactly as tiktoken later applies them.  If the sample runs out of pairs
// before the vocabulary is full, the remaining ranks are filler tokens starting with byte 0xFF,
// which never occurs in UTF-8 text (they decode but are never produced by encode).
// tokenizer_config.json: K3's 256 special tokens at the K3 offsets from vocab_size - 256
// ([BOS] = vocab_size-256, [EOS] +1, <|end_of_msg|> +2, <|open|> +3, <|close|> +4, <|sep|> +5, ...,
// [UNK] = vocab_size-2, [PAD] = vocab_size-1), with bos/eos/pad/unk and the tokenizer class.
// Tokenizer::from_model_dir(dir) loads it back.
#pragma once

#include <string>
#include <vector>

namespace k3 {

// Requires 512 <= vocab_size <= 1 << 20.  Creates dir if needed; throws k3::Error.
void write_synth_tokenizer(const std::string& dir, int vocab_size);

// The learned ordinary tokens, by rank (n_ranks >= 256).
std::vector<std::string> synth_tokenizer_tokens(int n_ranks);

}  // namespace k3
