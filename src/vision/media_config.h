// The image preprocessor settings: `media_proc_cfg` of a checkpoint's preprocessor_config.json
// (the released processor's settings), with the released Kimi K3 values as defaults when the
// file or a key is absent.  Only the image path is modelled (video keys are read and ignored).
#pragma once

#include <array>
#include <string>

namespace k3 {

struct MediaProcConfig {
  int in_patch_limit = 65536;         // patches per image before resizing down
  int patch_limit_on_one_side = 512;  // patches per side
  int patch_size = 14;
  int merge_kernel_size = 2;  // tokens are merge x merge patches
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};
  // transparent_bg_config: a chessboard composited under images with alpha.
  int chessboard_square_size = 8;
  bool chessboard_white_on_top_left = true;
  int chessboard_white_value = 255;
  int chessboard_gray_value = 180;
  bool fill_after_resize = true;  // transparent_bg_fill_stage: "after_resize" | "before_resize"

  int pad_multiple() const { return patch_size * merge_kernel_size; }
};

// Parses preprocessor_config.json text (the `media_proc_cfg` object, or the top level when that
// key is absent).  Throws k3::Error listing every bad field, named by its JSON path.
MediaProcConfig parse_media_proc_config(const std::string& json_text, const std::string& source);
// DIR/preprocessor_config.json when present, else the released defaults.
MediaProcConfig load_media_proc_config(const std::string& dir);

}  // namespace k3
