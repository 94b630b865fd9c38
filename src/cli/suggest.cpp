#include "cli/suggest.h"

#include <algorithm>
#include <cstdlib>

namespace k3::cli {

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between a[0, i) and b[0, j).
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::string nearest_name(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = 0;
  for (const std::string& c : candidates) {
    const int dist = edit_distance(typed, c);
    // One edit per four characters (at least one): "genrate" -> "generate", "--max-token" ->
    // "--max-tokens", but "run" is not taken for "plan".
    const int allowed = std::max<int>(1, static_cast<int>(c.size()) / 4);
    if (dist <= allowed && (best.empty() || dist < best_distance)) {
      best = c;
      best_distance = dist;
    }
  }
  if (!best.empty()) return best;
  // A unique prefix of at least three characters (two dashes do not count).
  const size_t dashes = typed.find_first_not_of('-');
  if (dashes == std::string::npos || typed.size() - dashes < 3) return {};
  for (const std::string& c : candidates) {
    if (c.size() <= typed.size() || c.compare(0, typed.size(), typed) != 0) continue;
    if (!best.empty()) return {};  // more than one: no guess
    best = c;
  }
  return best;
}

namespace {

// The options of `app` by the names a user types ("--max-tokens", "-v").
void add_option_names(const CLI::App& app, std::vector<std::string>* names) {
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names->push_back("--" + l);
    for (const std::string& s : o->get_snames()) names->push_back("-" + s);
  }
}

// The option `name` ("--ctx", "-v") names in `app`, or null.
const CLI::Option* find_option(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* o : app.get_options()) {
    if (name.rfind("--", 0) == 0) {
      for (const std::string& l : o->get_lnames())
        if (name == "--" + l) return o;
    } else {
      for (const std::string& s : o->get_snames())
        if (name == "-" + s) return o;
    }
  }
  return nullptr;
}

bool is_number(const std::string& s) {
  char* end = nullptr;
  (void)std::strtod(s.c_str(), &end);
  return !s.empty() && end != nullptr && *end == '\0';
}

}  // namespace

std::string suggest_for_unknown_argument(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* sub = nullptr;  // the deepest subcommand named so far
  std::string path;               // " env run": how it was named
  std::vector<std::string> subcommands;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    subcommands.push_back(s->get_name());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-' && !is_number(arg)) {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(0, eq);
      const CLI::Option* o = sub != nullptr ? find_option(*sub, name) : nullptr;
      if (o == nullptr) o = find_option(app, name);
      // Short flags run together ("-vv", "-qv"): known when each letter is.
      if (o == nullptr && name.size() > 2 && name[1] != '-' && eq == std::string::npos) {
        bool all_known = true;
        for (size_t k = 1; k < name.size() && all_known; ++k)
          all_known = find_option(app, std::string("-") + name[k]) != nullptr ||
                      (sub != nullptr && find_option(*sub, std::string("-") + name[k]) != nullptr);
        if (all_known) continue;
      }
      if (o == nullptr) {
        std::vector<std::string> names;
        if (sub != nullptr) add_option_names(*sub, &names);
        add_option_names(app, &names);
        // "-prompt" for "--prompt": compare as a long name too.
        std::string guess = nearest_name(name, names);
        if (guess.empty() && name[1] != '-') guess = nearest_name("-" + name, names);
        const std::string where = sub != nullptr ? "k3" + path : std::string("k3");
        if (guess.empty())
          return where + ": unknown option '" + name + "' (see " + where + " --help for the options)";
        return where + ": unknown option '" + name + "'; did you mean '" + guess + "'?";
      }
      // Skip the option's values ("--ctx 8"); a flag has none, and "--ctx=8" carries its own.
      if (eq == std::string::npos && o->get_items_expected_max() > 0) {
        const int most = o->get_items_expected_max();  // more than 1: a list ("--image a.png b.png")
        for (int taken = 0; taken < most && i + 1 < argc; ++taken) {
          const std::string next = argv[i + 1];
          if (taken > 0 && next.size() > 1 && next[0] == '-' && !is_number(next)) break;
          ++i;
        }
      }
      continue;
    }
    if (sub != nullptr) {
      // A subcommand of the subcommand ("k3 env run"), or else one of its values (a positional,
      // e.g. inspect's DIR).
      std::vector<std::string> nested;
      for (const CLI::App* s : sub->get_subcommands([](const CLI::App*) { return true; })) nested.push_back(s->get_name());
      if (nested.empty()) continue;
      if (std::find(nested.begin(), nested.end(), arg) != nested.end()) {
        sub = sub->get_subcommand(arg);
        path += " " + arg;
        continue;
      }
      const std::string guess = nearest_name(arg, nested);
      std::string all;
      for (const std::string& n : nested) all += (all.empty() ? "" : ", ") + n;
      return "k3" + path + ": unknown subcommand '" + arg + "'" +
             (guess.empty() ? " (subcommands: " + all + ")" : "; did you mean '" + guess + "'?");
    }
    if (std::find(subcommands.begin(), subcommands.end(), arg) != subcommands.end()) {
      sub = app.get_subcommand(arg);
      path = " " + arg;
      continue;
    }
    const std::string guess = nearest_name(arg, subcommands);
    if (!guess.empty()) return "k3: unknown subcommand '" + arg + "'; did you mean '" + guess + "'?";
    std::string all;
    for (const std::string& s : subcommands) all += (all.empty() ? "" : ", ") + s;
    return "k3: unknown subcommand '" + arg + "' (subcommands: " + all + ")";
  }
  return {};
}

}  // namespace k3::cli
