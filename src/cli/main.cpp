// k3: run Kimi K3 from its official checkpoint.  See `k3 --help`.
#include <cstdio>
#include <exception>

#include "base/allocator.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "io/mapped_file.h"

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
                 "Where checkpoint weights live: memory (read into huge-page RAM, fastest decode), mmap (page "
                 "cache, for checkpoints larger than RAM) or auto (memory when they fit in 3/4 of the available "
                 "RAM; default, or K3_WEIGHTS)");

  k3::cli::Runner run;
  k3::cli::add_inspect_command(app, run);
  k3::cli::add_generate_command(app, run);
  k3::cli::add_logits_command(app, run);
  k3::cli::add_synth_command(app, run);
  k3::cli::add_bench_command(app, run);
  k3::cli::add_chat_command(app, run);
  k3::cli::add_tokenize_command(app, run);
  k3::cli::add_detokenize_command(app, run);
  k3::cli::add_render_chat_command(app, run);
  k3::cli::add_vision_embed_command(app, run);
  k3::cli::add_serve_command(app, run);
  k3::cli::add_loadtest_command(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (quiet) k3::set_log_level(k3::LogLevel::kError);
    if (verbosity == 1) k3::set_log_level(k3::LogLevel::kInfo);
    if (verbosity >= 2) k3::set_log_level(k3::LogLevel::kDebug);
    if (!weights.empty()) k3::set_default_residency(k3::parse_residency(weights));
    if (!isa.empty()) {
      const k3::Isa want = k3::parse_isa(isa);
      if (k3::force_isa(want) != want)
        k3::log_warn("this CPU cannot run ", isa, "; using ", k3::isa_name(k3::active_isa()));
    }
    return run ? run() : 0;
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "k3: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "k3: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3: internal error: %s\n", e.what());
    return 3;
  }
}
