// k3 train-tokenizer: learn a byte-level BPE vocabulary from a text file and write it as a K3
// tokenizer directory, for a small model trained from scratch:
//   k3 train-tokenizer --text FILE [--vocab-size N] --out DIR
// DIR gets tiktoken.model (the 256 bytes, then the merges learned from FILE with the K3
// pre-tokenization regex; text/bpe_trainer.h) and tokenizer_config.json (K3's 256 special tokens
// at vocab_size - 256; text/tokenizer_writer.h), the layout `k3 synth` writes; `k3 tokenize --model
// DIR` and Tokenizer::from_model_dir load it.  Prints DIR.
#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "base/log.h"
#include "base/progress.h"
#include "cli/commands.h"
#include "io/checkpoint.h"
#include "text/bpe_trainer.h"
#include "text/tokenizer_writer.h"

namespace k3::cli {

void add_train_tokenizer_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string text, out;
    int vocab_size = 4096;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("train-tokenizer", "Learn a byte-level BPE tokenizer from a text file");
  sub->add_option("--text", a->text, "UTF-8 training text (ill-formed bytes are read as U+FFFD)")->required();
  sub->add_option("--vocab-size", a->vocab_size,
                  "vocab_size: 256 bytes + merges + 256 special tokens (512 to 1048576; default 4096)");
  sub->add_option("--out", a->out, "Output directory (created if needed)")->required();
  sub->callback([a, &run] {
    run = [a]() {
      refuse_several_ranks("train-tokenizer");
      K3_CHECK(a->vocab_size >= 512 && a->vocab_size <= (1 << 20),
               "--vocab-size: must be in [512, 1048576] (256 bytes + 256 special tokens at least; got ",
               a->vocab_size, ")");
      const std::string text = read_text_file(a->text);
      K3_CHECK(!text.empty(), a->text, ": the file is empty; there is no text to learn merges from");
      const int n_ranks = a->vocab_size - 256;

      std::vector<BpeWord> words;
      {
        Progress progress("pre-tokenizing " + a->text, text.size() >> 20, "MiB");
        words = count_bpe_words(text, [&](int64_t bytes) { progress.set(static_cast<uint64_t>(bytes) >> 20); });
      }
      std::vector<std::string> tokens;
      {
        Progress progress("learning merges", n_ranks - 256, "tokens");
        tokens = learn_bpe_tokens(words, n_ranks, [&](int64_t n) { progress.set(static_cast<uint64_t>(n - 256)); });
      }
      // Filler tokens (first byte 0xFF) fill the ranks the text had no pairs for.
      const auto filler = std::count_if(tokens.begin() + 256, tokens.end(),
                                        [](const std::string& t) { return static_cast<unsigned char>(t[0]) == 0xFF; });
      if (filler > 0)
        log_warn(a->text, " has pairs for only ", n_ranks - 256 - filler, " merges; the last ", filler,
                 " ordinary ranks are filler tokens that encoding never produces (give more text or a smaller "
                 "--vocab-size)");
      log_info("train-tokenizer: ", words.size(), " distinct pieces, ", n_ranks - 256 - filler, " merges");
      write_k3_tokenizer_dir(a->out, tokens);
      std::printf("%s\n", a->out.c_str());
      return 0;
    };
  });
}

}  // namespace k3::cli
