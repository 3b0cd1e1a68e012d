#ifndef REPLICAD_SERVER_DAEMON_H_
#define REPLICAD_SERVER_DAEMON_H_

#include <memory>

#include "absl/status/status.h"
#include "server/server_options.h"

namespace replicad {

// `replicad serve`: the devices, the models, the serving core and its doors
// (gRPC, Open Inference Protocol HTTP, /metrics), one process's life.
//
//   Daemon daemon(options);
//   if (absl::Status s = daemon.Start(); !s.ok()) ...;  // Exit 1, naming why.
//   daemon.Wait();                                        // SIGINT or SIGTERM.
//   return daemon.Drain();                                // The exit status.
//
// A daemon of its own opens its doors first and loads its startup models
// behind them (liveness at once, readiness once loaded); the ranks of an MPI
// training job load first and meet, and a rank other than 0 answers no
// client unless --rank-shards (it runs rank 0's commands). Not thread-safe:
// one thread calls the three in order, once.
class Daemon {
 public:
  // Blocks SIGINT and SIGTERM in the calling thread, so that every thread
  // started later inherits the mask and only Wait receives them: construct
  // it before any other thread starts.
  explicit Daemon(ServerOptions options);
  // Stops what Start started, in the reverse order.
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Enumerates the devices, checks the flags (daemon_config.h), joins the
  // rank job when launched by MPI, starts the model manager and the doors,
  // and logs each listening address. Errors: the flags' InvalidArgument,
  // the TLS or token files', Unavailable for an address it cannot listen on.
  absl::Status Start();

  // Blocks until SIGINT or SIGTERM, which a failed startup model (under
  // --exit-on-error) and a broken rank group also send.
  void Wait();

  // Refuses new requests (Unavailable; health turns NOT_SERVING), lets those
  // in flight finish for up to --shutdown-grace-seconds, then cancels the
  // rest at their next kernel, and closes the doors. Returns the exit
  // status: 0; 1 after a failed startup model; 75 (EX_TEMPFAIL) when the
  // rank group broke.
  int Drain();

 private:
  struct Parts;
  absl::Status StartModels();
  absl::Status StartCore();
  absl::Status StartMetricsDoor();
  absl::Status StartHttpDoor();
  absl::Status StartGrpcDoor();

  std::unique_ptr<Parts> parts_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_DAEMON_H_
