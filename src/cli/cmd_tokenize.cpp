// k3 tokenize: UTF-8 text on stdin -> a JSON array of token ids on stdout.
//   k3 tokenize --tiktoken FILE [--pattern k3|cl100k|o200k] [--allow-special]
//   k3 tokenize --model DIR [--allow-special]        (the checkpoint's tokenizer, K3 pattern)
// Without either, the built-in default model's tokenizer is used.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "io/checkpoint.h"
#include "io/read_fd.h"
#include "model/k3_config.h"
#include "text/tokenizer.h"

namespace k3::cli {

void add_tokenizer_options(CLI::App* sub, TokenizerArgs& a) {
  sub->add_option("--tiktoken", a.tiktoken, "A tiktoken rank file (base64 token, rank per line)");
  sub->add_option("--pattern", a.pattern, "Pre-tokenization preset with --tiktoken: k3, cl100k or o200k")
      ->default_val("k3");
  sub->add_option("--model", a.model, "Checkpoint directory with tiktoken.model + tokenizer_config.json");
}

Tokenizer load_tokenizer(const TokenizerArgs& a) {
  K3_CHECK(a.tiktoken.empty() || a.model.empty(), "give --tiktoken or --model, not both");
  if (!a.tiktoken.empty()) return Tokenizer::from_tiktoken(a.tiktoken, parse_tokenizer_preset(a.pattern));
  K3_CHECK(a.pattern == "k3", "--pattern ", a.pattern, " needs --tiktoken (a checkpoint's tokenizer uses the k3 pattern)");
  const std::string dir = resolve_model_dir(a.model);
  Tokenizer tokenizer = Tokenizer::from_model_dir(dir);
  // A tokenizer-only directory has nothing to agree with; a checkpoint's must match its config.
  if (file_exists(dir + "/config.json")) check_tokenizer_against_config(tokenizer, load_model_config(dir));
  return tokenizer;
}

// Reads all of stdin with read(2): an iostream turns a read error (stdin redirected from a
// directory: EISDIR) into a silent end of input, so `k3 tokenize < dir` printed [] and exit 0.
std::string read_stdin() { return read_fd(STDIN_FILENO, "cannot read stdin"); }

void write_stdout(const std::string& data) {
  errno = 0;
  if (std::fwrite(data.data(), 1, data.size(), stdout) != data.size() || std::fflush(stdout) != 0)
    fail("cannot write stdout: ", errno != 0 ? std::strerror(errno) : "write failed");
}

void add_tokenize_command(CLI::App& app, Runner& run) {
  struct Args {
    TokenizerArgs tok;
    bool allow_special = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokenize", "Encode UTF-8 text from stdin; print a JSON array of token ids");
  add_tokenizer_options(sub, a->tok);
  sub->add_flag("--allow-special", a->allow_special, "Encode special-token text as special tokens");
  sub->callback([a, &run] {
    run = [a]() {
      const Tokenizer tokenizer = load_tokenizer(a->tok);
      const std::vector<int32_t> ids = tokenizer.encode(read_stdin(), a->allow_special);
      write_stdout(nlohmann::json(ids).dump() + "\n");
      return 0;
    };
  });
}

}  // namespace k3::cli
