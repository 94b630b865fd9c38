// k3: run Kimi K3 from its official checkpoint.  See `k3 --help`.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "base/allocator.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/suggest.h"
#include "dist/expert_plan.h"
#include "dist/world.h"
#include "io/mapped_file.h"
#include "model/sequence_state.h"

namespace {

// Output that never reached stdout (a full disk, /dev/full, a closed pipe with SIGPIPE ignored)
// must not end in exit 0: a script would take the truncated output as the whole answer.  Commands
// print through stdio and may ignore fflush's result while streaming, so the check is made once,
// here, on the stream's sticky error flag.  Returns the exit code to use.
int finish_stdout(int rc) {
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  int err = errno;
  if (!flush_failed && !std::ferror(stdout)) return rc;
  if (!flush_failed) {
    // glibc drops the buffer when a write fails, so a later fflush succeeds and the cause is
    // gone; a zero-byte write reproduces it for devices that refuse every write (/dev/full).
    err = ::write(STDOUT_FILENO, "", 0) < 0 ? errno : 0;
  }
  if (err != 0)
    std::fprintf(stderr, "k3: error: cannot write stdout: %s\n", std::strerror(err));
  else
    std::fprintf(stderr, "k3: error: cannot write stdout: a write failed, the output is incomplete\n");
  return rc == 0 ? 1 : rc;
}

// "Could not convert: NAME = VALUE" -> "NAME: must be a whole number within the option's range
// (got 'VALUE')"; any other wording is kept as it is.
std::string conversion_message(const std::string& what) {
  const std::string head = "Could not convert: ";
  const size_t eq = what.find(" = ");
  if (what.rfind(head, 0) != 0 || eq == std::string::npos) return what;
  const std::string name = what.substr(head.size(), eq - head.size()), value = what.substr(eq + 3);
  return name + ": must be a whole number within the option's range (got '" + value + "')";
}

// A multi-process run: every rank runs the same command, rank 0 alone writes stdout and
// progress, and the others keep stderr for errors.
void quiet_other_ranks() {
  if (k3::dist::rank() == 0) return;
  if (std::freopen("/dev/null", "w", stdout) == nullptr) std::fprintf(stderr, "k3: cannot silence stdout\n");
  ::setenv("K3_PROGRESS", "0", 1);
  k3::set_log_level(k3::LogLevel::kError);
}

// An error ends the whole job.  When every rank meets the same error (a bad option, a prompt
// too long), rank 0 reports it and its abort ends the others before they speak; an error of one
// rank alone (its checkpoint copy, its memory) is reported by that rank a moment later.
int fail(int code, const char* kind, const std::string& what) {
  const int ranks = k3::dist::launched_size();
  if (ranks <= 1) {
    std::fprintf(stderr, "k3: %s: %s\n", kind, what.c_str());
    return code;
  }
  const int rank = k3::dist::launched_rank();
  if (rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  std::fprintf(stderr, "k3: %s: rank %d of %d: %s\n", kind, rank, ranks, what.c_str());
  std::fflush(stderr);
  k3::dist::abort_all(code);
}

}  // namespace

int main(int argc, char** argv) {
  k3::tune_allocator();
  CLI::App app{"k3: an exact, fast inference engine for Kimi K3"};
  app.require_subcommand(1);
  int verbosity = 0;
  bool quiet = false;
  std::string isa;
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for debug)");
  app.add_flag("-q,--quiet", quiet, "Only errors");
  app.add_option("--isa", isa, "Kernel instruction set: ref, avx2, avx512 or amx (default: best the CPU has)");
  std::string weights;
  app.add_option("--weights", weights,
                 "Where checkpoint weights live: memory (read into huge-page RAM, fastest decode), stream (read "
                 "with direct I/O within --weight-budget: the trunk resident when it fits, else its largest layers "
                 "resident and the rest streamed layer by layer, routed experts in a cache), mmap (the page cache) or auto (memory when they fit in 3/4 "
                 "of the available RAM, cgroup limits included, else stream; default, or K3_WEIGHTS)");
  std::string weight_budget;
  app.add_option("--weight-budget", weight_budget,
                 "Memory for streamed weights, e.g. 64G, 512M or 40% (of the memory available); implies --weights "
                 "stream (default: 3/4 of the memory available, or K3_WEIGHT_BUDGET)");

  std::string memory_budget;
  app.add_option("--memory-budget", memory_budget,
                 "All the memory k3 may use, e.g. 256G or 90% (of the memory available): the weights get it less "
                 "a reserve for sequence state (1/8; or --weight-budget), reading them into memory when they fit "
                 "and streaming them otherwise; sequences get what the weights leave (or K3_MEMORY_BUDGET)");
  std::string kv_cache;
  app.add_option("--kv-cache-dtype", kv_cache,
                 "MLA latent cache: f32 (exact, default) or bf16 (half the bytes per token of context; "
                 "rounds each cached row; or K3_KV_CACHE_DTYPE)");

