#!/usr/bin/python3
"""Checks the user documentation: links resolve, and the flags it names are the binaries' flags.

Usage:
  /usr/bin/python3 scripts/check-docs.py --replicad build/bin/replicad [--replicactl PATH]
                                          [--root DIR]
  /usr/bin/python3 scripts/check-docs.py --self-test

Plain python3, standard library only. Exit status 0 when every check passes, 1 when any fails
(each problem is printed as FILE:LINE: message), 2 on usage errors.

What is checked, in README.md and docs/*.md (links also in benchmarks/RESULTS.md,
deploy/README.md and client/python/README.md):

(a) Links. Every relative link [text](path), [text](path#anchor) and [text](#anchor) outside
    code must name a file or directory that exists (relative to the linking file), and an
    anchor into a .md file must be one of that file's headings, slugged as GitHub does:
    lowercase; every character that is not a letter, mark, digit, connector (`_`), space or
    `-` removed; spaces to `-`; a repeated slug gets `-1`, `-2`, ... Links with a scheme
    (https:, mailto:) are not followed.

(b) Flags. The flags of `replicad` (`replicad --help` and `replicad SUB --help` for every
    subcommand the top-level help lists) and of `replicactl` (likewise) are read from the
    binaries. Then, in the docs:
    - every flag the docs give a replicad or replicactl command must exist in that binary's
      help (for `replicad serve ...`, in serve's; for `replicactl train ...`, in train's or
      replicactl's own);
    - every flag of either help must be named somewhere in the docs (`--help` aside), so a
      new flag cannot ship undocumented.
    Which command a flag belongs to is decided from the text, so that flags of other tools
    (mpirun, srun, perf_analyzer, cmake, ctest, pip, kubectl, docker, benchmarks' scripts)
    are never taken for replicad's:
    - In a fenced code block of shell (info string empty, bash, sh, shell, console or text;
      python and other blocks are skipped) and in an inline code span, each command (a line,
      joined with its `\\` continuations, cut at `|`, `;`, `&&`, `||`, `&`, `(`, `)`) is
      read word by word. A word whose last path component is `replicad` or `replicactl`
      starts that binary's command; the flags after it are its flags (a following word that
      is one of its subcommands selects the subcommand). Flags before such a word belong to
      a launcher (`mpirun ... replicad serve`) and are not checked. A command whose first
      word is any other program is not checked at all.
    - A code span or a prose token that is nothing but flags (`--listen HOST:PORT`,
      `--tls-cert`/`--tls-key`, `--no-winograd`) names no program. Such a flag must be a
      flag of replicad or replicactl, or be listed in FOREIGN_FLAGS below with the tool it
      belongs to. Prefer writing the tool in the span (`compare_peers.py --zoo`) over
      growing that list.

--self-test builds a small tree with a broken link, a broken anchor, an undocumented flag, a
flag the binary lacks and one of each of the forms that must pass, with stand-in binaries,
runs the checks on it and fails unless exactly the planted problems are reported; CTest runs
it as docs_check_self_test, so the check cannot pass silently.
"""

import argparse
import io
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
import unicodedata

# Flags named bare (without their program in the same code span) that belong to other tools.
# Keep it short: write `tool --flag` in the docs where you can.
FOREIGN_FLAGS = {
    # "--flag": "the tool it belongs to",
}

SHELL_LANGS = {"", "bash", "sh", "shell", "console", "text"}
FLAG_RE = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9_-]*)")
LINK_RE = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
HEADING_RE = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR_RE = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SEPARATORS = re.compile(r"\|\||&&|[|;&()]")


# ----------------------------------------------------------------------------- help parsing


def run_help(binary, args):
    """The text of `binary args... --help`."""
    try:
        out = subprocess.run([binary] + args + ["--help"], capture_output=True, text=True,
                             timeout=60)
    except OSError as e:
        raise SystemExit(f"check-docs: cannot run {binary}: {e}")
    if out.returncode != 0:
        raise SystemExit(f"check-docs: {binary} {' '.join(args)} --help exited "
                         f"{out.returncode}: {out.stderr.strip()}")
    return out.stdout


