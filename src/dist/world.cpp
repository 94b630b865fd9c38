#include "dist/world.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"

#if K3_HAVE_MPI
#include <mpi.h>
#endif

namespace k3::dist {
namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != nullptr && *end == '\0' && n >= 0 && n < std::numeric_limits<int>::max() ? static_cast<int>(n) : -1;
}

bool launched_by_mpirun() {
  return env_int("OMPI_COMM_WORLD_SIZE") >= 0 || env_int("PMIX_RANK") >= 0 || env_int("PMI_SIZE") >= 0;
}

struct State {
  int rank = 0;
  int size = 1;
  Traffic traffic;
};
State g_state;
std::once_flag g_started;

#if K3_HAVE_MPI
// How the row exchanges move their bytes (K3_MPI_EXCHANGE): one MPI_Allgatherv each (the
// default), or one-sided puts into a window of fixed capacity (K3_MPI_WINDOW_MB, 64 by default),
// one fence opening and one closing each exchange; an exchange larger than the window falls back
// to the collective (every rank sees the same sizes, so all fall back together).
enum class Exchange { kCollective, kRma };

Exchange exchange_kind() {
  static const Exchange kind = [] {
    const char* v = std::getenv("K3_MPI_EXCHANGE");
    const std::string s = v != nullptr ? v : "";
    if (s.empty() || s == "allgatherv") return Exchange::kCollective;
    if (s == "rma") return Exchange::kRma;
    throw Error(cat("K3_MPI_EXCHANGE: expected allgatherv or rma, got '", s, "'"));
  }();
  return kind;
}

struct Window {
  MPI_Win win = MPI_WIN_NULL;
  float* base = nullptr;
  int64_t capacity = 0;  // floats
};
Window g_window;

void check(int rc, const char* call);

// The window, allocated by every rank on the first exchange (a collective call that every rank
// makes at the same point).
Window& window() {
  if (g_window.win != MPI_WIN_NULL) return g_window;
  int mb = env_int("K3_MPI_WINDOW_MB");
  if (mb <= 0) mb = 64;
  g_window.capacity = static_cast<int64_t>(mb) * (1 << 20) / static_cast<int64_t>(sizeof(float));
  check(MPI_Win_allocate(static_cast<MPI_Aint>(g_window.capacity * static_cast<int64_t>(sizeof(float))),
                         static_cast<int>(sizeof(float)), MPI_INFO_NULL, MPI_COMM_WORLD, &g_window.base, &g_window.win),
        "MPI_Win_allocate");
  return g_window;
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(cat("rank ", g_state.rank, ": ", call, " failed: ", std::string(msg, static_cast<size_t>(len))));
}

void finish() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_window.win != MPI_WIN_NULL) MPI_Win_free(&g_window.win);
  MPI_Finalize();
}
#endif

}  // namespace

int launched_size() {
  int n = env_int("OMPI_COMM_WORLD_SIZE");
  if (n < 0) n = env_int("PMI_SIZE");
  return n < 1 ? 1 : n;
}

int launched_rank() {
  int r = env_int("OMPI_COMM_WORLD_RANK");
  if (r < 0) r = env_int("PMIX_RANK");
  if (r < 0) r = env_int("PMI_RANK");
  return r < 0 ? 0 : r;
}

bool built_with_mpi() { return K3_HAVE_MPI != 0; }

void start() {
  std::call_once(g_started, [] {
    if (!launched_by_mpirun()) return;
#if K3_HAVE_MPI
    exchange_kind();  // a bad K3_MPI_EXCHANGE fails here, not at the first exchange
    int provided = 0;
    // Serialized: the forward steps run on one thread at a time, though not always the main one
    // (the server's scheduler thread).
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw Error("MPI_Init_thread failed");
    std::atexit(finish);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_state.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_state.size);
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error(cat("rank ", g_state.rank, ": the MPI library offers no MPI_THREAD_SERIALIZED support"));
#else
    if (launched_size() > 1)
      throw Error(cat("launched by mpirun with ", launched_size(),
                      " ranks, but this k3 was built without MPI (install libopenmpi-dev, then rebuild)"));
#endif
  });
}

int rank() {
  start();
  return g_state.rank;
}

int size() {
  start();
  return g_state.size;
}

