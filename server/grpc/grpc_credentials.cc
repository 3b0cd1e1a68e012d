#include "server/grpc/grpc_credentials.h"

#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace replicad {

std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  constexpr unsigned kRefreshSeconds = 1;
  auto provider = tls.client_ca.empty()
                      ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            tls.key, tls.cert, kRefreshSeconds)
                      : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            tls.key, tls.cert, tls.client_ca, kRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (tls.client_ca.empty()) {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls_options);
}

}  // namespace replicad
