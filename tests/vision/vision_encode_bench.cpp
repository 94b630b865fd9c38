// Encode time of one 1920x1080 image (2691 tokens) on a synthetic vision tower:
//   vision_encode_bench [tiny|k3] [layers] [threads]
// "tiny" is the tower added to the built-in default model (text width 256); "k3" has the
// released widths (1024 wide, 12 heads of 128, MLP 4096, projector to 7168; 27 blocks unless
// `layers` is given: runs with 0 and 1 blocks give the per-block time to extrapolate from).
// Prints preprocessing and encode wall times.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/safetensors_writer.h"
#include "support/test_support.h"
#include "vision/synth_vision.h"
#include "vision/vision_model.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    k3::SynthVisionOptions o;
    o.preset = argc > 1 ? argv[1] : "tiny";
    o.num_layers = argc > 2 ? std::atoi(argv[2]) : -1;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 0;
    const int text_hidden = o.preset == "k3" ? 7168 : 256;

    k3::testing::TempDir tmp;
    k3::testing::write_file(tmp.file("config.json"), R"({"model_type": "kimi_k3"})");
    k3::SafetensorsWriter w;
    w.add_f32("language_model.model.norm.weight", {1}, {1.0f});
    w.write(tmp.file("model.safetensors"));
    auto t0 = std::chrono::steady_clock::now();
    k3::add_synth_vision(tmp.path(), text_hidden, o);
    if (threads > 0) k3::set_num_threads(threads);
    auto vision = k3::VisionModel::load(tmp.path());
    std::printf("synthetic %s tower: %d blocks, width %d, %d heads of %d, MLP %d (written+loaded in %.1f s)\n",
                o.preset.c_str(), vision->config().num_layers, vision->config().hidden_size, vision->config().num_heads,
                vision->config().head_dim(), vision->config().intermediate_size, seconds_since(t0));

    k3::Image img(1920, 1080, 3);
    uint32_t s = 12345;
    for (size_t i = 0; i < img.pixels.size(); ++i) {
      s = s * 1664525u + 1013904223u;
      img.pixels[i] = static_cast<uint8_t>((i / 3 % 1920) / 8 + (s >> 28));
    }
    t0 = std::chrono::steady_clock::now();
    const k3::PreprocessedImage p = vision->preprocess(img);
    const double pre = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const std::vector<float> rows = vision->encode({&p, 1});
    const double enc = seconds_since(t0);
    std::printf("1920x1080: grid %dx%d = %lld patches, %lld tokens; preprocess %.3f s, encode %.2f s", p.grid().h,
                p.grid().w, static_cast<long long>(p.grid().patches()), static_cast<long long>(p.num_tokens()), pre,
                enc);
    std::printf("\n");
    return rows.empty() ? 1 : 0;
  } catch (const k3::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