void allgather(const float* mine, std::span<const int64_t> counts, float* all) {
  start();
  K3_CHECK(static_cast<int>(counts.size()) == g_state.size, "allgather: ", counts.size(), " counts for ",
           g_state.size, " ranks");
  [[maybe_unused]] int64_t total = 0;
  for (int64_t c : counts) total += c;
  const int64_t own = counts[static_cast<size_t>(g_state.rank)];
  if (g_state.size == 1) {
    std::copy_n(mine, own, all);
    return;
  }
#if K3_HAVE_MPI
  K3_CHECK(total <= std::numeric_limits<int>::max(), "rank ", g_state.rank, ": one exchange of ", total,
           " values is more than MPI_Allgatherv takes (use a smaller --prefill-chunk)");
  std::vector<int> n(counts.size()), at(counts.size());
  int offset = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    n[k] = static_cast<int>(counts[k]);
    at[k] = offset;
    offset += n[k];
  }
  const int me = g_state.rank;
  const auto t0 = std::chrono::steady_clock::now();
  if (exchange_kind() == Exchange::kRma && total <= window().capacity) {
    Window& w = window();
    check(MPI_Win_fence(MPI_MODE_NOPRECEDE, w.win), "MPI_Win_fence");
    for (int k = 1; k < g_state.size; ++k) {  // (me + k) % R: not every rank at the same target first
      const int to = (me + k) % g_state.size;
      if (n[static_cast<size_t>(me)] > 0)
        check(MPI_Put(mine, n[static_cast<size_t>(me)], MPI_FLOAT, to, at[static_cast<size_t>(me)],
                      n[static_cast<size_t>(me)], MPI_FLOAT, w.win),
              "MPI_Put");
    }
    check(MPI_Win_fence(MPI_MODE_NOSUCCEED, w.win), "MPI_Win_fence");
    for (int k = 0; k < g_state.size; ++k)
      if (k != me) std::copy_n(w.base + at[static_cast<size_t>(k)], n[static_cast<size_t>(k)], all + at[static_cast<size_t>(k)]);
    std::copy_n(mine, own, all + at[static_cast<size_t>(me)]);
  } else {
    check(MPI_Allgatherv(mine, n[static_cast<size_t>(me)], MPI_FLOAT, all, n.data(), at.data(), MPI_FLOAT,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }
  g_state.traffic.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g_state.traffic.bytes_sent += static_cast<uint64_t>(own) * sizeof(float) * static_cast<uint64_t>(g_state.size - 1);
  g_state.traffic.bytes_received += static_cast<uint64_t>(total - own) * sizeof(float);
  ++g_state.traffic.collectives;
#endif
}

struct PendingExchange::Impl {
  std::vector<int> n, at;
#if K3_HAVE_MPI
  MPI_Request request = MPI_REQUEST_NULL;
#endif
};

PendingExchange::PendingExchange() = default;
PendingExchange::PendingExchange(PendingExchange&&) noexcept = default;
PendingExchange& PendingExchange::operator=(PendingExchange&&) noexcept = default;
PendingExchange::~PendingExchange() {
#if K3_HAVE_MPI
  if (impl && impl->request != MPI_REQUEST_NULL) MPI_Wait(&impl->request, MPI_STATUS_IGNORE);
#endif
}

PendingExchange allgather_begin(const float* mine, std::span<const int64_t> counts, float* all) {
  PendingExchange p;
  start();
#if K3_HAVE_MPI
  if (g_state.size > 1 && exchange_kind() == Exchange::kCollective) {
    K3_CHECK(static_cast<int>(counts.size()) == g_state.size, "allgather: ", counts.size(), " counts for ",
             g_state.size, " ranks");
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    K3_CHECK(total <= std::numeric_limits<int>::max(), "rank ", g_state.rank, ": one exchange of ", total,
             " values is more than MPI_Iallgatherv takes (use a smaller --prefill-chunk)");
    const auto t0 = std::chrono::steady_clock::now();
    p.impl = std::make_unique<PendingExchange::Impl>();
    p.impl->n.resize(counts.size());
    p.impl->at.resize(counts.size());
    int offset = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      p.impl->n[k] = static_cast<int>(counts[k]);
      p.impl->at[k] = offset;
      offset += p.impl->n[k];
    }
    const int64_t own = counts[static_cast<size_t>(g_state.rank)];
    check(MPI_Iallgatherv(mine, static_cast<int>(own), MPI_FLOAT, all, p.impl->n.data(), p.impl->at.data(), MPI_FLOAT,
                          MPI_COMM_WORLD, &p.impl->request),
          "MPI_Iallgatherv");
    g_state.traffic.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g_state.traffic.bytes_sent += static_cast<uint64_t>(own) * sizeof(float) * static_cast<uint64_t>(g_state.size - 1);
    g_state.traffic.bytes_received += static_cast<uint64_t>(total - own) * sizeof(float);
    ++g_state.traffic.collectives;
    return p;
  }
#endif
  allgather(mine, counts, all);
  return p;
}

void allgather_end(PendingExchange& p) {
#if K3_HAVE_MPI
  if (!p.impl || p.impl->request == MPI_REQUEST_NULL) return;
  const auto t0 = std::chrono::steady_clock::now();
  check(MPI_Wait(&p.impl->request, MPI_STATUS_IGNORE), "MPI_Wait");
  g_state.traffic.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#else
  (void)p;
#endif
}

void allgather_u64(const uint64_t* mine, size_t n, uint64_t* all) {
  start();
  if (g_state.size == 1) {
    std::copy_n(mine, n, all);
    return;
  }
#if K3_HAVE_MPI
  K3_CHECK(n <= static_cast<size_t>(std::numeric_limits<int>::max()), "allgather_u64 of ", n, " values");
  check(MPI_Allgather(mine, static_cast<int>(n), MPI_UINT64_T, all, static_cast<int>(n), MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Allgather");
#endif
}

void broadcast(void* data, size_t bytes, int root) {
  start();
  if (g_state.size == 1) return;
#if K3_HAVE_MPI
  K3_CHECK(bytes <= static_cast<size_t>(std::numeric_limits<int>::max()), "broadcast of ", bytes, " bytes");
  check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  if (g_state.rank == root) g_state.traffic.bytes_sent += bytes * static_cast<uint64_t>(g_state.size - 1);
  else g_state.traffic.bytes_received += bytes;
  ++g_state.traffic.collectives;
#endif
}

void check_same(uint64_t value, const std::string& what) {
  start();
  if (g_state.size == 1) return;
#if K3_HAVE_MPI
  std::vector<uint64_t> all(static_cast<size_t>(g_state.size));
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  for (size_t k = 1; k < all.size(); ++k)
    if (all[k] != all[0])
      throw Error(cat("rank ", k, "'s ", what, " differs from rank 0's: every rank must run the same"));
#endif
}

void abort_all(int code) {
#if K3_HAVE_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && g_state.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

Traffic traffic() { return g_state.traffic; }
void reset_traffic() { g_state.traffic = {}; }

}  // namespace k3::dist
