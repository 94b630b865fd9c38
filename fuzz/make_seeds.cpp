// make_seeds: seeds made from the project's test fixtures (tests/data/fixtures), written at run
// time by scripts/fuzz.sh into a target's working corpus, so the fixtures stay the one copy of
// that data and the repository holds only the small hand-written seeds of fuzz/corpus/.
//
//   usage: make_seeds TARGET OUT_DIR   (a target without fixture seeds writes nothing)
//
// Each seed goes to OUT_DIR/fixture-<FNV-1a 64 of its bytes, in hex>.  JSON is read and written
// with nlohmann::ordered_json, so objects keep the fixtures' key order.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

#ifndef K3_SOURCE_DIR
#error "K3_SOURCE_DIR must name the source tree (fuzz/CMakeLists.txt)"
#endif

fs::path fixture(const fs::path& rel) { return fs::path(K3_SOURCE_DIR) / "tests" / "data" / "fixtures" / rel; }

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The non-blank lines of a JSON Lines file, parsed.
std::vector<json> jsonl(const fs::path& path) {
  std::istringstream in(read(path));
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
    out.push_back(json::parse(line));
  }
  return out;
}

std::string dumps(const json& value) { return value.dump(); }

// Python's truthiness of a JSON value (for the fixtures' optional flags).
bool truthy(const json* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number_integer() || v->is_number_unsigned()) return v->get<std::int64_t>() != 0;
  if (v->is_number_float()) return v->get<double>() != 0.0;
  if (v->is_string()) return !v->get_ref<const std::string&>().empty();
  return !v->empty();  // object, array
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// The chat fixture cases that carry an API request body.
std::vector<json> chat_cases() {
  std::vector<json> out;
  for (auto& c : jsonl(fixture("chat/cases.jsonl"))) {
    const json* req = member(c, "request");
    if (req != nullptr && req->is_object()) out.push_back(std::move(c));
  }
  return out;
}

// The JSON schemas of the chat fixtures: response_format schemas and tool parameters.
std::vector<json> schemas() {
  std::vector<json> out;
  for (const auto& c : chat_cases()) {
    const json& req = c["request"];
    const json* rf = member(req, "response_format");
    if (rf != nullptr && rf->is_object()) {
      const json* js = member(*rf, "json_schema");
      if (js != nullptr && js->is_object() && js->contains("schema")) out.push_back((*js)["schema"]);
    }
    const json* tools = member(req, "tools");
    if (truthy(tools) && tools->is_array()) {
      for (const auto& tool : *tools) {
        const json* fn = member(tool, "function");
        const json* params = fn != nullptr ? member(*fn, "parameters") : nullptr;
        if (params != nullptr && params->is_object()) out.push_back(*params);
      }
    }
  }
  return out;
}

std::vector<std::string> seeds(const std::string& target) {
  std::vector<std::string> out;
  if (target == "config") {
    out.push_back(read(fixture("k3-tiny-a/config.json")));
    out.push_back(read(fixture("vision-tiny-a/config.json")));
    out.push_back(read(fixture("vision-tiny-a/preprocessor_config.json")));
  } else if (target == "checkpoint_index") {
    json index = json::parse(read(fixture("k3-tiny-a/model.safetensors.index.json")));
    // Every 40th tensor: the fixture's layout in a few kB (the whole index is 100 kB).
    json some = json::object();
    std::size_t i = 0;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (i++ % 40 == 0) some[name] = shard;
    }
    json seed = json::object();
    seed["metadata"] = index.contains("metadata") ? index["metadata"] : json::object();
    seed["weight_map"] = std::move(some);
    out.push_back(dumps(seed));
  } else if (target == "tiktoken") {
    // The first ranks of the cl100k fixture (all single bytes and early merges) with K3's
    // special tokens named after them.
    const std::string text = read(fixture("tokenizer/cl100k_base.tiktoken"));
    std::string ranks;
    std::size_t pos = 0;
    for (int line = 0; line < 320 && pos <= text.size(); ++line) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      if (line > 0) ranks += '\n';
      ranks.append(text, pos, end - pos);
      pos = end + 1;
    }
    ranks += '\n';
    const int base = 320;
    const char* names[] = {"[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "<|media_pad|>"};
    json decoder = json::object();
    for (int i = 0; i < 7; ++i) decoder[std::to_string(base + i)] = json{{"content", names[i]}, {"special", true}};
    json config = json::object();
    config["added_tokens_decoder"] = std::move(decoder);
    config["bos_token"] = "[BOS]";
    config["eos_token"] = json{{"content", "[EOS]"}};
    out.push_back(ranks);
    out.push_back(ranks + "--- tokenizer_config.json ---\n" + dumps(config));
  } else if (target == "tokenizer") {
    auto cases = jsonl(fixture("tokenizer/corpus.jsonl"));
    for (std::size_t i = 0; i < cases.size() && i < 80; ++i) {
      out.push_back(std::string(1, static_cast<char>(2 * (i % 2))) + cases[i]["text"].get<std::string>());
    }
  } else if (target == "chat_render") {
    for (const auto& c : chat_cases()) out.push_back(dumps(c["request"]));
  } else if (target == "http_request") {
    for (const auto& c : chat_cases()) {
      json body = c["request"];
      body["max_tokens"] = 16;
      body["temperature"] = 0.7;
      body["seed"] = 1;
      out.push_back(dumps(body));
    }
  } else if (target == "output_parser") {
    for (const auto& c : jsonl(fixture("chat/completions.jsonl"))) {
      const json& ctx = c["context"];
      const int flags = (truthy(member(ctx, "thinking")) ? 1 : 0) | (truthy(member(ctx, "request_has_tools")) ? 2 : 0);
      const auto& completion = c["completion"].get_ref<const std::string&>();
      out.push_back(std::string(1, static_cast<char>(flags)) + completion);
      out.push_back(std::string(1, static_cast<char>(flags | 4)) + completion);
    }
  } else if (target == "json_schema") {
    auto all = schemas();
    for (std::size_t i = 0; i < all.size(); ++i) {
      // A walk: the constraint's mode, a budget of 40 tokens, then token picks.
      std::string walk{static_cast<char>(i % 4), static_cast<char>(40)};
      for (std::size_t k = 0; k < 24; ++k) walk += static_cast<char>((7 * k + i) % 256);
      out.push_back(dumps(all[i]) + std::string(1, '\0') + walk);
    }
  } else if (target == "image") {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(fixture("vision-tiny-a/images"))) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      std::string data = read(fixture("vision-tiny-a/images") / name);
      if (data.size() <= 8192) out.push_back(std::move(data));
    }
  }
  return out;
}

std::string fnv1a64_hex(const std::string& data) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds TARGET OUT_DIR   (a target without fixture seeds writes nothing)\n");
    return 2;
  }
  try {
    const std::string target = argv[1];
    const fs::path out = argv[2];
    fs::create_directories(out);
    for (const auto& data : seeds(target)) {
      std::ofstream f(out / ("fixture-" + fnv1a64_hex(data)), std::ios::binary);
      f.write(data.data(), static_cast<std::streamsize>(data.size()));
      if (!f) throw std::runtime_error("cannot write into " + out.string());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
