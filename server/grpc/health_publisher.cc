#include "server/grpc/health_publisher.h"

namespace replicad {

HealthPublisher::HealthPublisher(grpc::HealthCheckServiceInterface* health,
                                 std::function<bool()> ready, absl::Duration interval)
    : health_(health), ready_(std::move(ready)), thread_([this, interval] {
        do {
          Publish();
        } while (!stop_.WaitForNotificationWithTimeout(interval));
      }) {}

HealthPublisher::~HealthPublisher() {
  stop_.Notify();
  thread_.join();
}

void HealthPublisher::Publish() { health_->SetServingStatus(ready_()); }

}  // namespace replicad
