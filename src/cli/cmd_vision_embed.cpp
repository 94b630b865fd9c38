// k3 vision-embed: runs images through the vision path (decode, preprocess, tower, projector) in
// one packed forward and writes, for external checks:
//   pixel_values   F32 [patches, 3, 14, 14]   all images concatenated in --image order
//   grid_thw       I32 [images, 3]            (t, h, w) in patches
//   projector_out  F32 [tokens, text_hidden]  the LM embedding rows, images in order
#include <chrono>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "io/safetensors_writer.h"
#include "vision/image_decode.h"
#include "vision/vision_model.h"

namespace k3::cli {

void add_vision_embed_command(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, out;
    std::vector<std::string> images;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("vision-embed", "Write the vision tower's inputs and projector output for images");
  sub->add_option("--model", a->model, "Checkpoint directory with a vision tower (default: the built-in tiny model)")
      ->check(kNonEmpty);
  sub->add_option("--image", a->images, "PNG or JPEG file (repeatable; all images run packed in one pass)")->required();
  sub->add_option("--out", a->out, "Output .safetensors file")->required();
  sub->add_option("--threads", a->threads, "Worker threads (default: one per CPU, or K3_THREADS)")
      ->check(kNonNegative);
  sub->callback([a, &run] {
    run = [a]() {
      if (a->threads > 0) set_num_threads(a->threads);
      auto vision = VisionModel::load(resolve_model_dir(a->model));
      std::vector<PreprocessedImage> images;
      std::vector<int32_t> grids;
      int64_t tokens = 0;
      for (const std::string& path : a->images) {
        images.push_back(vision->preprocess(load_image_file(path)));
        const PreprocessedImage& im = images.back();
        grids.insert(grids.end(), {im.grid().t, im.grid().h, im.grid().w});
        tokens += im.num_tokens();
        log_info(path, ": ", im.width, "x", im.height, " -> ", im.geometry.resized_width, "x",
                 im.geometry.resized_height, ", grid ", im.grid().h, "x", im.grid().w, ", ", im.num_tokens(),
                 " tokens");
      }
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<float> rows = vision->encode(images);
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      log_info("encoded ", images.size(), " image(s), ", tokens, " tokens, in ", dt.count(), " s");
      const std::vector<float> pixels = pack_pixel_values(images);
      const int64_t p = vision->config().patch_size;
      SafetensorsWriter w;
      w.add_f32("pixel_values", {static_cast<int64_t>(pixels.size()) / (3 * p * p), 3, p, p}, pixels);
      w.add_i32("grid_thw", {static_cast<int64_t>(images.size()), 3}, grids);
      w.add_f32("projector_out", {tokens, vision->text_hidden_size()}, rows);
      w.write(a->out);
      return 0;
    };
  });
}

}  // namespace k3::cli
