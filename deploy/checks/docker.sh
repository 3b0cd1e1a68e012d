#!/usr/bin/env bash
# Checks the container images' files offline (no Docker engine): hadolint on every
# deploy/docker/Dockerfile*, and that they still match the repository: each has its
# <Dockerfile>.dockerignore with the same patterns, each file they COPY from the context
# exists, each -DREPLICAD_* option they set is one CMakeLists.txt defines, each target they
# build is an add_executable, and every Debian package of `install-deps.sh --build-only` and
# of their runtime stages is known to apt (NVIDIA's packages, from a repository this machine
# does not have, are left out). Needs .venv-deploy (bash deploy/tools.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

hadolint=.venv-deploy/bin/hadolint
failures=0
fail() {
  echo "docker check: $*" >&2
  failures=$((failures + 1))
}

dockerfiles=()
for f in deploy/docker/Dockerfile*; do
  case "$f" in *.dockerignore) continue ;; esac
  dockerfiles+=("$f")
done
[ ${#dockerfiles[@]} -gt 0 ] || { echo "docker check: no deploy/docker/Dockerfile*" >&2; exit 1; }

"$hadolint" --no-color "${dockerfiles[@]}" || fail "hadolint found problems (above)"

# Patterns only: comment lines and blank lines aside.
ignore_patterns() { grep -v -e '^#' -e '^[[:space:]]*$' "$1"; }
first_ignore="${dockerfiles[0]}.dockerignore"
for f in "${dockerfiles[@]}"; do
  if [ ! -f "$f.dockerignore" ]; then
    fail "$f has no $f.dockerignore"
  elif [ "$(ignore_patterns "$first_ignore")" != "$(ignore_patterns "$f.dockerignore")" ]; then
    fail "$f.dockerignore and $first_ignore list different patterns"
  fi
done

mapfile -t cmake_files < <(git ls-files --cached --others --exclude-standard -- '*CMakeLists.txt')
packages=()
for f in "${dockerfiles[@]}"; do
  # COPY sources from the build context (not --from=stage, not the whole context ".").
  while read -r src; do
    [ "$src" = "." ] || [ -e "$src" ] || fail "$f: COPY source $src does not exist"
  done < <(awk '$1 == "COPY" && $2 !~ /^--/ { for (i = 2; i < NF; i++) print $i }' "$f")
  while read -r option; do
    grep -qE "(option\\(|set\\()$option[ )]" CMakeLists.txt ||
      fail "$f: -D$option is not an option in CMakeLists.txt"
  done < <(grep -oE -- '-DREPLICAD_[A-Z_]+' "$f" | sed 's/^-D//' | sort -u)
  while read -r target; do
    grep -qE "add_executable\\($target[ )]" "${cmake_files[@]}" ||
      fail "$f: ninja target $target is no add_executable"
  done < <(grep -oE 'ninja -C [^ ]+ [a-z_ ]+' "$f" | awk '{ for (i = 4; i <= NF; i++) print $i }')
  # The packages of apt-get install lists: from an `apt-get install` line on, a lone name
  # (maybe =version) before a backslash, up to the line that does not end in one.
  while read -r name; do
    case "$name" in
      cuda-*|libcublas*|libcudnn*|libnccl*) ;;  # NVIDIA's repository
      *) packages+=("$name") ;;
    esac
  done < <(awk '
    /apt-get install/ { in_list = 1; next }
    in_list && $0 !~ /\\$/ { in_list = 0 }
    in_list && NF == 2 && $2 == "\\" && $1 ~ /^[a-z0-9][a-z0-9+.-]+(=.+)?$/ {
      sub(/=.*/, "", $1); print $1 }' "$f")
done

mapfile -t -O "${#packages[@]}" packages < <(bash scripts/install-deps.sh --build-only --print)
# apt-cache knows installed packages even without package lists, so this needs no network.
if command -v apt-cache >/dev/null; then
  known="$(apt-cache pkgnames)"
  for name in $(printf '%s\n' "${packages[@]}" | sort -u); do
    grep -qxF "$name" <<<"$known" || fail "apt does not know package $name"
  done
else
  echo "docker check: no apt-cache here; package names not checked"
fi

if [ "$failures" -gt 0 ]; then
  echo "docker check: $failures problem(s)" >&2
  exit 1
fi
echo "docker check: hadolint clean on ${#dockerfiles[@]} Dockerfiles;" \
  "$(printf '%s\n' "${packages[@]}" | sort -u | wc -l) Debian package names known to apt"
