#include "core/train/checkpoint_root.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

// Client strings appear in messages cut to this many bytes.
constexpr size_t kShownPathBytes = 256;

std::string Shown(const std::string& path) {
  std::string shown;
  for (char c : path.substr(0, kShownPathBytes)) {
    const unsigned char u = static_cast<unsigned char>(c);
    shown += u < 0x20 || u == 0x7f ? '?' : c;
  }
  return path.size() > kShownPathBytes ? shown + "..." : shown;
}

// The names of an absolute path's components ("/a/b" -> a, b).
std::vector<std::string> Components(const std::string& absolute) {
  return absl::StrSplit(absolute, '/', absl::SkipEmpty());
}

}  // namespace

absl::StatusOr<CheckpointRoot> CheckpointRoot::Open(const std::string& directory) {
  char resolved[PATH_MAX];
  if (directory.empty() || ::realpath(directory.c_str(), resolved) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint-root: '", directory, "' ",
        directory.empty() ? "is empty" : absl::StrCat("cannot be resolved: ", strerror(errno))));
  }
  struct stat st;
  if (::stat(resolved, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint-root: '", directory, "' is not a directory"));
  }
  // realpath: absolute, no trailing '/' but for "/".
  absl::StatusOr<CheckpointDirectory> opened = CheckpointDirectory::Open(resolved);
  if (!opened.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint-root: '", directory, "': ", opened.status().message()));
  }
  return CheckpointRoot(resolved, *std::move(opened));
}

absl::StatusOr<std::vector<std::string>> CheckpointRoot::ComponentsBelow(
    const std::string& path, const std::string& field) const {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field,
                     ": this server writes no checkpoints; start replicad serve with "
                     "--checkpoint-root DIR to let clients write them under DIR"));
  }
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty"));
  for (char c : path) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::PermissionDeniedError(
          absl::StrCat(field, ": '", Shown(path), "' holds a NUL or control character (byte ",
                       static_cast<int>(u), "); checkpoint paths must be plain text"));
    }
  }
  if (path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", Shown(path), "' names a directory, not a file"));
  }
  const std::string base = root_ == "/" ? std::string() : root_;
  // Lexical normalisation: "." and empty components go, ".." takes back a
  // component. An absolute path must then begin with the root's components;
  // a relative one, taken from the root, may not climb above it.
  const std::vector<std::string> root_parts = Components(base);
  std::vector<std::string> parts = path.front() == '/' ? std::vector<std::string>() : root_parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  if (parts.size() < root_parts.size() ||
      !std::equal(root_parts.begin(), root_parts.end(), parts.begin())) {
    return absl::PermissionDeniedError(absl::StrCat(field, ": '", Shown(path), "' ",
                                                    path.front() == '/' ? "is outside" : "leaves",
                                                    " the checkpoint root '", root_, "'"));
  }
  parts.erase(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(root_parts.size()));
  if (parts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", Shown(path), "' names the checkpoint root itself"));
  }
  return parts;
}

absl::StatusOr<std::string> CheckpointRoot::Resolve(const std::string& path,
                                                    const std::string& field) const {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> parts, ComponentsBelow(path, field));
  return ResolveComponents(parts, path, field);
}

absl::StatusOr<std::string> CheckpointRoot::ResolveComponents(const std::vector<std::string>& parts,
                                                              const std::string& path,
                                                              const std::string& field) const {
  // No existing component may be a symbolic link: through one, a write could
  // land anywhere the daemon may write.
  std::string resolved = root_ == "/" ? std::string() : root_;
  for (const std::string& part : parts) {
    resolved += "/" + part;
    struct stat st;
    if (::lstat(resolved.c_str(), &st) != 0) continue;  // Not there (yet): nothing to follow.
    if (S_ISLNK(st.st_mode)) {
      return absl::PermissionDeniedError(absl::StrCat(field, ": '", Shown(path),
                                                      "' passes through the symbolic link '",
                                                      resolved, "'; checkpoint paths may not"));
    }
  }
  return resolved;
}

absl::StatusOr<CheckpointRoot::Location> CheckpointRoot::Locate(const std::string& path,
                                                                const std::string& field) const {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> parts, ComponentsBelow(path, field));
  absl::StatusOr<std::string> resolved = ResolveComponents(parts, path, field);
  if (!resolved.ok()) return resolved.status();
  std::string name = parts.back();
  parts.pop_back();
  // The check above may be stale by now; this open is what the write uses.
  absl::StatusOr<CheckpointDirectory> directory =
      CheckpointDirectory::OpenBeneath(*directory_, parts);
  if (!directory.ok()) {
    return absl::Status(
        directory.status().code(),
        absl::StrCat(field, ": '", Shown(path), "': ", directory.status().message()));
  }
  struct stat st;
  if (::fstatat(directory->fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(field, ": '", Shown(path),
                                                    "' is a symbolic link; checkpoint paths "
                                                    "may not pass through one"));
  }
  return Location{*std::move(directory), std::move(name), *std::move(resolved)};
}

}  // namespace replicad