def parse_help(text):
    """(flags, subcommands) of one CLI11 help text. Options are listed under "Options:" and
    under the headers of option groups ("Listeners:", "Logging:", ...)."""
    flags, subcommands, section = set(), [], None
    for line in text.splitlines():
        header = re.match(r"^(\w[\w ]*):\s*$", line)
        if header:
            section = header.group(1)
            continue
        if section is not None and section not in ("Subcommands", "Positionals"):
            m = re.match(r"^  (-\S+)", line)  # options are indented 2; descriptions far more
            if m:
                for name in m.group(1).split(","):
                    name = re.sub(r"\{.*$", "", name).split("=")[0]
                    if name.startswith("--"):
                        flags.add(name)
        elif section == "Subcommands":
            m = re.match(r"^  ([a-z][\w-]*)\b", line)
            if m:
                subcommands.append(m.group(1))
    return flags, subcommands


class Cli:
    """One binary's flags: those of the program itself and of each subcommand."""

    def __init__(self, name, binary):
        self.name = name
        self.top, subs = parse_help(run_help(binary, []))
        self.sub = {s: parse_help(run_help(binary, [s]))[0] for s in subs}

    def all_flags(self):
        flags = set(self.top)
        for f in self.sub.values():
            flags |= f
        return flags

    def accepts(self, subcommand, flag):
        if subcommand is None:
            return flag in self.top
        return flag in self.sub[subcommand] or flag in self.top


# ----------------------------------------------------------------------------- markdown


def github_slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags are dropped
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            out.append(ch)
    return "".join(out).replace(" ", "-")


