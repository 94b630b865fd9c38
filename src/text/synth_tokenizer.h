// A small, deterministic Kimi-style tokenizer for synthetic checkpoints (the built-in default
// model), so that chat and serving work end to end without the real 2.8 MB K3 vocabulary.
//
// tiktoken.model: vocab_size - 256 ranks, learned by the BPE trainer (bpe_trainer.h) from built-in
// sample text (synth_sample_text.h): the 256 single bytes, then merges in the order tiktoken applies
// them, then, once the sample runs out of pairs, filler tokens starting with byte 0xFF (they decode
// but are never produced by encode).
// tokenizer_config.json: K3's 256 special tokens at the K3 offsets from vocab_size - 256
// (tokenizer_writer.h).  Tokenizer::from_model_dir(dir) loads it back.
#pragma once

#include <string>
#include <vector>

namespace k3 {

// Requires 512 <= vocab_size <= 1 << 20.  Creates dir if needed; throws k3::Error.
void write_synth_tokenizer(const std::string& dir, int vocab_size);

// The learned ordinary tokens, by rank (n_ranks >= 256).
std::vector<std::string> synth_tokenizer_tokens(int n_ranks);

}  // namespace k3
