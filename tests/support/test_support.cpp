#include "support/test_support.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace k3::testing {

std::string fixture_dir(const std::string& name) { return std::string(K3_TEST_DATA_DIR) + "/fixtures/" + name; }

std::string demo_model_dir() { return K3_DEMO_MODEL_DIR; }

std::string test_data_path(const std::string& relative) { return std::string(K3_TEST_DATA_DIR) + "/" + relative; }

std::string shared_fixture_dir(const std::string& name) {
  const std::string dir = std::string(K3_SHARED_FIXTURES_DIR) + "/" + name;
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? dir : "";
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/k3test.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string k3_binary() { return K3_BINARY_PATH; }

CommandResult run_k3(const std::string& args, const std::string& stdin_text) {
  TempDir tmp;
  const std::string in = tmp.file("stdin"), out = tmp.file("stdout"), err = tmp.file("stderr");
  write_file(in, stdin_text);
  const std::string cmd = k3_binary() + " " + args + " <" + in + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (t == nullptr || t->dtype != DType::kF32) {
    ADD_FAILURE() << "no F32 tensor " << name << " in " << f.path();
    return {};
  }
  std::vector<float> v(t->numel());
  std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

std::vector<int32_t> read_i32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (t == nullptr || t->dtype != DType::kI32) {
    ADD_FAILURE() << "no I32 tensor " << name << " in " << f.path();
    return {};
  }
  std::vector<int32_t> v(t->numel());
  std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.insert(e.path().filename().string());
  return names;
}

void copy_dir(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::recursive_directory_iterator(to))
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
}

void rewrite_safetensors(const std::string& path, const std::function<bool(TensorEdit&)>& edit,
                         const std::vector<TensorEdit>& prepend) {
  std::vector<TensorEdit> tensors = prepend;
  std::map<std::string, std::string> metadata;
  {
    SafetensorsFile f(path);
    metadata = f.metadata();
    for (const auto& [name, t] : f.tensors()) {
      TensorEdit e{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
      if (edit(e)) tensors.push_back(std::move(e));
    }
  }
  // Written by hand so tests can produce headers the real writer would refuse.
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const TensorEdit& e : tensors) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  std::string text = header.dump();
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out += text;
  for (const TensorEdit& e : tensors) out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  write_file(path, out);
}

std::string shard_of(const std::string& dir, const std::string& tensor) {
  const auto index = nlohmann::json::parse(read_file(dir + "/model.safetensors.index.json"));
  return dir + "/" + index["weight_map"][tensor].get<std::string>();
}

void drop_tensor(const std::string& dir, const std::string& tensor) {
  rewrite_safetensors(shard_of(dir, tensor), [&](TensorEdit& e) { return e.name != tensor; });
  auto index = nlohmann::json::parse(read_file(dir + "/model.safetensors.index.json"));
  index["weight_map"].erase(tensor);
  write_file(dir + "/model.safetensors.index.json", index.dump());
}

}  // namespace k3::testing
