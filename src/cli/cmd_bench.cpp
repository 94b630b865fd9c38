// k3 bench: measure the machine, then k3's kernels at real K3 shapes and the whole model, each
// as a ratio to the measured limit.  Default model: a synthetic checkpoint with full Kimi K3
// widths (4 layers = 3 KDA + 1 MLA, 64 experts top-16, real vocab, ~16 GB), created on first use;
// --quick is the smoke run on the tiny default model.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "dist/world.h"
#include "engine/generator.h"
#include "io/checkpoint.h"
#include "model/k3_config.h"
#include "model/k3_model.h"
#include "perf/report.h"
#include "synth/synth_checkpoint.h"

namespace k3::cli {
namespace {

std::string bench_model_dir() {
  const std::string dir = cache_dir() + "/bench-k3-width-v1";
  if (!file_exists(dir + "/config.json")) {
    K3_CHECK(dist::size() == 1, "the benchmark checkpoint ", dir, " does not exist yet: create it with one process "
             "first (k3 bench --no-kernels, or k3 synth --preset k3-width --out DIR and --model DIR)");
    log_warn("creating the full-width benchmark checkpoint (k3 synth --preset k3-width) in ", dir,
             "; this takes a few minutes and ~16 GB of disk, once (--quick uses the tiny model instead)");
    SynthOptions opt;
    opt.preset = "k3-width";
    write_synth_checkpoint(dir, opt);
  }
  return dir;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) fail(path, ": cannot write");
}

// A report file `flag` will write at the end: checked before anything is measured, so a bad
// path fails at once instead of after minutes of benchmarks.
void check_output_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  K3_CHECK(fs::is_directory(dir, ec), flag, " ", path, ": directory ", dir.string(), " does not exist");
  K3_CHECK(!fs::is_directory(p, ec), flag, " ", path, ": is a directory");
  K3_CHECK(::access(dir.c_str(), W_OK) == 0 && (!fs::exists(p, ec) || ::access(p.c_str(), W_OK) == 0), flag, " ", path,
           ": cannot write there");
}

// A --filter must pick at least one kernel group.
void check_filter(const std::string& filter) {
  if (filter.empty()) return;
  std::string names;
  for (const std::string& g : kernel_bench_groups()) {
    if (kernel_bench_selects(filter, g)) return;
    names += (names.empty() ? "" : ", ") + g;
  }
  fail("--filter '", filter, "' picks no kernel figure (groups: ", names,
       "; a part of a group's name or a figure name from a report)");
}

// The model figures prefill each of `prompts`, then decode `decode` more tokens after the first in
// the same sequence: all must fit the model's context, checked before minutes of measurements
// (else a prefill that fills the context would run to its end and fail on the first decode step).
void check_model_context(const std::string& dir, const std::vector<int>& prompts, int decode, bool quick) {
  const int64_t ctx = load_model_config(dir).text.max_position_embeddings;
  for (int n : prompts)
    if (n > ctx)
      fail("--prompt-tokens ", n, " exceeds the context of ", dir, " (", ctx, " tokens)");
  const int prompt = prompts.front();
  if (static_cast<int64_t>(prompt) + decode <= ctx) return;
  fail("--prompt-tokens ", prompt, quick ? " (at most 32 with --quick)" : "", " + --decode-tokens ", decode, " = ",
       static_cast<int64_t>(prompt) + decode, " tokens exceed the context of ", dir, " (", ctx,
       " tokens); make them fit, e.g. --prompt-tokens ", std::max<int64_t>(1, ctx - decode), " with --decode-tokens ",
       std::min<int64_t>(decode, ctx - 1));
}

}  // namespace

