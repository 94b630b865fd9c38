// The `k3` subcommands.  Each add_*_command() registers one subcommand on the app and sets
// `run` when it is chosen; main() parses, then runs it inside the error boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace k3::cli {

using Runner = std::function<int()>;

void add_inspect_command(CLI::App& app, Runner& run);
void add_generate_command(CLI::App& app, Runner& run);
void add_logits_command(CLI::App& app, Runner& run);
void add_synth_command(CLI::App& app, Runner& run);

// Shared helpers.
// Parses "1,2,3" (commas and/or spaces); throws k3::Error naming the bad entry.
std::vector<int32_t> parse_token_ids(const std::string& text);
// --model default: $K3_DEFAULT_MODEL, else ~/.cache/k3/default-tiny; synthesised on first use.
std::string default_model_dir();
// Resolves an empty --model to the default model, creating it when needed.
std::string resolve_model_dir(const std::string& given);

}  // namespace k3::cli
