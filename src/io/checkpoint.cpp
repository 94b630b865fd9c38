#include "io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"
#include "base/progress.h"
#include "io/available_memory.h"
#include "io/json_document.h"
#include "io/json_preview.h"
#include "io/read_fd.h"

namespace k3 {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// open(2)/read(2) rather than an ifstream: a stream reports neither why an open failed (a
// "cannot open" for a missing file, a mode-000 file, a symlink loop or a --model that is a file
// all looked alike) nor a read error (a directory read as empty text, then "not valid JSON").
std::string read_text_file(const std::string& path) {
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode)) fail(path, ": cannot read: is a directory, not a file");
  // Not only regular files: `--request <(...)` hands over a pipe, which is read to its end.
  return read_fd(fd.get(), path + ": read error", UINT64_MAX, S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0);
}

Checkpoint::Checkpoint(const std::string& dir, Residency residency, uint64_t auto_limit) : dir_(dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(dir, ": not a directory");
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";

  // Shard file -> the tensors the index assigns to it.
  std::map<std::string, std::vector<std::string>> wanted;
  if (file_exists(index_path)) {
    nlohmann::json index = parse_json_document(read_text_file(index_path), index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path, ": missing 'weight_map' object");
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      // A NUL (from a "\u0000" escape) would cut the tensor or file name short in every system
      // call and message; no real name contains one.
      if (it.key().find('\0') != std::string::npos)
        fail(index_path, ": weight_map key ", json_preview(it.key(), 200), " contains a NUL byte");
      if (!it.value().is_string())
        fail(index_path, ": weight_map entry '", it.key(), "' is ", json_preview(it.value()), ", not a file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('\0') != std::string::npos)
        fail(index_path, ": weight_map entry '", it.key(), "' names a shard file containing a NUL byte: ",
             json_preview(shard, 200));
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        fail(index_path, ": weight_map entry '", it.key(), "' names an invalid shard file '", shard, "'");
      wanted[shard].push_back(it.key());
    }
    if (wanted.empty()) fail(index_path, ": weight_map is empty");
    for (const auto& [shard, names] : wanted) {
      struct stat ss {};
      if (::stat((dir + "/" + shard).c_str(), &ss) != 0)
        fail(index_path, ": shard '", shard, "' (holding '", names.front(), "' and ", names.size() - 1,
             " more) does not exist in ", dir);
      // A directory or FIFO exists but cannot be a shard (opening a FIFO would block).
      if (!S_ISREG(ss.st_mode))
        fail(index_path, ": shard '", shard, "' (holding '", names.front(), "' and ", names.size() - 1,
             " more) in ", dir, " is not a regular file");
    }
  } else if (file_exists(single_path)) {
    wanted["model.safetensors"] = {};
  } else {
    fail(dir, ": no model.safetensors or model.safetensors.index.json");
  }

  // Where the weights live: in memory when they fit (decode reads them at huge-page speed),
  // else mapped from the page cache (a checkpoint larger than RAM streams from disk).
  uint64_t file_bytes = 0;
  for (const auto& entry : wanted) {
    struct stat fs {};
    if (::stat((dir + "/" + entry.first).c_str(), &fs) == 0) file_bytes += static_cast<uint64_t>(fs.st_size);
  }
  const uint64_t avail = available_memory_bytes();
  if (residency == Residency::kAuto) {
    uint64_t limit = avail / 4 * 3;
    if (auto_limit > 0) limit = avail > 0 ? std::min(auto_limit, avail) : auto_limit;
    residency = limit > 0 && file_bytes <= limit ? Residency::kMemory : Residency::kStreamed;
  }
  else if (residency == Residency::kMemory && avail > 0 && file_bytes > avail)
    fail(dir, ": --weights memory needs ", file_bytes >> 20, " MiB for the checkpoint but only ", avail >> 20,
         " MiB are available; use --weights stream (or auto) to stream it within a memory budget");
  residency_ = residency;
  log_info("checkpoint ", dir, ": ", file_bytes >> 20, " MiB, weights ",
           residency == Residency::kMemory   ? "read into memory"
           : residency == Residency::kMapped ? "mapped from the page cache"
                                             : "streamed within a memory budget",
           " (", avail >> 20, " MiB available)");

  // Shards open in parallel: each parses its own header (and in kMemory reads its bytes), so a
  // 96-shard checkpoint loads at the speed of several readers, not one.
  const Residency file_residency = residency == Residency::kMemory ? Residency::kMemory : Residency::kMapped;
  std::vector<std::pair<const std::string*, const std::vector<std::string>*>> order;
  for (const auto& entry : wanted) order.push_back({&entry.first, &entry.second});
  std::vector<std::unique_ptr<SafetensorsFile>> files(order.size());
  std::vector<std::string> errors(order.size());
  Progress progress(residency == Residency::kMemory ? "reading shards" : "loading shards", order.size());
  {
    std::atomic<size_t> next{0};
    std::mutex progress_mu;
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < order.size();) {
        try {
          files[i] = std::make_unique<SafetensorsFile>(dir + "/" + *order[i].first, file_residency);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
        std::lock_guard<std::mutex> lock(progress_mu);
        progress.advance();
      }
    };
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const size_t n = std::min<size_t>(order.size(), std::min(8u, residency == Residency::kMemory ? 4u : hw * 2));
    std::vector<std::thread> threads;
    try {
      for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
    } catch (const std::system_error&) {
      // Fewer threads than asked for: the calling thread does the rest.
    }
    work();
    for (std::thread& t : threads) t.join();
  }
  progress.finish();
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);
  for (size_t i = 0; i < order.size(); ++i) {
    auto& file = files[i];
    const std::string& shard = *order[i].first;
    for (const std::string& name : *order[i].second)
      if (file->find(name) == nullptr)
        fail(index_path, ": maps tensor '", name, "' to shard '", shard, "', which does not contain it");
    for (const auto& [name, view] : file->tensors()) {
      auto [it, inserted] = tensors_.emplace(name, &view);
      if (!inserted) fail(dir, ": tensor '", name, "' is in both ", *it->second->file, " and ", file->path());
    }
    shards_.push_back(std::move(file));
  }
  log_info("checkpoint ", dir, ": ", shards_.size(), " shard(s), ", tensors_.size(), " tensors");
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::shard_paths() const {
  std::vector<std::string> paths;
  for (const auto& f : shards_) paths.push_back(f->path());
  return paths;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, view] : tensors_) n += view->nbytes;
  return n;
}

}  // namespace k3