def read_markdown(path):
    """(prose lines, code blocks, anchors) of a markdown file.

    prose: [(lineno, text)] outside fenced blocks; blocks: [(lineno, lang, [lines])];
    anchors: the set of heading slugs (GitHub's, duplicates numbered) and HTML anchors.
    """
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    prose, blocks, anchors, seen = [], [], set(), {}
    fence = None
    for i, line in enumerate(lines, 1):
        m = FENCE_RE.match(line)
        if fence is None and m:
            fence = (m.group(1)[0], len(m.group(1)))
            blocks.append((i, m.group(2).lower(), []))
            continue
        if fence is not None:
            if re.match(r"^ {0,3}" + re.escape(fence[0]) + "{%d,}\\s*$" % fence[1], line):
                fence = None
            else:
                blocks[-1][2].append((i, line))
            continue
        prose.append((i, line))
        h = HEADING_RE.match(line)
        if h:
            slug = github_slug(h.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
        for a in HTML_ANCHOR_RE.findall(line):
            anchors.add(a)
    return prose, blocks, anchors


def split_code_spans(line):
    """(text outside code spans, [code span contents]) of one prose line."""
    spans, outside, pos = [], [], 0
    for m in re.finditer(r"(`+)(.+?)\1", line):
        outside.append(line[pos:m.start()])
        spans.append(m.group(2).strip())
        pos = m.end()
    outside.append(line[pos:])
    return " ".join(outside), spans


def paragraphs(prose):
    """Prose joined into paragraphs (a code span may continue onto the next line):
    [(text, [(lineno, line)])]."""
    out, para = [], []
    for lineno, text in prose + [(None, "")]:
        if lineno is None or text.strip() == "":
            if para:
                out.append((" ".join(t for _, t in para), para))
            para = []
            continue
        para.append((lineno, text))
    return out


def locate(lines, needle):
    """The number of the first of a paragraph's lines that holds needle (else the first)."""
    for lineno, text in lines:
        if needle in text:
            return lineno
    return lines[0][0]


# ----------------------------------------------------------------------------- commands


def words(command):
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return command.split()


def command_flags(command, clis):
    """[(binary name, subcommand or None, flag)] owned by replicad/replicactl in one command,
    and the flags of a command that names no program at all (bare flags)."""
    owned, bare = [], []
    for segment in SEPARATORS.split(command):
        ws = words(segment)
        while ws and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", ws[0]):
            ws = ws[1:]  # VAR=value before the command
        if not ws:
            continue
        owner, sub = None, None
        first_is_flag = ws[0].startswith("--")
        for i, w in enumerate(ws):
            word = w.rstrip(",.")
            base = os.path.basename(word) if ":" not in word else ""
            if base in clis:
                owner, sub = base, None
                continue
            if owner is not None and sub is None and w in clis[owner].sub:
                prev = ws[i - 1]
                if os.path.basename(prev) == owner or not prev.startswith("-"):
                    sub = w
                continue
            for flag in FLAG_RE.findall(w if w.startswith("--") else ""):
                name = flag.split("=")[0]
                if owner is not None:
                    owned.append((owner, sub, name))
                elif first_is_flag:
                    bare.append(name)
        # A command of another program (owner None, first word not a flag): nothing checked.
    return owned, bare


def logical_lines(block_lines):
    """Shell lines of a code block with their `\\` continuations joined."""
    out, cur, start = [], "", None
    for lineno, text in block_lines:
        stripped = re.sub(r"^\s*\$\s+", "", text)  # a console prompt
        stripped = re.sub(r"\s#\s.*$", "", stripped)  # a trailing comment
        if start is None:
            start = lineno
        if stripped.rstrip().endswith("\\"):
            cur += stripped.rstrip()[:-1] + " "
            continue
        out.append((start, cur + stripped))
        cur, start = "", None
    if cur:
        out.append((start, cur))
    return out


# ----------------------------------------------------------------------------- the checks


def check(root, replicad, replicactl, out=sys.stdout, foreign=None):
    foreign = FOREIGN_FLAGS if foreign is None else foreign
    problems = []

    def report(path, lineno, message):
        problems.append(f"{os.path.relpath(path, root)}:{lineno}: {message}")

    docs_dir = os.path.join(root, "docs")
    flag_files = [os.path.join(root, "README.md")]
    if os.path.isdir(docs_dir):
        flag_files += sorted(os.path.join(docs_dir, f) for f in os.listdir(docs_dir)
                             if f.endswith(".md"))
    link_files = list(flag_files)
    for extra in ("benchmarks/RESULTS.md", "deploy/README.md", "client/python/README.md"):
        if os.path.exists(os.path.join(root, extra)):
            link_files.append(os.path.join(root, extra))

    parsed = {}

    def markdown(path):
        if path not in parsed:
            parsed[path] = read_markdown(path)
        return parsed[path]

    # (a) links, per paragraph: a link's text may wrap onto the next line
    for path in link_files:
        prose, _, anchors = markdown(path)
        for text, lines in paragraphs(prose):
            outside, _ = split_code_spans(text)
            for m in LINK_RE.finditer(outside):
                target = m.group(2)
                if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                    continue
                lineno = locate(lines, "](" + target)
                file_part, _, anchor = target.partition("#")
                if file_part:
                    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                    if not os.path.exists(dest):
                        report(path, lineno, f"broken link: {target} ({file_part} does not "
                               "exist)")
                        continue
                else:
                    dest = path
                if anchor and dest.endswith(".md") and os.path.isfile(dest):
                    if anchor not in markdown(dest)[2]:
                        report(path, lineno, f"broken anchor: {target} (no heading "
                               f"'#{anchor}' in {os.path.relpath(dest, root)})")

    # (b) flags
    clis = {"replicad": Cli("replicad", replicad), "replicactl": Cli("replicactl", replicactl)}
    known = clis["replicad"].all_flags() | clis["replicactl"].all_flags()
    named = set()

    def check_owned(path, where, owned):
        for owner, sub, flag in owned:
            named.add(flag)
            if not clis[owner].accepts(sub, flag):
                command = f"{owner} {sub}" if sub else owner
                report(path, where(flag), f"{flag}: not a flag of `{command}` (its --help "
                       "does not list it)")

    def check_bare(path, where, bare):
        for flag in bare:
            named.add(flag)
            if flag not in known and flag not in foreign:
                report(path, where(flag), f"{flag}: not a flag of replicad or replicactl, and "
                       "not in check-docs.py's FOREIGN_FLAGS (write the tool in the span)")

    for path in flag_files:
        prose, blocks, _ = markdown(path)
        for start, lang, lines in blocks:
            if lang not in SHELL_LANGS:
                continue
            for lineno, command in logical_lines(lines):
                owned, bare = command_flags(command, clis)
                check_owned(path, lambda flag, n=lineno: n, owned)
                check_bare(path, lambda flag, n=lineno: n, bare)
        for text, lines in paragraphs(prose):
            where = lambda flag, lines=lines: locate(lines, flag)
            outside, spans = split_code_spans(text)
            for span in spans:
                owned, bare = command_flags(span, clis)
                check_owned(path, where, owned)
                check_bare(path, where, bare)
            # Flags written in prose outside code are bare flags too.
            outside = LINK_RE.sub(lambda m: m.group(1), outside)
            check_bare(path, where, [f.split("=")[0] for f in FLAG_RE.findall(outside)])

    for owner, cli in clis.items():
        for sub in [None] + sorted(cli.sub):
            flags = cli.top if sub is None else cli.sub[sub]
            for flag in sorted(flags - {"--help"} - named):
                where = f"{owner} {sub}" if sub else owner
                problems.append(f"{where} {flag}: in --help but named nowhere in README.md or "
                                "docs/")

    problems = list(dict.fromkeys(problems))  # a flag named twice on a line: once
    for p in problems:
        print(p, file=out)
    files = len(set(link_files))
    print(f"check-docs: {len(problems)} problem(s); {files} files, "
          f"{len(known)} replicad/replicactl flags", file=out)
    return problems


# ----------------------------------------------------------------------------- self-test

FAKE_REPLICAD = r"""#!/bin/sh
case "$1" in
  serve) cat <<'EOF'
Serve
Usage: replicad serve [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --listen TEXT=0.0.0.0:8500  gRPC address; see also --phantom-in-description
  --winograd,--no-winograd{false}
                              Winograd

Logging:
  --undocumented INT=0        Nobody wrote this one down
EOF
  ;;
  default-model) cat <<'EOF'
Usage: replicad default-model [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --output TEXT REQUIRED      ONNX file to write
EOF
  ;;
  *) cat <<'EOF'
replicad
Usage: replicad [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit

Subcommands:
  serve                       Serve models
  default-model               Write the embedded default model
EOF
  ;;
esac
"""

FAKE_REPLICACTL = r"""#!/bin/sh
case "$1" in
  train) cat <<'EOF'
Usage: replicactl train [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --model TEXT REQUIRED       Model name
EOF
  ;;
  *) cat <<'EOF'
Usage: replicactl [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit
  --server TEXT=localhost:8500
                              Server address

Subcommands:
  train                       Train
EOF
  ;;
esac
"""

SELF_TEST_README = """# Tool

```bash
build/bin/replicad serve --listen 127.0.0.1:8500 --no-winograd
mpirun --mca orte_abort_on_non_zero_status 0 -np 2 replicad serve --winograd
replicactl --server x:8500 train --model default
replicad default-model --output m.onnx
cmake -DFOO=1 --build build && ctest --output-on-failure
```

```python
client = "--not-a-flag-in-python"
```

Good: [guide](docs/guide.md), [the same heading twice](docs/guide.md#setup-1),
[punctuation](docs/guide.md#flags--and-more-v2), [here](#tool), [web](https://example.com),
`perf_analyzer --concurrency-range 1:4`, `--fix`, and
`replicad serve --listen unix:/tmp/s`.

Broken: [gone](docs/missing.md), [no such
heading](docs/guide.md#nowhere).
The flag `replicad serve --made-up` does not exist, nor does bare `--also-made-up`.
"""

SELF_TEST_GUIDE = """# Guide

## Setup

## Setup

## Flags — and more (v2)!
"""


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        os.makedirs(os.path.join(tmp, "bin"))
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(SELF_TEST_README)
        with open(os.path.join(tmp, "docs", "guide.md"), "w") as f:
            f.write(SELF_TEST_GUIDE)
        binaries = {}
        for name, text in (("replicad", FAKE_REPLICAD), ("replicactl", FAKE_REPLICACTL)):
            binaries[name] = os.path.join(tmp, "bin", name)
            with open(binaries[name], "w") as f:
                f.write(text)
            os.chmod(binaries[name], stat.S_IRWXU)
        buf = io.StringIO()
        problems = check(tmp, binaries["replicad"], binaries["replicactl"], out=buf,
                         foreign={"--fix": "scripts/check-format.sh"})
        expected = [
            ("README.md", "broken link: docs/missing.md"),
            ("README.md", "broken anchor: docs/guide.md#nowhere"),
            ("README.md", "--made-up: not a flag of `replicad serve`"),
            ("README.md", "--also-made-up: not a flag of replicad or replicactl"),
            ("replicad serve --undocumented", "in --help but named nowhere"),
        ]
        failures = []
        for where, what in expected:
            if not any(p.startswith(where) and what in p for p in problems):
                failures.append(f"not reported: {where}: {what}")
        if len(problems) != len(expected):
            failures.append(f"expected {len(expected)} problems, got {len(problems)}")
        if failures:
            print(buf.getvalue(), end="")
            for f in failures:
                print(f"check-docs self-test: {f}")
            return 1
        print(f"check-docs self-test: passed (the {len(expected)} planted problems, "
              "nothing else)")
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicad", help="the replicad binary (its --help is read)")
    parser.add_argument("--replicactl",
                        help="the replicactl binary (default: beside --replicad)")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the repository's root (default: this script's parent)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker on a planted tree")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.replicad:
        parser.error("--replicad PATH is required (or --self-test)")
    replicactl = args.replicactl or os.path.join(os.path.dirname(args.replicad), "replicactl")
    problems = check(os.path.abspath(args.root), args.replicad, replicactl)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
