#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "dist/world.h"
#include "model/k3_model.h"
#include "model/state_mirror.h"
#include "io/checkpoint.h"
#include "synth/synth_checkpoint.h"

namespace k3::cli {

namespace {
constexpr long kMaxMebibytes = 1L << 20;  // 1 TiB: beyond any machine k3 runs on, far from overflow

CLI::Validator number_at_least(double least, bool strict, const char* rule) {
  return CLI::Validator(
      [least, strict, rule](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return cat("must be a number (got '", in, "')");
        const bool ok = strict ? v > least : v >= least;
        return ok ? std::string() : cat("must be ", rule, " (got ", in, ")");
      },
      rule);
}

CLI::Validator mebibytes(bool zero_ok) {
  return CLI::Validator(
      [zero_ok](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return cat("must be a number of MiB (got '", in, "')");
        const bool low_ok = zero_ok ? v >= 0 : v > 0;
        if (!low_ok || !(v <= static_cast<double>(kMaxMebibytes)))
          return cat("must be ", zero_ok ? ">= 0" : "> 0", " and at most ", kMaxMebibytes, " MiB (got ", in, ")");
        return std::string();
      },
      zero_ok ? "MiB >= 0" : "MiB > 0");
}
}  // namespace

const CLI::Validator kNonNegative = number_at_least(0, false, ">= 0");
const CLI::Validator kPositive = number_at_least(0, true, "> 0");
const CLI::Validator kMebibytesNonNegative = mebibytes(true);
const CLI::Validator kMebibytesPositive = mebibytes(false);
const CLI::Validator kUnsigned64(
    [](std::string& in) -> std::string {
      // CLI11 reads "-1" into a uint64_t as 2^64-1 and 2^64 as 0; a seed or byte count that wraps
      // is never what was meant.
      const std::string rule = cat("must be a whole number from 0 to ", UINT64_MAX, " (got '", in, "')");
      if (in.empty() || in.size() > 20 || in.find_first_not_of("0123456789") != std::string::npos) return rule;
      errno = 0;
      char* end = nullptr;
      (void)std::strtoull(in.c_str(), &end, 10);
      return errno == ERANGE ? rule : std::string();
    },
    "UINT64");
const CLI::Validator kNonEmpty(
    [](std::string& in) -> std::string {
      return in.empty() ? "must not be empty (leave the option out for the default)" : std::string();
    },
    "NONEMPTY");

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e12) std::snprintf(buf, sizeof buf, "%.3fT", n / 1e12);
  else if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.3fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.3fM", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  // Ids are separated by one comma and/or whitespace; an empty entry ("1,,2", "1,2,") is an
  // error rather than skipped, and a list of separators only is empty.
  const bool any_id = text.find_first_not_of(", \t\n") != std::string::npos;
  while (i < text.size()) {
    int commas = 0;
    while (i < text.size() && (text[i] == ',' || text[i] == ' ' || text[i] == '\t' || text[i] == '\n'))
      commas += text[i++] == ',' ? 1 : 0;
    if (any_id && (commas > 1 || (commas == 1 && (ids.empty() || i == text.size()))))
      fail("the token id list '", text, "' has an empty entry (separate ids with one comma or spaces)");
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\t' && text[j] != '\n') ++j;
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX)
      fail("token id '", item, "' is not a non-negative integer");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

void add_precision_option(CLI::App* sub, std::string& value) {
  sub->add_option("--precision", value,
                  "fp32 (exact, default); bf16: activations of bf16-weight products rounded to bf16 (AVX512-BF16 "
                  "dot products); bf16-all: the MXFP4 experts' products too")
      ->check(CLI::IsMember({"fp32", "bf16", "bf16-all"}));
}

std::string cache_dir() {
  std::string dir, from;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    dir = std::string(xdg) + "/k3";
    from = "from XDG_CACHE_HOME";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    // A home that does not exist is not created (that is the system's job, and it is most often a
    // wrong setting): say so instead.
    std::error_code ec;
    if (!std::filesystem::is_directory(home, ec))
      fail("HOME=", home, " is not a directory, so k3 has no cache folder (~/.cache/k3); set HOME, or "
           "XDG_CACHE_HOME to a writable folder");
    dir = std::string(home) + "/.cache/k3";
    from = "from HOME";
  } else {
    dir = "/tmp/k3";
    from = "neither XDG_CACHE_HOME nor HOME is set";
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    fail("cannot create k3's cache folder ", dir, " (", from, "): ",
         ec ? ec.message() : std::string("not a directory"), "; set XDG_CACHE_HOME to a writable folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("k3's cache folder ", dir, " (", from, ") is not writable: ", std::strerror(errno),
         "; set XDG_CACHE_HOME to a writable folder");
  return dir;
}

std::string default_model_dir() {
  if (const char* env = std::getenv("K3_DEFAULT_MODEL"); env != nullptr && *env != '\0') return env;
  if (file_exists(std::string(K3_DEMO_MODEL_DIR) + "/config.json")) return K3_DEMO_MODEL_DIR;
  return cache_dir() + "/default-tiny-v3";  // bump when the synthetic output changes (v3: vision tower)
}

std::string resolve_model_dir(const std::string& given) {
  if (!given.empty()) return given;
  const std::string dir = default_model_dir();
  if (!file_exists(dir + "/config.json")) {
    log_warn("creating the built-in default model (k3 synth --preset tiny) in ", dir);
    // Written aside and renamed into place, so an interrupted run never leaves a half model.
    const std::string tmp = cat(dir, ".partial-", ::getpid());
    write_synth_checkpoint(tmp, SynthOptions{});
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      const int err = errno;
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
      // Another k3 may have created it meanwhile; otherwise say why.
      if (!file_exists(dir + "/config.json")) fail("cannot move ", tmp, " to ", dir, ": ", std::strerror(err));
    }
  }
  return dir;
}

bool follow_rank_zero(const std::string& dir) {
  if (dist::size() == 1) return false;
  if (dist::rank() == 0) {
    mirror::enable();
    return false;
  }
  auto model = Model::load(dir);
  mirror::follow(*model);
  return true;
}

void refuse_several_ranks(const char* command) {
  K3_CHECK(dist::size() == 1, "`k3 ", command, "` does not run over several ranks yet (launched with ", dist::size(),
           "); run it as one process, without mpirun (generate, logits, chat, serve and bench run over ranks)");
}

}  // namespace k3::cli