void add_bench_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, json, plot, filter, precision = "fp32";
    std::vector<int> prompt{128};
    int threads = 0, reps = 5, decode = 8, batch = 4, chunk = static_cast<int>(kPrefillChunk);
    bool quick = false, no_model = false, no_kernels = false, pin = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Measure the machine, the kernels and the whole model.  Without --model the model figures use a synthetic "
      "checkpoint with full Kimi K3 widths (4 layers, 64 experts), built once on first use: a few minutes and ~16 GB "
      "of disk in the k3 cache directory.  --quick is the smoke run (small shapes, the tiny default model)");
  sub->add_option("--model", a->model,
                  "Checkpoint for the model figures (default: the synthetic full-width K3, ~16 GB, built on first use; "
                  "with --quick: the tiny default model)")
      ->check(kNonEmpty);
  sub->add_option("--threads", a->threads, "Worker threads (default: one per CPU)");
  sub->add_flag("--pin", a->pin, "Pin threads to CPUs");
  sub->add_option("--reps", a->reps, "Repetitions per figure (median, min and max are reported)")->check(CLI::Range(1, 1000));
  sub->add_option("--prompt-tokens", a->prompt,
                  "Prefill prompt lengths, comma-separated, one figure each (e.g. 512,4096,16384,32768); decode "
                  "continues the first, so it plus --decode-tokens must fit the model's context")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--prefill-chunk", a->chunk, "Prompt tokens per forward call of the prefill figures, as k3 generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--decode-tokens", a->decode, "Decode steps per repetition, after the prompt")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--batch", a->batch, "Sequences decoded together for the batched-decode figure (1: skip it)")
      ->check(CLI::Range(1, 64));
  sub->add_option("--json", a->json, "Also write the results as JSON");
  sub->add_option("--plot", a->plot, "Also write an SVG chart of ratio-to-limit per figure");
  sub->add_option("--filter", a->filter,
                  "Only the kernel groups (bf16_gemv, mxfp4_gemv, mxfp4_gemm, gemm, kda, mla) whose name contains this, "
                  "or the group of a figure name given");
  add_precision_option(sub, a->precision);  // for the model figures
  sub->add_flag("--quick", a->quick, "Small shapes and the tiny default model (a smoke run, not a measurement)");
  sub->add_flag("--no-model", a->no_model, "Skip the whole-model figures");
  sub->add_flag("--no-kernels", a->no_kernels, "Skip the kernel figures");
  sub->callback([a, &run] {
    run = [a]() {
      K3_CHECK(a->threads >= 0, "--threads must be >= 0");
      // Over several ranks every rank measures its machine and runs every model step; the kernel
      // figures are a one-process measurement.
      const bool several = dist::size() > 1;
      if (several && !a->no_kernels) {
        log_warn("bench over ", dist::size(), " ranks: the kernel figures are skipped (run them as one process)");
        a->no_kernels = true;
      }
      if (!a->no_kernels) check_filter(a->filter);
      check_output_path("--json", a->json);
      check_output_path("--plot", a->plot);
      // The model (created on first use) and its context are settled before anything is measured.
      std::string dir;
      std::vector<int> prompt_tokens = a->prompt;
      if (a->quick)
        for (int& n : prompt_tokens) n = std::min(n, 32);
      if (!a->no_model) {
        dir = !a->model.empty() ? a->model : a->quick ? resolve_model_dir("") : bench_model_dir();
        check_model_context(dir, prompt_tokens, a->decode, a->quick);
      }
      if (a->threads > 0 || a->pin) set_num_threads(a->threads, a->pin);
      ThreadPool& pool = global_pool();
      BenchReport report;
      measure_read_bandwidth(pool, &report.machine, a->quick ? 2 : 5, a->quick ? (64u << 20) : 0);
      measure_peak_flops(pool, &report.machine);
      if (!a->no_kernels) {
        KernelBenchOptions ko;
        ko.reps = a->reps;
        ko.quick = a->quick;
        ko.filter = a->filter;
        report.kernels = run_kernel_benches(pool, report.machine, ko);
      }
      if (!a->no_model) {
        ModelOptions options;
        options.precision = parse_precision(a->precision);
        auto model = Model::load(dir, options);
        ModelBenchOptions mo;
        mo.reps = a->reps;
        mo.prompt_tokens = prompt_tokens;
        mo.prefill_chunk = a->chunk;
        mo.decode_tokens = a->decode;
        mo.batch = a->batch;
        report.model = run_model_bench(*model, a->precision != "fp32" ? dir + " [--precision " + a->precision + "]" : dir, report.machine, pool, mo);
      }
      apply_best_limits(report);
      std::fputs(format_table(report).c_str(), stdout);
      if (dist::rank() == 0 && !a->json.empty()) write_text(a->json, to_json(report).dump(2) + "\n");
      if (dist::rank() == 0 && !a->plot.empty()) write_text(a->plot, render_svg(report));
      return 0;
    };
  });
}

}  // namespace k3::cli
