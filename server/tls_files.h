#ifndef REPLICAD_SERVER_TLS_FILES_H_
#define REPLICAD_SERVER_TLS_FILES_H_

#include <string>

#include "absl/status/status.h"

namespace replicad {

// The PEM files every listener (gRPC, the HTTP door, metrics) serves TLS
// with: --tls-cert (the chain, leaf first), --tls-key, and --tls-client-ca
// (mutual TLS: clients must present a certificate this CA signed). The
// listeners read them again when they change, so certificates rotate
// without a restart; a changed set that does not load (say, the key written
// before its certificate) keeps the one in force until it does.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string client_ca;  // Empty: clients are not asked for certificates.

  bool enabled() const { return !cert.empty(); }
};

// OK when `files` is off, or its certificate chain and key load and match
// and the client CA (if any) loads. InvalidArgument naming the flag, the
// path and OpenSSL's reason otherwise; also when only one of cert and key is
// given, or a client CA without them.
absl::Status CheckTlsFiles(const TlsFiles& files);

// A fingerprint of the files' identity (inode, size, modification time),
// which changes when any of them is rewritten or replaced.
std::string TlsFilesVersion(const TlsFiles& files);

}  // namespace replicad

#endif  // REPLICAD_SERVER_TLS_FILES_H_
