// k3 generate: token ids in, generated token ids out (one line, space-separated).
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "engine/generator.h"
#include "model/k3_model.h"

namespace k3::cli {

void add_generate_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string precision = "fp32";
    std::string model, prompt_ids;
    int max_tokens = 16;
    float temperature = 0.0f, top_p = 1.0f;
    int top_k = 0;
    uint64_t seed = 0;
    int64_t ctx = 0, chunk = 512;
    bool ignore_eos = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("generate", "Generate tokens from prompt token ids (greedy by default)");
  sub->add_option("--model", a->model, "Checkpoint directory (default: the built-in tiny model)");
  sub->add_option("--prompt-ids", a->prompt_ids, "Prompt token ids, e.g. 1,2,3")->required();
  sub->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", a->temperature, "Sampling temperature (0 or absent: greedy)");
  sub->add_option("--top-p", a->top_p, "Nucleus sampling mass");
  sub->add_option("--top-k", a->top_k, "Sample among the k most likely tokens");
  sub->add_option("--seed", a->seed, "Sampling seed");
  sub->add_option("--ctx", a->ctx, "Context limit in tokens (default: the model's)");
  sub->add_option("--prefill-chunk", a->chunk, "Prompt tokens per forward pass")->check(CLI::PositiveNumber);
  sub->add_option("--precision", a->precision,
                  "fp32 (exact, default) or bf16 (activations of bf16-weight products rounded to bf16, AVX512-BF16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at end-of-message tokens");
  sub->callback([a, &run] {
    run = [a]() {
      const std::vector<int32_t> prompt = parse_token_ids(a->prompt_ids);
      K3_CHECK(!prompt.empty(), "--prompt-ids is empty");
      ModelOptions options;
      options.precision = parse_precision(a->precision);
      auto model = Model::load(resolve_model_dir(a->model), options);
      GenerateOptions opt;
      opt.max_tokens = a->max_tokens;
      opt.sampling = {a->temperature, a->top_k, a->top_p, a->seed};
      validate(opt.sampling);
      opt.prefill_chunk = a->chunk;
      if (!a->ignore_eos) {
        for (int id : model->config().stop_token_ids) opt.stop_tokens.push_back(id);
      }
      SequenceState state = model->new_sequence(a->ctx);
      bool first = true;
      generate(*model, state, prompt, opt, [&](int32_t tok) {
        std::printf(first ? "%d" : " %d", tok);
        std::fflush(stdout);
        first = false;
        return true;
      });
      std::printf("\n");
      return 0;
    };
  });
}

}  // namespace k3::cli
