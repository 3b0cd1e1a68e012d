#include "server/tls_files.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

// OpenSSL's most recent error, e.g. "PEM routines::no start line".
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::Status Refused(const char* flag, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", why));
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& files) {
  if (files.cert.empty() && files.key.empty() && files.client_ca.empty()) return absl::OkStatus();
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (files.cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_server_method()),
                                                            &SSL_CTX_free);
  if (context == nullptr) return absl::InternalError("OpenSSL: " + OpenSslReason());
  if (SSL_CTX_use_certificate_chain_file(context.get(), files.cert.c_str()) != 1) {
    return Refused("--tls-cert", files.cert, OpenSslReason());
  }
  if (SSL_CTX_use_PrivateKey_file(context.get(), files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return Refused("--tls-key", files.key, OpenSslReason());
  }
  if (SSL_CTX_check_private_key(context.get()) != 1) {
    return Refused("--tls-key", files.key, "does not match the certificate in " + files.cert);
  }
  if (!files.client_ca.empty() &&
      SSL_CTX_load_verify_locations(context.get(), files.client_ca.c_str(), nullptr) != 1) {
    return Refused("--tls-client-ca", files.client_ca, OpenSslReason());
  }
  return absl::OkStatus();
}

std::string TlsFilesVersion(const TlsFiles& files) {
  std::string version;
  for (const std::string* path : {&files.cert, &files.key, &files.client_ca}) {
    struct stat st = {};
    if (!path->empty() && ::stat(path->c_str(), &st) != 0) st = {};
    absl::StrAppend(&version, st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                    st.st_mtim.tv_nsec, ";");
  }
  return version;
}

}  // namespace replicad
