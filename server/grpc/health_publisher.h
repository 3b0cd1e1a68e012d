#ifndef REPLICAD_SERVER_GRPC_HEALTH_PUBLISHER_H_
#define REPLICAD_SERVER_GRPC_HEALTH_PUBLISHER_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"

namespace replicad {

// grpc.health.v1.Health (Check and Watch) is gRPC's own service; it answers
// from a status that must be pushed to it. This pushes the serving core's
// readiness (`ready`) every `interval`, and at once on Publish, for the
// overall service "" and for each service the server registers.
class HealthPublisher {
 public:
  HealthPublisher(grpc::HealthCheckServiceInterface* health, std::function<bool()> ready,
                  absl::Duration interval = absl::Seconds(1));
  ~HealthPublisher();  // Stops publishing; the last status stays.
  HealthPublisher(const HealthPublisher&) = delete;
  HealthPublisher& operator=(const HealthPublisher&) = delete;

  // Pushes the readiness now (e.g. right after draining starts).
  void Publish();

 private:
  grpc::HealthCheckServiceInterface* const health_;
  const std::function<bool()> ready_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_HEALTH_PUBLISHER_H_
