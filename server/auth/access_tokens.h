#ifndef REPLICAD_SERVER_AUTH_ACCESS_TOKENS_H_
#define REPLICAD_SERVER_AUTH_ACCESS_TOKENS_H_

#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/auth/access_policy.h"

namespace replicad {

// The bearer tokens clients present and the roles each holds, from the file
// an operator keeps (--auth-tokens), one token a line:
//   # comments and blank lines are ignored
//   <token> <role>[,<role>...]      e.g.  8f1c...e2  infer,train
// A token is 16 to 4096 printable ASCII characters without spaces; roles
// are those of access_policy.h. Every protocol asks Check with the request's
// Authorization value ("Bearer <token>"; gRPC metadata "authorization").
//
// Tokens are kept only as SHA-256 digests and compared in constant time
// against every entry (no early exit, no length leak), and never appear in
// an error or a log line. The file is read again when it changes (checked
// at most once a second, by inode, size and modification time), so tokens
// rotate without a restart; a changed file that does not parse keeps the
// tokens in force and says why on stderr. Thread-safe.
class AccessTokens {
 public:
  // InvalidArgument naming the line number (never its token) for a malformed
  // line or an unknown role, and for a file with no token; the errno's code,
  // naming the path, when it cannot be read.
  static absl::StatusOr<std::unique_ptr<AccessTokens>> Open(const std::string& path);

  // OK when `rpc` is open (access_policy.h) or `authorization` (nullptr:
  // none sent) is "Bearer <token>" for a token holding the role it needs.
  // Unauthenticated when no token, a malformed header or an unknown token;
  // PermissionDenied naming the RPC and the role it needs.
  absl::Status Check(const std::string* authorization, absl::string_view rpc) const;
  // Check with the role given (nullopt: open), for callers that know more
  // than the RPC's name (RequiredRoleOfPath).
  absl::Status CheckRole(const std::string* authorization, absl::string_view rpc,
                         std::optional<Role> needed) const;
  // OK when `authorization` carries a known token, whatever its roles
  // (Unauthenticated as Check says otherwise): for refusing a stranger
  // before reading what it sends.
  absl::Status Authenticate(const std::string* authorization) const;

  using Digest = std::array<unsigned char, 32>;
  struct Entry {
    Digest digest;
    uint32_t roles = 0;  // Bit (1 << Role).
  };

 private:
  explicit AccessTokens(std::string path) : path_(std::move(path)) {}
  // The roles of the token in `authorization`, or Unauthenticated.
  absl::StatusOr<uint32_t> RolesOf(const std::string* authorization, absl::string_view rpc) const;
  // Re-reads the file when it changed since the last look.
  void Refresh() const;

  const std::string path_;
  // Held across a whole re-read, so that a slow one cannot install a file
  // older than one read after it.
  mutable absl::Mutex reload_mu_;
  mutable absl::Mutex mu_;
  mutable std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  mutable absl::Time last_look_ ABSL_GUARDED_BY(mu_);
  mutable struct stat seen_ ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_AUTH_ACCESS_TOKENS_H_
