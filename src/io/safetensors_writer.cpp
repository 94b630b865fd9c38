#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace k3 {

namespace {

// The mode a plain fopen(path, "w") would give a new file: 0666 less the umask.  mkstemp makes
// 0600 files, and umask() itself cannot be read without changing it (not thread-safe), so the
// value comes from /proc (Linux 4.7+); 022 when that is unavailable.
mode_t new_file_mode() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Umask:", 0) == 0) return 0666 & ~static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  }
  return 0644;
}

void write_fully(int fd, const void* p, size_t n, const std::string& name) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n != 0) {
    const ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(name, ": write failed: ", std::strerror(errno));
    if (w == 0) fail(name, ": write failed: no progress");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

// Where write() puts the bytes.  A regular file (or a symlink to one) is replaced atomically: a
// unique temporary from mkstemp beside the real target, renamed over it once complete, so a
// failure never leaves a half-written file under the name, never touches a user's own
// "<name>.tmp", and a symlink stays a symlink (the file it points to gets the new contents).
// Anything else that exists (a device such as /dev/null, a FIFO, /dev/stdout) cannot be replaced
// by renaming without destroying it, so it is written in place; so are /dev/stdout, /dev/fd/N and
// /proc/... even when they lead to a regular file (stdout redirected to one).
class OutputFile {
 public:
  explicit OutputFile(const std::string& path) : path_(path) {
    if (path.empty()) fail("output path is empty (expected a file name)");
    if (path.back() == '/') fail(path, ": is a directory name (ends in '/'), expected a file name");
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) fail(path, ": is a directory, expected a file name");
      // /dev/stdout, /dev/fd/N and /proc/self/fd/N name an open file (perhaps one the shell
      // redirected to): replacing what they resolve to would bypass that file description.
      const bool fd_alias =
          path.rfind("/dev/fd/", 0) == 0 || path.rfind("/dev/std", 0) == 0 || path.rfind("/proc/", 0) == 0;
      if (!S_ISREG(st.st_mode) || fd_alias) {
        fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (S_ISREG(st.st_mode) ? O_TRUNC : 0));
        if (fd_ < 0) fail(path, ": cannot open for writing: ", std::strerror(errno));
        return;
      }
      // Resolve symlinks so the rename replaces the file, not the link.
      char* real = ::realpath(path.c_str(), nullptr);
      if (real == nullptr) fail(path, ": cannot resolve: ", std::strerror(errno));
      target_ = real;
      std::free(real);
      if (::access(target_.c_str(), W_OK) != 0) fail(path, ": cannot write: ", std::strerror(errno));
      mode_ = st.st_mode & 07777;
    } else if (errno != ENOENT) {
      fail(path, ": cannot create: ", std::strerror(errno));
    } else {
      struct stat lst {};
      // stat failed but lstat works: a symlink to nothing.  Like cp, do not write through it
      // (where it would land is easy to get wrong and rarely what was meant).
      if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
        fail(path, ": is a dangling symlink; refusing to write through it");
      target_ = path;
      mode_ = new_file_mode();
    }
    const size_t slash = target_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : target_.substr(0, slash);
    std::string tmpl = target_ + ".tmp.XXXXXX";
    fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);  // mkstemp, not inherited by children forked meanwhile
    if (fd_ < 0) fail(path, ": cannot create: ", std::strerror(errno), " (making a temporary file in ", dir, ")");
    tmp_ = tmpl;
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());  // never leave a partial file behind
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void put(const void* p, size_t n) {
    write_fully(fd_, p, n, path_);
    size_ += n;
  }

  // n zero bytes: a hole in the temporary (lseek past it, the size fixed at commit), written
  // out for output written in place, where seeking may be impossible (a FIFO) or land elsewhere
  // (an O_APPEND stdout).
  void skip(uint64_t n) {
    if (tmp_.empty()) {
      static const std::vector<uint8_t> zeros(size_t{1} << 20, 0);
      for (uint64_t left = n; left != 0;) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(left, zeros.size()));
        write_fully(fd_, zeros.data(), k, path_);
        left -= k;
      }
    } else if (n != 0 && ::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) {
      fail(path_, ": cannot seek past a hole of ", n, " bytes: ", std::strerror(errno));
    }
    size_ += n;
  }

  void commit() {
    if (!tmp_.empty()) {
      // A trailing hole has no bytes written after it: the size says where the file ends.
      if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0)
        fail(path_, ": cannot set the file size to ", size_, " bytes: ", std::strerror(errno));
      if (::fchmod(fd_, mode_) != 0) fail(path_, ": cannot set permissions: ", std::strerror(errno));
      if (::fsync(fd_) != 0) fail(path_, ": write failed (fsync): ", std::strerror(errno));
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(path_, ": write failed (close): ", std::strerror(errno));
    if (tmp_.empty()) return;
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      fail(path_, ": cannot replace it with the new file: ", std::strerror(errno));
    tmp_.clear();
  }

 private:
  std::string path_;    // as given
  std::string target_;  // the regular file replaced (symlinks resolved)
  std::string tmp_;     // the temporary while it exists (removed by the destructor)
  mode_t mode_ = 0644;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes put or skipped so far
};

}  // namespace

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  K3_CHECK(!names_.contains(name), "safetensors writer: tensor '", name, "' added twice");
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    K3_CHECK(d >= 0, "safetensors writer: tensor '", name, "' has a negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  names_.insert(name);
  entries_.push_back({name, dtype, std::move(shape), n, std::move(fill)});
}

void SafetensorsWriter::add_bytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                  std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add(name, dtype, std::move(shape), [shared, name](uint8_t* dst, size_t nbytes) {
    K3_CHECK(shared->size() == nbytes, "safetensors writer: tensor '", name, "' has ", shared->size(),
             " bytes, shape needs ", nbytes);
    if (nbytes != 0) std::memcpy(dst, shared->data(), nbytes);
  });
}

void SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  add_bytes(name, DType::kF32, std::move(shape), std::vector<uint8_t>(p, p + values.size() * 4));
}

void SafetensorsWriter::add_i32(const std::string& name, std::vector<int64_t> shape,
                                const std::vector<int32_t>& values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  add_bytes(name, DType::kI32, std::move(shape), std::vector<uint8_t>(p, p + values.size() * 4));
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const Entry& e : entries_) total += e.nbytes;
  return total;
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

void SafetensorsWriter::write(const std::string& path, const std::function<void(uint64_t)>& on_tensor) const {
  std::vector<const Entry*> order;
  for (const Entry& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const Entry* a, const Entry* b) { return dtype_size(a->dtype) > dtype_size(b->dtype); });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    header[e->name] = {{"dtype", dtype_name(e->dtype)}, {"shape", e->shape}, {"data_offsets", {offset, offset + e->nbytes}}};
    offset += e->nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');

  OutputFile out(path);
  const uint64_t len = text.size();
  out.put(&len, 8);
  out.put(text.data(), text.size());
  std::vector<uint8_t> buf;
  for (const Entry* e : order) {
    if (e->fill) {
      buf.assign(e->nbytes, 0);
      e->fill(buf.data(), buf.size());
      out.put(buf.data(), buf.size());
    } else {
      out.skip(e->nbytes);
    }
    if (on_tensor) on_tensor(e->nbytes);
  }
  buf.clear();
  buf.shrink_to_fit();
  out.commit();
}

void write_file_atomically(const std::string& path, std::string_view data) {
  OutputFile out(path);
  out.put(data.data(), data.size());
  out.commit();
}

}  // namespace k3
