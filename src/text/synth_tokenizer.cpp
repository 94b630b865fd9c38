#include "text/synth_tokenizer.h"

#include "base/error.h"
#include "text/bpe_trainer.h"
#include "text/synth_sample_text.h"
#include "text/tokenizer_writer.h"

namespace k3 {

std::vector<std::string> synth_tokenizer_tokens(int n_ranks) {
  K3_CHECK(n_ranks >= 256, "synthetic tokenizer: need at least 256 ranks, got ", n_ranks);
  return train_bpe_tokens(synth_sample_text(), n_ranks);
}

void write_synth_tokenizer(const std::string& dir, int vocab_size) {
  K3_CHECK(vocab_size >= 512 && vocab_size <= (1 << 20), "synthetic tokenizer: vocab_size ", vocab_size,
           " must be in [512, 1048576] (256 bytes + 256 special tokens at least)");
  write_k3_tokenizer_dir(dir, synth_tokenizer_tokens(vocab_size - 256));
}

}  // namespace k3
