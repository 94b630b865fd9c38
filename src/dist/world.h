// The ranks one model runs over: the processes of an MPI job (`mpirun -np R k3 ...`), or this
// process alone.  Every rank runs every forward step on the same inputs; the products whose
// weights are split by output rows (kernels/linear.h, Matrix::row_split) compute each rank's
// rows and then exchange them here, so that every rank ends each product with all of it.
//
// MPI starts on the first call of any function here when the process was launched by mpirun
// (Open MPI's OMPI_COMM_WORLD_SIZE, or PMIx's PMIX_RANK); otherwise there is one rank and
// nothing here communicates.  A build without MPI that finds itself launched by mpirun with
// more than one rank refuses to start rather than run R independent copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace k3::dist {

int rank();
int size();
// The rank count mpirun announced in the environment (1 when not launched by it), read without
// starting MPI: for decisions made before start(), such as which rank reports a usage error.
int launched_size();
int launched_rank();
// Starts MPI when launched by mpirun (idempotent; rank() and size() call it too).  Throws
// k3::Error when launched with several ranks by a build without MPI.
void start();
// Whether this build can run over MPI.
bool built_with_mpi();

// all = every rank's `mine` in rank order, rank k contributing counts[k] floats (counts has
// size() entries and counts[rank()] floats are read from mine).  Collective.
void allgather(const float* mine, std::span<const int64_t> counts, float* all);
// The same exchange, split so that computation which does not need `all` can run while it is
// in flight: allgather_begin starts it (MPI_Iallgatherv; `mine`, `all` and the computation's own
// exchanges may not touch it until allgather_end); allgather_end waits for it.  With the
// one-sided exchanges (K3_MPI_EXCHANGE=rma) begin completes it.  Collective, in the same order
// on every rank.  A PendingExchange destroyed before its end waits for it.
class PendingExchange {
 public:
  PendingExchange();
  PendingExchange(PendingExchange&&) noexcept;
  PendingExchange& operator=(PendingExchange&&) noexcept;
  ~PendingExchange();
  struct Impl;
  std::unique_ptr<Impl> impl;
};
PendingExchange allgather_begin(const float* mine, std::span<const int64_t> counts, float* all);
void allgather_end(PendingExchange& p);

// all[k * n + i] = rank k's mine[i] for i < n.  Collective.
void allgather_u64(const uint64_t* mine, size_t n, uint64_t* all);
// bytes at data on `root` copied to every rank.  Collective.
void broadcast(void* data, size_t bytes, int root);
// Collective: throws k3::Error on every rank when any rank's value differs from rank 0's, naming
// the first such rank and `what` (e.g. "checkpoint (config.json and shard headers)").
void check_same(uint64_t value, const std::string& what);
// Ends every rank of the job with exit code `code` (MPI_Abort); in one process, std::exit.
[[noreturn]] void abort_all(int code);

// What this rank has sent and received through collectives since the last reset.
struct Traffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t collectives = 0;
  // Wall time inside the row exchanges (allgather): the waits for slower ranks included, so
  // the most that overlapping them with computation could save.
  double seconds = 0;
};
Traffic traffic();
void reset_traffic();

}  // namespace k3::dist
