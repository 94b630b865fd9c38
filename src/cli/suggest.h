// "Did you mean ...?" for a mistyped subcommand or option.  CLI11 says only that an argument was
// not expected; this finds the argument and the nearest name it could have meant.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace k3::cli {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring characters ("chta" -> "chat") each cost 1.
int edit_distance(std::string_view a, std::string_view b);

// The candidate `typed` most likely meant: the nearest within a distance that grows with the
// name's length, or the only candidate `typed` is a prefix of ("gen" -> "generate").  Empty when
// none is close enough.
std::string nearest_name(const std::string& typed, const std::vector<std::string>& candidates);

// After a failed parse of argv by `app` (subcommands registered): one line naming the first
// argument that is neither a subcommand nor an option of the chosen subcommand (or of k3 itself)
// and the nearest name, e.g. "k3 generate: unknown option '--max-token'; did you mean
// '--max-tokens'?".  Empty when every argument is known or nothing is near.
std::string suggest_for_unknown_argument(const CLI::App& app, int argc, const char* const* argv);

}  // namespace k3::cli
