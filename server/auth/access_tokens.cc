#include "server/auth/access_tokens.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
constexpr absl::Duration kLookEvery = absl::Seconds(1);

AccessTokens::Digest DigestOf(absl::string_view token) {
  AccessTokens::Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  return digest;
}

bool ValidToken(absl::string_view token) {
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) return false;
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

absl::StatusOr<std::vector<AccessTokens::Entry>> ReadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("--auth-tokens: cannot read ", path));
  std::vector<AccessTokens::Entry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat("--auth-tokens ", path, " line ", number);
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected '<token> <role>[,<role>...]', received ", fields.size(), " fields"));
    }
    if (!ValidToken(fields[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a token must be ", kMinTokenLength, " to ", kMaxTokenLength,
                       " printable ASCII characters; received one of ", fields[0].size()));
    }
    AccessTokens::Entry entry{DigestOf(fields[0]), 0};
    for (absl::string_view name : absl::StrSplit(fields[1], ',')) {
      std::optional<Role> role = ParseRole(name);
      if (!role) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": unknown role '", absl::CEscape(name.substr(0, 32)),
                         "'; expected infer, train, admin or metrics"));
      }
      entry.roles |= 1u << static_cast<int>(*role);
    }
    entries.push_back(entry);
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth-tokens ", path, ": no tokens (every client would be refused)"));
  }
  return entries;
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AccessTokens>> AccessTokens::Open(const std::string& path) {
  std::unique_ptr<AccessTokens> tokens(new AccessTokens(path));
  struct stat seen = {};
  ::stat(path.c_str(), &seen);
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Entry> entries, ReadTokens(path));
  absl::MutexLock lock(&tokens->mu_);
  tokens->entries_ = std::move(entries);
  tokens->seen_ = seen;
  tokens->last_look_ = absl::Now();
  return tokens;
}

void AccessTokens::Refresh() const {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (now - last_look_ < kLookEvery) return;
    last_look_ = now;
  }
  absl::MutexLock reload(&reload_mu_);
  struct stat current = {};
  if (::stat(path_.c_str(), &current) != 0) return;  // Being replaced: look again later.
  {
    absl::MutexLock lock(&mu_);
    if (SameFile(current, seen_)) return;
    seen_ = current;
  }
  absl::StatusOr<std::vector<Entry>> entries = ReadTokens(path_);
  if (!entries.ok()) {
    LogWarning(absl::StrCat(entries.status().message(), "; the tokens read before stay"));
    return;
  }
  absl::MutexLock lock(&mu_);
  entries_ = *std::move(entries);
}

absl::Status AccessTokens::Check(const std::string* authorization, absl::string_view rpc) const {
  return CheckRole(authorization, rpc, RequiredRole(rpc));
}

absl::Status AccessTokens::CheckRole(const std::string* authorization, absl::string_view rpc,
                                     std::optional<Role> needed) const {
  if (!needed) return absl::OkStatus();
  REPLICAD_ASSIGN_OR_RETURN(uint32_t roles, RolesOf(authorization, rpc));
  if ((roles & (1u << static_cast<int>(*needed))) == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(rpc, " needs a token with the role '", RoleName(*needed), "'"));
  }
  return absl::OkStatus();
}

absl::Status AccessTokens::Authenticate(const std::string* authorization) const {
  return RolesOf(authorization, "this request").status();
}

absl::StatusOr<uint32_t> AccessTokens::RolesOf(const std::string* authorization,
                                               absl::string_view rpc) const {
  if (authorization == nullptr) {
    return absl::UnauthenticatedError(absl::StrCat(
        rpc, " needs a bearer token: send the header 'authorization: Bearer <token>'"));
  }
  absl::string_view value = *authorization;
  // RFC 6750: the scheme is case-insensitive.
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return absl::UnauthenticatedError(
        "authorization: expected 'Bearer <token>'; received another scheme");
  }
  const Digest presented = DigestOf(absl::StripAsciiWhitespace(value.substr(7)));
  Refresh();
  uint32_t roles = 0;
  bool known = false;
  {
    absl::MutexLock lock(&mu_);
    // Every entry is compared, whichever matches, so the time taken does not
    // tell how close a guess came.
    for (const Entry& entry : entries_) {
      const bool match =
          CRYPTO_memcmp(entry.digest.data(), presented.data(), presented.size()) == 0;
      known |= match;
      roles |= match ? entry.roles : 0;
    }
  }
  if (!known) return absl::UnauthenticatedError("authorization: unknown bearer token");
  return roles;
}

}  // namespace replicad
