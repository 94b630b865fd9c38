// k3 inspect: what a checkpoint is, and whether k3 can run it.
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "dist/expert_plan.h"
#include "engine/multimodal.h"
#include "io/available_memory.h"
#include "model/k3_model.h"
#include "model/partition.h"

namespace k3::cli {
namespace {

int inspect(const std::string& dir, int ranks) {
  ModelOptions options;
  options.headers_only = true;  // headers and small tensors only: no weight bytes are read
  auto model = Model::load(dir, options);
  const ModelConfig& mc = model->config();
  const TextConfig& c = mc.text;
  const ModelWeights& w = model->weights();
  const dist::Layout layout = dist::default_layout();
  const int replicas = dist::default_expert_replicas();
  if (ranks > 1 && layout == dist::Layout::kThroughput)
    dist::ExpertPlacement(c.num_experts, ranks, replicas);  // throws when --expert-replicas does not fit --ranks

  std::printf("checkpoint      %s\n", dir.c_str());
  std::printf("model_type      %s%s\n", mc.model_type.c_str(), mc.has_vision ? " (with vision_config)" : "");
  std::printf("hidden          %d, vocab %d, rms_norm_eps %g\n", c.hidden_size, c.vocab_size, c.rms_norm_eps);
  std::printf("layers          %d: %d KDA + %d MLA\n", c.num_layers, c.num_kda_layers(), c.num_mla_layers());
  std::printf("schedule        %s   (K = KDA, M = gated MLA)\n", mc.schedule_string().c_str());
  std::printf("KDA             %d heads x %d, conv %d, gate %s, output gate %s\n", c.kda.num_heads, c.kda.head_dim,
              c.kda.conv_kernel,
              c.kda.gate_lower_bound ? ("bounded (lower bound " + std::to_string(*c.kda.gate_lower_bound) + ")").c_str()
                                     : "softplus",
              c.kda.full_rank_gate ? "full-rank" : "low-rank");
  std::printf("MLA             %d heads, q_lora %d, kv_lora %d, nope/rope/v %d/%d/%d, NoPE%s\n", c.num_heads,
              c.q_lora_rank.value_or(0), c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
              c.mla_output_gate ? ", output gate" : "");
  if (c.num_experts > 0)
    std::printf("MoE             %d experts, top %d, %d shared, expert width %d%s, first %d layer(s) dense (%d)\n",
                c.num_experts, c.top_k, c.num_shared_experts, c.moe_intermediate_size,
                c.latent_size ? (", latent " + std::to_string(*c.latent_size) + (c.latent_norm ? " + norm" : "")).c_str()
                              : "",
                c.first_k_dense_replace, c.intermediate_size);
  std::printf("activation      %s\n", c.act == Activation::kSitu ? "SiTU-GLU" : "SiLU-GLU");
  std::printf("residual        %s\n", c.attn_res_block_size
                                          ? ("Block AttnRes, block of " + std::to_string(*c.attn_res_block_size) + " layers").c_str()
                                          : "plain");
  std::printf("quantisation    %s\n", c.quant.enabled ? "compressed-tensors mxfp4-pack-quantized" : "none");
  std::printf("context         %d tokens\n", c.max_position_embeddings);

  // Active parameters / bytes per decoded token: everything but the unchosen experts and all
  // but one embedding row.
  uint64_t expert_params = 0, expert_bytes = 0;
  int moe_layers = 0;
  for (const LayerWeights& L : w.layers) {
    if (!L.moe) continue;
    ++moe_layers;
    const MlpWeights& e = L.moe_w.experts[0];
    expert_params = static_cast<uint64_t>(e.gate.rows * e.gate.cols + e.up.rows * e.up.cols + e.down.rows * e.down.cols);
    expert_bytes = e.gate.bytes() + e.up.bytes() + e.down.bytes();
  }
  const uint64_t unused_experts = static_cast<uint64_t>(c.num_experts - c.top_k) * moe_layers;
  const uint64_t embed_params = static_cast<uint64_t>(w.embed.rows * w.embed.cols);
  const uint64_t active = w.total_params - unused_experts * expert_params - embed_params;
  const uint64_t read = w.total_bytes - unused_experts * expert_bytes - w.embed.bytes();
  std::printf("parameters      %s total, %s active per token\n", human_count(static_cast<double>(w.total_params)).c_str(),
              human_count(static_cast<double>(active)).c_str());
  std::printf("bytes           %s in %zu tensors; ~%s of weights read per decoded token\n",
              human_bytes(static_cast<double>(w.total_bytes)).c_str(), w.tensor_count,
              human_bytes(static_cast<double>(read)).c_str());
  // What each sequence holds: KDA state and conv history of fixed size, and a latent cache row
  // per token in each MLA layer (fp32, or bf16 with --kv-cache-dtype bf16).
  const TextConfig& t = c;
  const uint64_t kda_state = SequenceState::fixed_bytes(t);
  const CacheDtype cache = model->kv_cache_dtype();
  const uint64_t per_token = SequenceState::bytes_per_token(t, cache);
  std::printf("sequence state  %s per sequence (KDA) + %s per token of context (MLA latent cache, %s); %s at the "
              "full %d-token context\n",
              human_bytes(static_cast<double>(kda_state)).c_str(), human_bytes(static_cast<double>(per_token)).c_str(),
              cache_dtype_name(cache),
              human_bytes(static_cast<double>(kda_state + per_token * t.max_position_embeddings)).c_str(),
              t.max_position_embeddings);
  // How the weights would be placed in the memory --weight-budget (or 3/4 of what is available) gives.
  uint64_t budget = default_weight_budget();
  if (budget == 0) budget = available_memory_bytes() / 4 * 3;
  if (budget > 0) {
    const WeightStoreStats p = WeightStore::layout(model->checkpoint(), w, c, budget);
    if (budget < p.minimum_budget)
      std::printf("placement       a budget of %s is too small: streaming needs at least %s\n",
                  human_bytes(static_cast<double>(budget)).c_str(),
                  human_bytes(static_cast<double>(p.minimum_budget)).c_str());
    else
      std::printf("placement       in %s%s: trunk %s %s, %d expert slots of %s (of %lld experts; at least %s needed)\n",
                  human_bytes(static_cast<double>(budget)).c_str(),
                  default_weight_budget() ? " (--weight-budget)" : " (3/4 of the memory available)",
                  human_bytes(static_cast<double>(p.trunk_bytes)).c_str(),
                  p.trunk_resident ? "resident" : ("streamed through a " + human_bytes(static_cast<double>(p.ring_bytes)) + " ring").c_str(),
                  p.expert_slots, human_bytes(static_cast<double>(p.expert_slot_bytes)).c_str(),
                  static_cast<long long>(p.expert_count), human_bytes(static_cast<double>(p.minimum_budget)).c_str());
  }
  // Over several ranks (mpirun -np R), each rank's share in the layout --layout names
  // (model/partition.h).
  if (ranks > 1) {
    std::printf("ranks           %d, %s layout (%s; router, kv_b and embedding on every rank); %llu exchanges per "
                "decoded token\n",
                ranks, dist::layout_name(layout),
                layout == dist::Layout::kLatency ? "every product split by output rows"
                                                 : cat("trunk split by output rows, expert e whole on rank e mod R",
                                                       replicas > 0 ? cat(" and the next ", replicas) : std::string())
                                                       .c_str(),
                static_cast<unsigned long long>(rank_footprint(w, c, 0, ranks, layout, replicas).collectives_per_token));
    std::printf("  rank      weights held   of which replicated   read per token   sent per token   received per token\n");
    for (int r = 0; r < ranks; ++r) {
      const RankFootprint f = rank_footprint(w, c, r, ranks, layout, replicas);
      std::printf("  %4d  %16s  %20s  %15s  %15s  %19s\n", r, human_bytes(static_cast<double>(f.resident_bytes)).c_str(),
                  human_bytes(static_cast<double>(f.replicated_bytes)).c_str(),
                  human_bytes(static_cast<double>(f.read_per_token)).c_str(),
                  human_bytes(static_cast<double>(f.sent_per_token)).c_str(),
                  human_bytes(static_cast<double>(f.received_per_token)).c_str());
    }
    if (layout == dist::Layout::kThroughput)
      std::printf("  (per decoded token in the throughput layout: the mean over ranks, top_k / R of the pairs each)\n");
  }
  // The vision tower, when config.json has one: bound like `k3 chat` and the server bind it (which
  // checks every vision_tower.* / mm_projector.* tensor), so its tensors are counted as used.
  std::vector<std::string> unused = w.unused_tensors;
  if (mc.has_vision) {
    const std::unique_ptr<VisionModel> vision = load_vision_for(*model, dir);
    const VisionConfig& v = vision->config();
    uint64_t params = 0, bytes = 0;
    size_t tensors = 0;
    std::vector<std::string> rest;
    for (const std::string& name : unused) {
      if (name.rfind("vision_tower.", 0) != 0 && name.rfind("mm_projector.", 0) != 0) {
        rest.push_back(name);
        continue;
      }
      const TensorView* t = model->checkpoint().tensors().at(name);
      params += static_cast<uint64_t>(t->numel());
      bytes += t->nbytes;
      ++tensors;
    }
    unused = std::move(rest);
    std::printf("vision          %d blocks, width %d, %d heads x %d, projector to %d; %s parameters, %s in %zu tensors\n",
                v.num_layers, v.hidden_size, v.num_heads, v.head_dim(), v.text_hidden_size,
                human_count(static_cast<double>(params)).c_str(), human_bytes(static_cast<double>(bytes)).c_str(),
                tensors);
  }
  std::printf("stop tokens    ");
  for (int id : mc.stop_token_ids) std::printf(" %d", id);
  std::printf("\n");
  if (!unused.empty())
    std::printf("not used        %zu tensor(s) outside the text model%s, e.g. %s\n", unused.size(),
                mc.has_vision ? " and the vision tower" : "", unused.front().c_str());
  std::printf("validation      OK: every tensor the config implies is present with the right shape and dtype\n");
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, Runner& run) {
  auto dir = std::make_shared<std::string>();
  auto ranks = std::make_shared<int>(1);
  CLI::App* sub = app.add_subcommand("inspect", "Summarise and validate a checkpoint");
  sub->add_option("dir", *dir, "Checkpoint directory (default: the built-in tiny model)");
  sub->add_option("--ranks", *ranks,
                  "Also show what each of R ranks (mpirun -np R) holds, reads and sends per decoded token")
      ->check(CLI::Range(1, 65536));
  sub->callback([dir, ranks, &run] { run = [dir, ranks]() { return inspect(resolve_model_dir(*dir), *ranks); }; });
}

}  // namespace k3::cli
