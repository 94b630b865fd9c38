#include "server_test_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include "../vision/image_writers.h"
#include "support/test_support.h"
#include "synth/synth_checkpoint.h"
#include "text/base64.h"
#include "vision/synth_vision.h"

namespace k3::testing {
namespace {

// The model directories are written once per build, not once per test process (each ctest
// entry is its own process): under K3_SERVER_TEST_CACHE, rewritten when the k3 binary (which
// links the synth library) is newer than them; a file lock keeps parallel tests apart.
const std::string& model_dir(bool vision) {
  static std::string dirs[2];
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const int i = vision ? 1 : 0;
  if (!dirs[i].empty()) return dirs[i];
  namespace fs = std::filesystem;
  const fs::path root = K3_SERVER_TEST_CACHE;
  fs::create_directories(root);
  const int fd = ::open((root / ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (fd < 0 || ::flock(fd, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + (root / ".lock").string());
  const fs::path dir = root / (vision ? "tiny-vision" : "tiny");
  const fs::path stamp = dir / ".complete";
  if (!fs::exists(stamp) || fs::last_write_time(stamp) < fs::last_write_time(k3_binary())) {
    fs::remove_all(dir);
    SynthOptions o;
    o.vision = vision ? "tiny" : "none";  // the tiny preset's tower, or a text-only model
    write_synth_checkpoint(dir.string(), o);
    write_file(stamp.string(), "");
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  dirs[i] = dir.string();
  return dirs[i];
}

Bytes png_bytes(int width, int height, int seed) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = 2;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      spec.samples.push_back(static_cast<uint16_t>((x * 3 * seed + 17) & 255));
      spec.samples.push_back(static_cast<uint16_t>((y * 5 + seed * 40) & 255));
      spec.samples.push_back(static_cast<uint16_t>(((x + y) * seed) & 255));
    }
  return encode_png(spec);
}

}  // namespace

const std::string& vision_model_dir() { return model_dir(true); }
const std::string& plain_model_dir() { return model_dir(false); }

httplib::Client client(const ServerProcess& s) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(120);
  c.set_write_timeout(60);
  return c;
}

Reply to_reply(const httplib::Result& r) {
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.body = ojson::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (out.body.is_discarded()) out.body = nullptr;
  return out;
}

Reply get(httplib::Client& cli, const std::string& path, const httplib::Headers& headers) {
  return to_reply(cli.Get(path.c_str(), headers));
}

Reply post(httplib::Client& cli, const std::string& path, const ojson& body, const httplib::Headers& headers) {
  return to_reply(cli.Post(path.c_str(), headers, body.dump(), "application/json"));
}

Reply post_raw(httplib::Client& cli, const std::string& path, const std::string& body, const std::string& type) {
  return to_reply(cli.Post(path.c_str(), body, type.c_str()));
}

Sse post_sse(httplib::Client& cli, const std::string& path, const ojson& body) {
  Sse out;
  auto r = cli.Post(path.c_str(), body.dump(), "application/json");
  if (!r) {  // no reply at all: say why, for failure messages
    out.raw = "no response: " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.raw = r->body;
  size_t at = 0;
  while (at < out.raw.size()) {
    size_t end = out.raw.find("\n\n", at);
    if (end == std::string::npos) end = out.raw.size();
    const std::string ev = out.raw.substr(at, end - at);
    at = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      out.done = true;
      break;
    }
    out.events.push_back(ojson::parse(data));
  }
  return out;
}

std::string get_body(httplib::Client& cli, const std::string& path) {
  const httplib::Result r = cli.Get(path);
  if (!r) throw std::runtime_error("GET " + path + ": no response (" + httplib::to_string(r.error()) + ")");
  return r->body;
}

double metric(const std::string& text, const std::string& name) {
  size_t at = 0;
  while ((at = text.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::atof(text.c_str() + at + name.size() + 1);
    ++at;
  }
  return -1.0;
}

std::string png_data_url(int width, int height, int seed) {
  const Bytes b = png_bytes(width, height, seed);
  return "data:image/png;base64," + base64::encode(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

void write_png(const std::string& path, int width, int height, int seed) {
  const Bytes b = png_bytes(width, height, seed);
  write_file(path, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
}

}  // namespace k3::testing
