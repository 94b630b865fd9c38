// k3 logits: one prefill, every position's logits written as F32 `logits` [T, vocab].
#include "base/error.h"
#include "cli/commands.h"
#include "dist/world.h"
#include "engine/generator.h"
#include "io/safetensors_writer.h"
#include "model/k3_model.h"

namespace k3::cli {

void add_logits_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string precision = "fp32";
    std::string model, prompt_ids, out;
    int64_t chunk = kPrefillChunk;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("logits", "Write the prefill logits of a prompt to a safetensors file");
  sub->add_option("--model", a->model, "Checkpoint directory (default: the built-in tiny model)")
      ->check(kNonEmpty);
  sub->add_option("--prompt-ids", a->prompt_ids, "Prompt token ids, e.g. 1,2,3")->required();
  sub->add_option("--out", a->out, "Output .safetensors file")->required();
  sub->add_option("--prefill-chunk", a->chunk, "Prompt tokens per forward pass")->check(kPositive)->capture_default_str();
  add_precision_option(sub, a->precision);
  sub->callback([a, &run] {
    run = [a]() {
      const std::vector<int32_t> prompt = parse_token_ids(a->prompt_ids);
      K3_CHECK(!prompt.empty(), "--prompt-ids is empty");
      ModelOptions options;
      options.precision = parse_precision(a->precision);
      auto model = Model::load(resolve_model_dir(a->model), options);
      SequenceState state = model->new_sequence();
      std::vector<float> logits = prefill_logits(*model, state, prompt, a->chunk);
      SafetensorsWriter w;
      w.add_f32("logits", {static_cast<int64_t>(prompt.size()), model->text().vocab_size}, logits);
      if (dist::rank() == 0) w.write(a->out);  // every rank holds the same logits
      return 0;
    };
  });
}

}  // namespace k3::cli
