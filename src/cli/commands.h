// The `k3` subcommands.  Each add_*_command() registers one subcommand on the app and sets
// `run` when it is chosen; main() parses, then runs it inside the error boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace k3 {
class Tokenizer;
}

namespace k3::cli {

using Runner = std::function<int()>;

void add_inspect_command(CLI::App& app, Runner& run);
void add_generate_command(CLI::App& app, Runner& run);
void add_logits_command(CLI::App& app, Runner& run);
void add_synth_command(CLI::App& app, Runner& run);
void add_bench_command(CLI::App& app, Runner& run);
void add_chat_command(CLI::App& app, Runner& run);
void add_tokenize_command(CLI::App& app, Runner& run);
void add_train_tokenizer_command(CLI::App& app, Runner& run);
void add_detokenize_command(CLI::App& app, Runner& run);
void add_render_chat_command(CLI::App& app, Runner& run);
void add_vision_embed_command(CLI::App& app, Runner& run);
void add_serve_command(CLI::App& app, Runner& run);
void add_loadtest_command(CLI::App& app, Runner& run);
void add_plan_command(CLI::App& app, Runner& run);
// `k3 env`: sandboxed agent environments (cmd_env.cpp registers the group; one file per subcommand).
void add_env_command(CLI::App& app, Runner& run);
void add_env_serve_command(CLI::App& env, Runner& run);
void add_env_run_command(CLI::App& env, Runner& run);
void add_env_bench_command(CLI::App& env, Runner& run);

// Shared helpers.
// Option checks whose messages name the rule ("must be >= 0 (got -1)"): CLI11's NonNegativeNumber
// and PositiveNumber print their bounds as 300-digit numbers.
extern const CLI::Validator kNonNegative;
extern const CLI::Validator kPositive;
// Sizes in MiB (may be fractional): 0 allowed or not, at most 1 TiB, so the byte count cannot overflow.
extern const CLI::Validator kMebibytesNonNegative;
extern const CLI::Validator kMebibytesPositive;
// Seeds and byte counts held in uint64_t: digits only, no sign, no wrap past 2^64-1.
extern const CLI::Validator kUnsigned64;
// For --model and other paths whose absence means a default: an explicit empty value (an unset
// shell variable) is an error, not the default.
extern const CLI::Validator kNonEmpty;
// "1.50 GiB" (powers of 1024) and "2.779T" / "104.190B" / "8.616M" parameter counts.
std::string human_bytes(double bytes);
std::string human_count(double n);
// Parses "1,2,3" (commas and/or spaces); throws k3::Error naming the bad entry.
std::vector<int32_t> parse_token_ids(const std::string& text);
// k3's cache folder ($XDG_CACHE_HOME/k3, ~/.cache/k3 or /tmp/k3), created when missing.
std::string cache_dir();
// --model default: $K3_DEFAULT_MODEL; else the trained demo model shipped in the source tree
// (models/k3-demo, see train/); else ~/.cache/k3/default-tiny-v3, synthesised (k3 synth --preset
// tiny) on first use.
std::string default_model_dir();
// --precision fp32 | bf16 | bf16-all on sub, into value (kernels/linear.h: Precision).
void add_precision_option(CLI::App* sub, std::string& value);
// Resolves an empty --model to the default model, creating it when needed.
std::string resolve_model_dir(const std::string& given);
// Over several ranks, `serve` and `chat` run their front on rank 0 and the other ranks follow
// its forward steps (model/state_mirror.h).  On a follower: loads the model from `dir` as rank 0
// does, follows until rank 0 stops, and returns true (the command then ends).  On rank 0: turns
// the recording on and returns false; one process: returns false.
bool follow_rank_zero(const std::string& dir);
// Throws k3::Error when launched with several ranks (mpirun -np R, R > 1): for the commands that
// do not run over ranks (yet).
void refuse_several_ranks(const char* command);

// Tokenizer selection shared by tokenize / detokenize / render-chat (cmd_tokenize.cpp):
// --tiktoken FILE [--pattern k3|cl100k|o200k], or --model DIR, else the default model's tokenizer.
struct TokenizerArgs {
  std::string tiktoken, pattern = "k3", model;
};
void add_tokenizer_options(CLI::App* sub, TokenizerArgs& args);
Tokenizer load_tokenizer(const TokenizerArgs& args);
// All of stdin (binary); stdout written exactly, throwing k3::Error on failure.
std::string read_stdin();
void write_stdout(const std::string& data);

}  // namespace k3::cli
