// k3 synth: write a synthetic K3-architecture checkpoint in the official layout (with a
// synthetic vision tower for the tiny preset unless --no-vision).
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "synth/synth_checkpoint.h"

namespace k3::cli {

void add_synth_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string preset = "tiny", out, overrides, vision = "default";
    bool no_vision = false, sparse = false;
    int hidden = 0, layers = 0, experts = 0, top_k = 0, vocab = 0, shards = 0;
    uint64_t seed = 0x6b33;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("synth", "Write a synthetic K3-architecture checkpoint");
  sub->add_option("--preset", a->preset,
                  "tiny (the built-in default), k3-width (full K3 widths, few layers and experts) or k3 (the release: "
                  "93 layers, 896 experts, vision tower, 96 shards, 1.56 TB; use with --sparse)");
  sub->add_option("--out", a->out, "Output directory")->required();
  sub->add_option("--hidden", a->hidden, "hidden_size")->check(kPositive);
  sub->add_option("--layers", a->layers, "num_hidden_layers (every 4th and the last are MLA)")->check(kPositive);
  sub->add_option("--experts", a->experts, "num_experts")->check(kPositive);
  sub->add_option("--top-k", a->top_k, "num_experts_per_token")->check(kPositive);
  sub->add_option("--vocab", a->vocab, "vocab_size (>= 512)")->check(kPositive);
  sub->add_option("--shards", a->shards,
                  "Number of safetensors shards (default: 96 for --preset k3, else by size).  Up to layers + 1 "
                  "each holds whole layers and a vision tower has its own file; more spread all tensors by size")
      ->check(kPositive);
  auto* seed = sub->add_option("--seed", a->seed, "Random seed")->check(kUnsigned64);
  sub->add_flag("--sparse", a->sparse,
                "Every tensor all zeros, written as a file hole (the full layout in seconds and ~100-150 MB of disk "
                "for --preset k3); headers, index, config and tokenizer are real");
  sub->add_option("--vision", a->vision,
                  "Vision tower: default (tiny preset: a small MoonViT-V2 tower; k3-width: none), tiny, or k3 "
                  "(released widths, ~0.9 GB)")
      ->check(CLI::IsMember({"default", "tiny", "k3"}));
  sub->add_flag("--no-vision", a->no_vision, "Write the text model only (no vision tower)");
  sub->add_option("--overrides", a->overrides, "JSON object of text settings, e.g. '{\"kda_num_heads\": 8}'");
  sub->callback([a, seed, &run] {
    run = [a, seed]() {
      refuse_several_ranks("synth");
      SynthOptions opt;
      opt.preset = a->preset;
      opt.seed = a->seed;
      opt.shards = a->shards;
      opt.sparse = a->sparse;
      K3_CHECK(!(a->sparse && seed->count() != 0),
               "--seed has no effect with --sparse (every tensor is zeros; nothing random is generated)");
      K3_CHECK(!(a->no_vision && a->vision != "default"), "--no-vision and --vision ", a->vision, " contradict");
      opt.vision = a->no_vision ? "none" : a->vision;
      if (!a->overrides.empty()) {
        try {
          opt.overrides = nlohmann::json::parse(a->overrides);
        } catch (const nlohmann::json::exception& e) {
          fail("--overrides is not valid JSON: ", e.what());
        }
        K3_CHECK(opt.overrides.is_object(), "--overrides must be a JSON object");
      }
      auto set = [&](const char* key, int v) {
        if (v != 0) opt.overrides[key] = v;
      };
      set("hidden_size", a->hidden);
      set("num_hidden_layers", a->layers);
      set("num_experts", a->experts);
      set("num_experts_per_token", a->top_k);
      set("vocab_size", a->vocab);
      write_synth_checkpoint(a->out, opt);
      std::printf("%s\n", a->out.c_str());
      return 0;
    };
  });
}

}  // namespace k3::cli
