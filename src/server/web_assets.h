// The chat page's files (src/server/web/), embedded into the binary at build time: the build
// generates k3_web_assets.inc in the build tree from the sources (cmake/embed_web.cmake).
#pragma once

#include <cstddef>
#include <string_view>

namespace k3::server {

struct WebAsset {
  std::string_view path;  // "/", "/app.js", ...
  std::string_view mime;
  std::string_view data;
};

// nullptr when no asset has this path.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace k3::server
