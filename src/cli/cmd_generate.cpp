// k3 generate: a prompt in, the generated tokens out on one line: as text for a text prompt
// (--prompt, rendered as one user chat turn), as space-separated ids for an id prompt
// (--prompt-ids) or with --print-ids.  `k3 detokenize` reads the ids back.  --image FILE (repeatable, needs a model with a vision tower) adds images:
//   with --prompt:      the user message is [images..., text], rendered by the chat template
//                       (each image's <|media_begin|>image WxH<|media_content|> + pads +
//                       <|media_end|> in its place), followed by the assistant generation prompt;
//   with --prompt-ids:  each image's media prompt tokens come first, in order, then the ids.
// Either way the <|media_pad|> embeddings are overwritten by the projector rows of the images.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "dist/expert_plan.h"
#include "dist/world.h"
#include "engine/generator.h"
#include "engine/multimodal.h"
#include "model/k3_model.h"
#include "perf/model_bench.h"
#include "text/stream_decoder.h"
#include "text/xtml_renderer.h"
#include "vision/media_prompt.h"

namespace k3::cli {
namespace {

// Over several ranks, with -v: what each rank held and moved (collective: every rank calls it).
// Decode traffic is per decoded token, counted from the first token on.
void report_ranks(int64_t count, const dist::Traffic& at_first, double decode_seconds) {
  const dist::Traffic t = dist::traffic();
  const uint64_t decoded = count > 1 ? static_cast<uint64_t>(count - 1) : 1;
  const double in_exchanges = t.seconds - at_first.seconds;
  const uint64_t mine[5] = {peak_rss_bytes(), (t.bytes_sent - at_first.bytes_sent) / decoded,
                            (t.bytes_received - at_first.bytes_received) / decoded,
                            (t.collectives - at_first.collectives) / decoded,
                            static_cast<uint64_t>(decode_seconds > 0 ? 1e4 * in_exchanges / decode_seconds : 0)};
  std::vector<uint64_t> all(5 * static_cast<size_t>(dist::size()));
  dist::allgather_u64(mine, 5, all.data());
  for (int r = 0; r < dist::size(); ++r)
    log_info("rank ", r, ": peak resident ", all[5 * r] / 1e9, " GB; per decoded token sent ", all[5 * r + 1],
             " B, received ", all[5 * r + 2], " B in ", all[5 * r + 3], " exchanges; ", all[5 * r + 4] / 100.0,
             "% of decode inside them");
  const dist::PlanStats p = dist::plan_stats();
  if (p.steps > 0)
    log_info("expert pairs per rank, max / mean over ", p.steps, " MoE steps: ", p.mean_planned, " (worst ",
             p.worst_planned, ") with the plan, ", p.mean_home, " (worst ", p.worst_home,
             ") with every pair on its expert's home");
}

}  // namespace

void add_generate_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, prompt_ids, prompt, effort = "max", precision = "fp32";
    std::vector<std::string> images;
    bool no_think = false;
    int max_tokens = 16;
    float temperature = 0.0f, top_p = 1.0f;
    int top_k = 0;
    uint64_t seed = 0;
    int64_t ctx = 0, chunk = kPrefillChunk;
    bool ignore_eos = false, print_ids = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("generate", "Generate tokens from a prompt (greedy by default), optionally with images");
  sub->add_option("--model", a->model, "Checkpoint directory (default: the built-in tiny model)")
      ->check(kNonEmpty);
  auto* ids = sub->add_option("--prompt-ids", a->prompt_ids,
                              "Prompt token ids, e.g. 1,2,3 (with --image: the images' media prompts come first)");
  auto* text = sub->add_option("--prompt", a->prompt,
                               "Prompt text, rendered as one user chat turn (with --image: the images, then the text) "
                               "plus the assistant generation prompt");
  ids->excludes(text);
  sub->add_option("--image", a->images,
                  "PNG or JPEG file to put in the prompt (repeatable; the model needs a vision tower)");
  sub->add_flag("--no-think", a->no_think, "With --prompt: open the response channel instead of the think channel");
  sub->add_option("--effort", a->effort, "With --prompt: thinking effort low, high or max")
      ->check(CLI::IsMember({"low", "high", "max"}));
  sub->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->check(kNonNegative);
  sub->add_option("--temperature", a->temperature, "Sampling temperature (0 or absent: greedy)");
  sub->add_option("--top-p", a->top_p, "Nucleus sampling mass");
  sub->add_option("--top-k", a->top_k, "Sample among the k most likely tokens");
  sub->add_option("--seed", a->seed, "Sampling seed")->check(kUnsigned64);
  sub->add_option("--ctx", a->ctx, "Context limit in tokens, prompt + output (0 or absent: the model's)")
      ->check(kNonNegative);
  sub->add_option("--prefill-chunk", a->chunk, "Prompt tokens per forward pass: memory grows with it, the MLA cache's decompression per chunk shrinks")
      ->check(kPositive)
      ->capture_default_str();
  add_precision_option(sub, a->precision);
  sub->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at end-of-message tokens");
  sub->add_flag("--print-ids", a->print_ids,
                "Print the generated token ids (space-separated) instead of the text; ids are always printed "
                "for --prompt-ids");
  sub->callback([a, &run] {
    run = [a]() {
      K3_CHECK(!a->prompt_ids.empty() || !a->prompt.empty(), "give --prompt-ids or a non-empty --prompt");
      std::vector<int32_t> given;
      if (!a->prompt_ids.empty()) {
        given = parse_token_ids(a->prompt_ids);
        K3_CHECK(!given.empty(), "--prompt-ids is empty");
      }
      const std::string dir = resolve_model_dir(a->model);
      ModelOptions options;
      options.precision = parse_precision(a->precision);
      auto model = Model::load(dir, options);
      model->check_context(a->ctx);

      // Images: decoded and encoded (one pass each) before anything is generated.
      std::vector<PromptImage> images;
      int64_t image_tokens = 0;
      if (!a->images.empty()) {
        auto vision = load_vision_for(*model, dir);
        for (const std::string& path : a->images) {
          images.push_back(encode_image_file(*vision, path));
          image_tokens += images.back().prompt.num_pads;
          log_info(path, ": ", images.back().width, "x", images.back().height, ", ", images.back().prompt.num_pads,
                   " image tokens");
        }
      }

      std::vector<int32_t> prompt;
      std::optional<Tokenizer> tok;
      if (!a->prompt.empty() || !images.empty()) {
        tok.emplace(Tokenizer::from_model_dir(dir));
        check_tokenizer_against_config(*tok, model->config());
        const Tokenizer& tokenizer = *tok;
        if (!a->prompt.empty()) {
          ojson content = a->prompt;
          if (!images.empty()) {
            content = ojson::array();
            for (const PromptImage& im : images)
              content.push_back(ojson{{"type", "image_url"}, {"image_url", {{"url", im.source}}}});
            content.push_back(ojson{{"type", "text"}, {"text", a->prompt}});
          }
          ChatOptions o;
          o.thinking = !a->no_think;
          o.thinking_effort = a->effort;
          if (!images.empty()) {
            o.image_prompts.emplace();
            for (const PromptImage& im : images) o.image_prompts->push_back(im.prompt.text);
          }
          prompt = encode_segments(
              tokenizer, render_chat(ojson::array({ojson{{"role", "user"}, {"content", content}}}), ojson(), o));
        } else {
          for (const PromptImage& im : images) tokenizer.encode_append(im.prompt.text, true, prompt);
          prompt.insert(prompt.end(), given.begin(), given.end());
        }
      } else {
        prompt = given;
      }

      SequenceState state = model->new_sequence(a->ctx);
      if (!images.empty() && static_cast<int64_t>(prompt.size()) > state.max_tokens())
        fail("the prompt has ", prompt.size(), " tokens (", image_tokens, " of them for ", images.size(),
             " image(s)) but the context holds ", state.max_tokens(), " tokens; ",
             state.max_tokens() < model->text().max_position_embeddings
                 ? cat("use smaller images or a larger --ctx (up to ", model->text().max_position_embeddings, ")")
                 : std::string("that is the model's maximum, so use smaller or fewer images"));

      // A prompt that fills the context exactly leaves no room for a token (a longer one is
      // refused by the prefill itself).
      if (a->max_tokens != 0 && static_cast<int64_t>(prompt.size()) == state.max_tokens())
        fail("prompt of ", prompt.size(), " tokens fills the context of ", state.max_tokens(),
             " tokens, leaving no room for a generated token; ",
             state.max_tokens() < model->text().max_position_embeddings
                 ? cat("use a larger --ctx (up to ", model->text().max_position_embeddings, ") or a shorter prompt")
                 : std::string("that is the model's maximum, so use a shorter prompt"));

      std::vector<float> rows;
      for (const PromptImage& im : images) rows.insert(rows.end(), im.rows.begin(), im.rows.end());
      std::vector<EmbeddingOverride> overrides;
      if (!images.empty())
        overrides = media_embedding_overrides(prompt, media_pad_id(*model, *tok), rows,
                                              model->text().hidden_size);

      GenerateOptions opt;
      opt.max_tokens = a->max_tokens;
      opt.sampling = {a->temperature, a->top_k, a->top_p, a->seed};
      validate(opt.sampling);
      opt.prefill_chunk = a->chunk;
      opt.prompt_embeddings = overrides;
      if (!a->ignore_eos) {
        for (int id : model->config().stop_token_ids) opt.stop_tokens.push_back(id);
      }
      // Text for a text prompt: decoded as the tokens come, holding back the bytes of a character
      // split across tokens; special tokens show as their text, except the end-of-message token
      // that ends the reply.  Ids for an id prompt or with --print-ids.
      const bool print_text = !a->prompt.empty() && !a->print_ids;
      std::optional<StreamDecoder> text_out;
      if (print_text) text_out.emplace(*tok);
      bool first = true;
      // Timing and, for streamed weights, what was read: logged with -v.
      using Clock = std::chrono::steady_clock;
      const Clock::time_point t0 = Clock::now();
      Clock::time_point t_first;
      WeightStore* store = model->weight_store();
      if (store) store->reset_counters();
      WeightStoreStats at_first;
      dist::Traffic traffic_first;
      int64_t count = 0;
      generate(*model, state, prompt, opt, [&](int32_t tok) {
        if (count++ == 0) {
          t_first = Clock::now();
          if (store) at_first = store->stats();
          traffic_first = dist::traffic();
        }
        if (text_out) {
          const bool stop = std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), tok) != opt.stop_tokens.end();
          if (!stop) std::fputs(text_out->push(tok).c_str(), stdout);
        } else {
          std::printf(first ? "%d" : " %d", tok);
        }
        std::fflush(stdout);
        first = false;
        return true;
      });
      if (text_out) std::fputs(text_out->flush().c_str(), stdout);
      std::printf("\n");
      const Clock::time_point t_end = Clock::now();
      if (count > 0) {
        const double pre = std::chrono::duration<double>(t_first - t0).count();
        const double dec = std::chrono::duration<double>(t_end - t_first).count();
        log_info("prefill of ", prompt.size(), " tokens: ", pre, " s; ", count - 1, " decoded tokens: ", dec, " s (",
                 count > 1 ? (count - 1) / dec : 0.0, " tokens/s)");
        if (store && count > 1) {
          const WeightStoreStats e = store->stats();
          const double n = static_cast<double>(count - 1);
          const uint64_t hits = e.expert_hits - at_first.expert_hits, misses = e.expert_misses - at_first.expert_misses;
          log_info("decode reads per token: ", (e.bytes_read - at_first.bytes_read) / n / 1e9, " GB (trunk ",
                   (e.trunk_bytes_read - at_first.trunk_bytes_read) / n / 1e9, ", experts ",
                   (e.expert_bytes_read - at_first.expert_bytes_read) / n / 1e9, "), ",
                   (e.bytes_read - at_first.bytes_read) / dec / 1e9, " GB/s; expert hit rate ",
                   hits + misses ? 100.0 * hits / (hits + misses) : 0.0, "%; waiting for reads ",
                   (e.io_wait_seconds - at_first.io_wait_seconds) / dec * 100, "% of the time");
        }
      }
      if (dist::size() > 1)
        report_ranks(count, traffic_first, count > 1 ? std::chrono::duration<double>(t_end - t_first).count() : 0.0);
      return 0;
    };
  });
}

}  // namespace k3::cli
