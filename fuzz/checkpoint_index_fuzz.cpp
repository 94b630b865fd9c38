// The sharded checkpoint index (io/checkpoint.h): the input is model.safetensors.index.json of a
// directory that also holds the two shards the k3-tiny-a fixture's index names, each with the
// tensors that index assigns to it (one f32 element apiece), plus a directory and a FIFO named
// like shards.  Opened mapped, as a checkpoint larger than memory is.
// Properties: opening returns or throws k3::Error; an accepted checkpoint holds every tensor the
// index maps, in the shard it maps it to, and nothing but the shards' tensors.
#include <sys/stat.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_support.h"
#include "io/checkpoint.h"
#include "io/json_document.h"
#include "io/safetensors_writer.h"

namespace {

using namespace k3;

// The checkpoint directory, with the shards written once.  Returns the tensors of each shard.
const std::map<std::string, std::set<std::string>>& shards(const std::string& dir) {
  static const std::map<std::string, std::set<std::string>> made = [&] {
    const std::string fixture = fuzz::source_path("tests/data/fixtures/k3-tiny-a/model.safetensors.index.json");
    const nlohmann::json index = parse_json_document(read_text_file(fixture), fixture);
    std::map<std::string, std::set<std::string>> by_shard;
    for (const auto& [name, shard] : index["weight_map"].items()) by_shard[shard.get<std::string>()].insert(name);
    ::mkdir(dir.c_str(), 0700);
    for (const auto& [shard, names] : by_shard) {
      SafetensorsWriter w;
      for (const std::string& name : names) w.add_f32(name, {1}, {1.0f});
      w.write(dir + "/" + shard);
    }
    ::mkdir((dir + "/model-dir.safetensors").c_str(), 0700);
    ::mkfifo((dir + "/model-fifo.safetensors").c_str(), 0600);
    return by_shard;
  }();
  return made;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fuzz::scratch_dir() + "/checkpoint";
  const auto& written = shards(dir);
  fuzz::write_file(dir + "/model.safetensors.index.json", fuzz::as_text(data, size));
  std::unique_ptr<Checkpoint> ckpt;
  try {
    ckpt = std::make_unique<Checkpoint>(dir, Residency::kMapped);
  } catch (const Error&) {
    return 0;
  }
  // Accepted: the index is a JSON object whose weight_map names only shards that exist.
  const nlohmann::json index = parse_json_document(std::string(fuzz::as_text(data, size)), "the index");
  std::set<std::string> expected;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    const TensorView* t = ckpt->find(name);
    K3_FUZZ_ASSERT(t != nullptr, "tensor '", name, "' of the index is missing");
    K3_FUZZ_ASSERT(*t->file == dir + "/" + shard.get<std::string>(), "tensor '", name, "' comes from ", *t->file);
  }
  for (const std::string& path : ckpt->shard_paths()) {
    const std::string shard = path.substr(dir.size() + 1);
    K3_FUZZ_ASSERT(written.count(shard) == 1, "opened an unexpected shard ", path);
    expected.insert(written.at(shard).begin(), written.at(shard).end());
  }
  K3_FUZZ_ASSERT(ckpt->tensors().size() == expected.size(), ckpt->tensors().size(), " tensors, the shards hold ",
                 expected.size());
  return 0;
}
