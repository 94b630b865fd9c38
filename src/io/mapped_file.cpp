#include "io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "io/available_memory.h"
#include "io/numa.h"
#include "io/read_fd.h"

namespace k3 {

Residency parse_residency(const std::string& name) {
  if (name == "auto") return Residency::kAuto;
  if (name == "memory") return Residency::kMemory;
  if (name == "mmap") return Residency::kMapped;
  if (name == "stream") return Residency::kStreamed;
  fail("unknown weight residency '", name, "' (expected auto, memory, mmap or stream)");
}

const char* residency_name(Residency r) {
  switch (r) {
    case Residency::kAuto: return "auto";
    case Residency::kMemory: return "memory";
    case Residency::kMapped: return "mmap";
    case Residency::kStreamed: return "stream";
  }
  return "?";
}

namespace {
std::atomic<int> g_default{-1};  // -1: not set yet (read K3_WEIGHTS on first use)
}  // namespace

void set_default_residency(Residency r) { g_default = static_cast<int>(r); }

Residency default_residency() {
  int v = g_default.load();
  if (v < 0) {
    const char* env = std::getenv("K3_WEIGHTS");
    v = static_cast<int>(env && *env ? parse_residency(env) : Residency::kAuto);
    g_default = v;
  }
  return static_cast<Residency>(v);
}

namespace {

// A process-wide byte budget: set by its option, else read from `variable` on first use (-1: not
// read yet; 0: none).
uint64_t byte_budget(std::atomic<int64_t>& slot, const char* variable) {
  int64_t v = slot.load();
  if (v < 0) {
    const char* env = std::getenv(variable);
    v = env && *env ? static_cast<int64_t>(parse_byte_size(env)) : 0;
    slot = v;
  }
  return static_cast<uint64_t>(v);
}

std::atomic<int64_t> g_weight_budget{-1};
std::atomic<int64_t> g_memory_budget{-1};

}  // namespace

void set_default_weight_budget(uint64_t bytes) { g_weight_budget = static_cast<int64_t>(bytes); }
uint64_t default_weight_budget() { return byte_budget(g_weight_budget, "K3_WEIGHT_BUDGET"); }

void set_default_memory_budget(uint64_t bytes) { g_memory_budget = static_cast<int64_t>(bytes); }
uint64_t default_memory_budget() { return byte_budget(g_memory_budget, "K3_MEMORY_BUDGET"); }

uint64_t parse_byte_size(const std::string& text) {
  auto bad = [&](const char* why) -> uint64_t {
    fail("memory size '", text, "' ", why, " (write e.g. 64G, 512M, 1.5T, a byte count, or 40% of the memory available)");
  };
  if (text.empty()) return bad("is empty");
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return bad("is not a number");
  }
  if (!(v >= 0) || text[0] == '-' || text[0] == '+' || std::isspace(static_cast<unsigned char>(text[0])))
    return bad("must be a non-negative number");
  std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "%") {
    if (v > 100) return bad("is more than 100%");
    const uint64_t avail = available_memory_bytes();
    if (avail == 0) fail("memory size '", text, "': the memory available is unknown here; give a size in bytes");
    return static_cast<uint64_t>(static_cast<double>(avail) * v / 100.0);
  }
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();
  if (unit.empty()) scale = 1;
  else if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else return bad("has an unknown unit");
  const double bytes = v * scale;
  if (bytes >= 9.0e18) return bad("is too large");
  return static_cast<uint64_t>(bytes);
}

// ---- SIGBUS on a mapped file that shrank --------------------------------------------------------
// A shared mapping of a file that is truncated (or replaced in place) while mapped faults with
// SIGBUS when a page past the new end is touched, and the default action kills the process with
// no word of why.  A handler, installed with the first mapping, looks the faulting address up in
// a fixed registry of live mappings and prints which file changed.  Everything it touches is
// preformatted at map time: a signal handler may only call async-signal-safe functions (write,
// _exit), so no allocation, no locks and no formatting happen inside it.
namespace {

constexpr size_t kMaxMappings = 512;
constexpr size_t kMessageBytes = 512;

struct MappingSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live (only live slots are read)
  std::atomic<uintptr_t> begin{0}, end{0};
  size_t length = 0;
  char message[kMessageBytes];
};

MappingSlot g_mappings[kMaxMappings];
std::mutex g_mappings_mu;  // serialises register/unregister (never taken by the handler)
struct sigaction g_previous_sigbus {};
bool g_sigbus_installed = false;