  std::string layout;
  app.add_option("--layout", layout,
                 "Over several ranks (mpirun), where the routed experts live: latency (every expert split by output "
                 "rows over all ranks, perfect balance; default) or throughput (expert e whole on rank e mod R, "
                 "each step's pairs planned over its copies)");
  int expert_replicas = 0;
  app.add_option("--expert-replicas", expert_replicas,
                 "Throughput layout: extra copies of each expert, on the ranks after its home, that take its "
                 "tokens when the home rank has more than its share (0 to R-1; default 0)")
      ->check(CLI::NonNegativeNumber);

  k3::cli::Runner run;
  k3::cli::add_inspect_command(app, run);
  k3::cli::add_generate_command(app, run);
  k3::cli::add_logits_command(app, run);
  k3::cli::add_synth_command(app, run);
  k3::cli::add_bench_command(app, run);
  k3::cli::add_chat_command(app, run);
  k3::cli::add_tokenize_command(app, run);
  k3::cli::add_train_tokenizer_command(app, run);
  k3::cli::add_detokenize_command(app, run);
  k3::cli::add_render_chat_command(app, run);
  k3::cli::add_vision_embed_command(app, run);
  k3::cli::add_serve_command(app, run);
  k3::cli::add_loadtest_command(app, run);
  k3::cli::add_plan_command(app, run);
  k3::cli::add_env_command(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ConversionError& e) {
    // CLI11 says only "Could not convert: --max-tokens = 1.5" when a value passed the option's
    // number check but does not fit its integer type (a fraction, or past the type's range).
    if (k3::dist::launched_rank() != 0) return e.get_exit_code();  // every rank parsed the same line
    std::fprintf(stderr, "%s\nRun with --help for more information.\n", conversion_message(e.what()).c_str());
    return finish_stdout(e.get_exit_code());
  } catch (const CLI::ParseError& e) {
    // A mistyped subcommand or option: CLI11's message, then the name that was probably meant.
    if (k3::dist::launched_rank() != 0) return e.get_exit_code();
    const std::string hint = e.get_exit_code() != 0 ? k3::cli::suggest_for_unknown_argument(app, argc, argv) : "";
    if (!hint.empty()) {
      std::fprintf(stderr, "%s\n%s\nRun with --help for more information.\n", e.what(), hint.c_str());
      return finish_stdout(e.get_exit_code());
    }
    return finish_stdout(app.exit(e));  // --help goes to stdout too
  }
  try {
    if (quiet) k3::set_log_level(k3::LogLevel::kError);
    if (verbosity == 1) k3::set_log_level(k3::LogLevel::kInfo);
    if (verbosity >= 2) k3::set_log_level(k3::LogLevel::kDebug);
    if (!weights.empty()) k3::set_default_residency(k3::parse_residency(weights));
    if (!weight_budget.empty()) {
      const uint64_t b = k3::parse_byte_size(weight_budget);
      K3_CHECK(b > 0, "--weight-budget: must be more than 0 bytes (got '", weight_budget, "')");
      K3_CHECK(weights.empty() || weights == "stream" || weights == "auto", "--weight-budget applies to streamed "
               "weights; it contradicts --weights ", weights);
      k3::set_default_weight_budget(b);
    }
    if (!memory_budget.empty()) {
      const uint64_t b = k3::parse_byte_size(memory_budget);
      K3_CHECK(b > 0, "--memory-budget: must be more than 0 bytes (got '", memory_budget, "')");
      k3::set_default_memory_budget(b);
    }
    if (!kv_cache.empty()) k3::set_default_cache_dtype(k3::parse_cache_dtype(kv_cache));
    if (!isa.empty()) k3::request_isa(k3::parse_isa(isa));
    if (!layout.empty()) k3::dist::set_default_layout(k3::dist::parse_layout(layout));
    K3_CHECK(expert_replicas == 0 || k3::dist::default_layout() == k3::dist::Layout::kThroughput,
             "--expert-replicas applies to the throughput layout (--layout throughput)");
    k3::dist::set_default_expert_replicas(expert_replicas);
    k3::dist::start();
    quiet_other_ranks();
    return finish_stdout(run ? run() : 0);
  } catch (const k3::Error& e) {
    return fail(1, "error", e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, "error", "out of memory");
  } catch (const std::exception& e) {
    return fail(3, "internal error", e.what());
  }
}