void sigbus_handler(int sig, siginfo_t* info, void* context) {
  // si_addr means something only for a fault the kernel raised (si_code > 0); a SIGBUS sent by
  // kill() or raise() carries a sender pid in that space instead.
  const bool fault = info != nullptr && info->si_code > 0;
  const auto addr = reinterpret_cast<uintptr_t>(fault ? info->si_addr : nullptr);
  for (MappingSlot& slot : g_mappings) {
    if (!fault) break;
    if (slot.state.load(std::memory_order_acquire) != 2) continue;
    if (addr >= slot.begin.load(std::memory_order_relaxed) && addr < slot.end.load(std::memory_order_relaxed)) {
      const char* p = slot.message;
      size_t n = slot.length;
      while (n > 0) {
        const ssize_t w = ::write(STDERR_FILENO, p, n);
        if (w <= 0) break;
        p += w;
        n -= static_cast<size_t>(w);
      }
      ::_exit(1);
    }
  }
  // Not one of ours: hand it to whoever had it before, or die of it as the default would.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (!fault && g_previous_sigbus.sa_handler == SIG_IGN) return;  // a sent SIGBUS stays ignored
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN &&
      g_previous_sigbus.sa_handler != nullptr) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  ::raise(sig);  // delivered on return (SIGBUS is blocked inside its handler); a fault re-faults
}

// Appends `text` to buf[len..cap) without overflowing; returns the new length.
size_t append_bounded(char* buf, size_t len, size_t cap, const std::string& text) {
  const size_t n = std::min(text.size(), cap - len);
  std::memcpy(buf + len, text.data(), n);
  return len + n;
}

// Returns the slot index, or -1 when the registry is full (the mapping then works, unguarded).
int register_mapping(const void* base, size_t length, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mappings_mu);
  if (!g_sigbus_installed) {
    struct sigaction sa {};
    sa.sa_sigaction = sigbus_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, &g_previous_sigbus) != 0) return -1;
    g_sigbus_installed = true;
  }
  for (size_t i = 0; i < kMaxMappings; ++i) {
    MappingSlot& slot = g_mappings[i];
    if (slot.state.load(std::memory_order_relaxed) != 0) continue;
    slot.state.store(1, std::memory_order_relaxed);
    // A very long path keeps its end (the file name) and loses the middle.
    const std::string head = "k3: error: checkpoint file ";
    const std::string tail = " changed or was truncated while mapped; use --weights memory\n";
    const size_t room = kMessageBytes - head.size() - tail.size();
    const std::string shown = path.size() <= room ? path : "..." + path.substr(path.size() - (room - 3));
    size_t len = append_bounded(slot.message, 0, kMessageBytes, head);
    len = append_bounded(slot.message, len, kMessageBytes, shown);
    len = append_bounded(slot.message, len, kMessageBytes, tail);
    slot.length = len;
    slot.begin.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
    // The mapping covers whole pages: a fault in the tail of the last one is ours too.
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    slot.end.store((reinterpret_cast<uintptr_t>(base) + length + page - 1) / page * page, std::memory_order_relaxed);
    slot.state.store(2, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void unregister_mapping(int index) {
  if (index < 0) return;
  std::lock_guard<std::mutex> lock(g_mappings_mu);
  g_mappings[index].state.store(0, std::memory_order_release);
}

}  // namespace

MappedFile::MappedFile(const std::string& path, Residency residency, size_t align_offset)
    : path_(path), residency_(residency == Residency::kMemory ? Residency::kMemory : Residency::kMapped) {
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, ": not a regular file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  if (residency_ == Residency::kMapped) {
    mapped_ = size_;
    void* p = ::mmap(nullptr, mapped_, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) fail(path, ": cannot map ", size_, " bytes: ", std::strerror(errno));
    base_ = p;
    data_ = static_cast<const uint8_t*>(p);
    guard_ = register_mapping(p, mapped_, path);
    return;
  }
  // kMemory: anonymous memory in whole 2 MiB pages, filled by pread, then made read-only.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t pad = (64 - align_offset % 64) % 64;
  mapped_ = (pad + size_ + kHuge - 1) / kHuge * kHuge;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail(path, ": cannot allocate ", size_, " bytes to hold it in memory: ", std::strerror(errno),
         " (use --weights mmap to stream it from the page cache)");
  ::madvise(p, mapped_, MADV_HUGEPAGE);  // best effort: THP may be off
  interleave_over_nodes(p, mapped_);      // several NUMA nodes: read at all their bandwidths
  char* dst = static_cast<char*>(p) + pad;
  size_t off = 0;
  while (off < size_) {
    const ssize_t r =
        ::pread(fd.get(), dst + off, std::min<size_t>(size_ - off, size_t{64} << 20), static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = r < 0 ? errno : 0;
      ::munmap(p, mapped_);
      if (r == 0) fail(path, ": file shrank while being read (", off, " of ", size_, " bytes)");
      fail(path, ": read error at byte ", off, ": ", std::strerror(err));
    }
    off += static_cast<size_t>(r);
  }
  ::mprotect(p, mapped_, PROT_READ);  // weights are read-only in both residencies
  base_ = p;
  data_ = reinterpret_cast<const uint8_t*>(dst);
}

MappedFile::~MappedFile() {
  unregister_mapping(guard_);  // before munmap: the range may be reused by another mapping
  if (base_ != nullptr) ::munmap(base_, mapped_);
}

}  // namespace k3
