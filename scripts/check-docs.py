#!/usr/bin/env python3
"""Checks that README.md and docs/*.md stay true to the code (issue #50). Run by ctest (label docs).

Usage: check-docs.py [CHECK ...] [--source DIR] [--apps-dir DIR] [--unbuilt APP ...] [--cxx CXX] [-I DIR ...]
Checks (all when none is named):
  length     README.md has at most 200 lines
  examples   every <!-- example: examples/X.cpp --> ... <!-- /example --> block is that file verbatim
             (or its lines between `// example-begin` and `// example-end`); README embeds one
  cpp        every ```cpp block compiles (c++ -std=c++20 -fsyntax-only -I...): a whole translation
             unit. Fragments are fenced ```c++ (or ```text) and are not compiled
  flags      every --flag written after an app's name (fenced shell blocks, `inline code`) is in that
             app's --help (apps from --apps-dir; an app named by --unbuilt is not checked); in
             docs/cli.md every --flag, by its table row's or its section's app (else any app's)
  env        every KILN_* variable in docs/environment.md is read by the code, and every KILN_*
             variable the library or the apps name is documented there
  links      relative links and #anchors resolve (GitHub's anchor rules)
  history    no ISO dates or commit hashes outside docs/benchmarks.md and CHANGELOG.md (text between
             <!-- figures --> and <!-- /figures --> is exempt)
Each failure is printed as file:line: message; the exit status is 1 when any check failed.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

README_MAX_LINES = 200
HISTORY_FILES = {"docs/benchmarks.md", "CHANGELOG.md"}
# The apps whose --help the flags check reads: binary name -> path under the apps build dir.
APPS = ["train_gpt", "sample_gpt", "train_cifar", "kiln-run", "kiln-make-shards", "kiln-tokenize",
        "bench_ops", "bench_gpt", "bench_cifar", "bench_allreduce", "bench_tokenizer", "bench_cuda"]
SHELL_FENCES = {"sh", "bash", "shell", "console", "shell-session", ""}
LIBRARY_DIRS = ["core", "autograd", "nn", "optim", "parallel", "data", "models", "apps"]
CPP_EXTS = (".h", ".cpp", ".cu", ".cuh", ".hpp", ".cc")


class Failures:
    def __init__(self):
        self.items = []

    def add(self, path, line, message):
        self.items.append("%s:%s: %s" % (path, line, message))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def doc_files(root):
    """README.md and docs/*.md (relative paths, sorted), those that exist."""
    files = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted("docs/" + f for f in os.listdir(docs) if f.endswith(".md"))
    return files


def fences(text):
    """Yields (info, first_line_no, lines) for each fenced block (``` or ~~~), 1-based line of its
    first content line."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).lower()
        body, j = [], i + 1
        while j < len(lines) and not re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\s*$" % len(fence), lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        yield info, i + 2, body
        i = j + 1


def prose_lines(text):
    """(line_no, line) of the lines outside fenced blocks."""
    out, fence = [], None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\s*$" % len(fence), line):
                fence = None
            continue
        out.append((n, line))
    return out


# ---- length -------------------------------------------------------------------------------------

def check_length(root, fail, args):
    path = os.path.join(root, "README.md")
    if not os.path.exists(path):
        fail.add("README.md", 1, "missing")
        return
    n = len(read(path).rstrip("\n").split("\n"))
    if n > README_MAX_LINES:
        fail.add("README.md", README_MAX_LINES + 1, "README has %d lines; at most %d (move the rest into docs/)"
                 % (n, README_MAX_LINES))


# ---- examples -----------------------------------------------------------------------------------

def example_text(path):
    lines = read(path).rstrip("\n").split("\n")
    begin = [i for i, l in enumerate(lines) if l.strip() == "// example-begin"]
    end = [i for i, l in enumerate(lines) if l.strip() == "// example-end"]
    if begin and end:
        return lines[begin[0] + 1:end[0]]
    return lines


def check_examples(root, fail, args):
    embedded_in_readme = 0
    for doc in doc_files(root):
        lines = read(os.path.join(root, doc)).split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^\s*<!--\s*example:\s*(\S+)\s*-->\s*$", lines[i])
            if not m:
                i += 1
                continue
            start, target = i + 1, m.group(1)
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*<!--\s*/example\s*-->\s*$", lines[j]):
                j += 1
            if j == len(lines):
                fail.add(doc, start, "<!-- example: %s --> has no closing <!-- /example -->" % target)
                return
            block = lines[i + 1:j]
            i = j + 1
            if doc == "README.md":
                embedded_in_readme += 1
            code_lines = [k for k, l in enumerate(block) if re.match(r"^\s*```", l)]
            if len(code_lines) < 2:
                fail.add(doc, start, "the example block of %s holds no fenced code" % target)
                continue
            body = block[code_lines[0] + 1:code_lines[-1]]
            file_path = os.path.normpath(os.path.join(root, target))
            if not os.path.exists(file_path):
                fail.add(doc, start, "embeds %s, which does not exist" % target)
                continue
            want = example_text(file_path)
            if body != want:
                k = next((k for k in range(min(len(body), len(want))) if body[k] != want[k]), min(len(body), len(want)))
                fail.add(doc, start + code_lines[0] + 2 + k,
                         "differs from %s (line %d of the embedded text): %r vs %r; paste the file again"
                         % (target, k + 1, body[k] if k < len(body) else "<end>", want[k] if k < len(want) else "<end>"))
    if embedded_in_readme == 0:
        fail.add("README.md", 1, "embeds no program from examples/ (<!-- example: examples/X.cpp --> ... <!-- /example -->)")


# ---- cpp ----------------------------------------------------------------------------------------

def compile_block(cxx, includes, doc, line, code, workdir, index):
    src = os.path.join(workdir, "block_%03d.cpp" % index)
    with open(src, "w", encoding="utf-8") as f:
        f.write('#line %d "%s"\n' % (line, doc))
        f.write("\n".join(code) + "\n")
    cmd = [cxx, "-std=c++20", "-fsyntax-only"] + ["-I" + d for d in includes] + [src]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return doc, line, r.returncode, r.stdout


def check_cpp(root, fail, args):
    if not args.cxx or not args.include:
        fail.add("check-docs.py", 1, "the cpp check needs --cxx and -I (the build's include dir)")
        return
    blocks = []
    for doc in doc_files(root):
        for info, line, body in fences(read(os.path.join(root, doc))):
            if info == "cpp":
                blocks.append((doc, line, body))
    with tempfile.TemporaryDirectory(prefix="kiln-docs-") as work:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(compile_block, args.cxx, args.include, doc, line, body, work, i)
                       for i, (doc, line, body) in enumerate(blocks)]
            for fut in futures:
                doc, line, rc, out = fut.result()
                if rc != 0:
                    first = next((l for l in out.split("\n") if "error" in l), out.strip().split("\n")[0] if out else "")
                    fail.add(doc, line, "this ```cpp block does not compile (fence fragments as ```c++): " + first.strip())
    print("cpp: %d blocks compiled" % len(blocks))


# ---- flags --------------------------------------------------------------------------------------

def app_help(apps_dir, app, cache):
    if app not in cache:
        path = os.path.join(apps_dir, app)
        flags = None
        if os.path.exists(path):
            r = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            flags = set(re.findall(r"--[A-Za-z0-9][A-Za-z0-9_-]*", r.stdout))
        cache[app] = flags
    return cache[app]


def command_flags(tokens):
    """(app, flag) for every --flag after an app's name; a later app name (kiln-run's program) takes over."""
    app = None
    for tok in tokens:
        base = os.path.basename(tok.strip("'\""))
        if base in APPS:
            app = base
        elif app == "kiln-run" and (tok == "--" or "/" in tok):
            app = None  # the program kiln-run starts, not an app: its flags are its own
        elif app and tok.startswith("--") and len(tok) > 2:
            yield app, re.split(r"[=,'\"]", tok, 1)[0].rstrip(".,;:)")


def check_flag(doc, n, app, flag, args, cache, fail):
    flags = app_help(args.apps_dir, app, cache)
    if flags is None:
        if app not in args.unbuilt:
            fail.add(doc, n, "%s is not built in %s, so %s cannot be checked" % (app, args.apps_dir, flag))
        return 0
    if flag not in flags:
        fail.add(doc, n, "%s has no flag %s (not in `%s --help`)" % (app, flag, app))
    return 1


def check_reference_flags(doc, text, covered, args, cache, fail):
    """docs/cli.md: every --flag belongs to the app of its table row (`| `app` | ...`) or of its
    section (a heading naming the app); elsewhere it must be some built app's flag."""
    prose = {n for n, _ in prose_lines(text)}
    section_app, count = None, 0
    for n, line in enumerate(text.split("\n"), 1):
        heading = re.match(r"^#{1,6}\s+`?([\w.-]+)`?", line) if n in prose else None
        if heading:
            section_app = heading.group(1) if heading.group(1) in APPS else None
            continue
        row = re.match(r"^\s*\|\s*`?([\w.-]+)`?\s*\|", line)
        app = row.group(1) if row and row.group(1) in APPS else section_app
        for flag in re.findall(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9_-]*", line):
            if flag in covered.get(n, ()):
                continue
            if app:
                count += check_flag(doc, n, app, flag, args, cache, fail)
                continue
            known = [a for a in APPS if app_help(args.apps_dir, a, cache)]
            count += 1
            if not any(flag in app_help(args.apps_dir, a, cache) for a in known):
                fail.add(doc, n, "%s is no built app's flag (in no app's --help)" % flag)
    return count


def check_flags(root, fail, args):
    if not args.apps_dir:
        fail.add("check-docs.py", 1, "the flags check needs --apps-dir (the build's apps folder)")
        return
    cache, checked = {}, 0
    for doc in doc_files(root):
        text = read(os.path.join(root, doc))
        commands = []  # (line, tokens)
        for info, line, body in fences(text):
            if info not in SHELL_FENCES:
                continue
            k = 0
            while k < len(body):
                start, logical = line + k, body[k]
                while logical.rstrip().endswith("\\") and k + 1 < len(body):
                    k += 1
                    logical = logical.rstrip()[:-1] + " " + body[k]
                k += 1
                logical = re.sub(r"^\s*[$#>]\s+", "", logical.split(" #")[0]) if not logical.lstrip().startswith("#") else ""
                commands.append((start, logical.split()))
        for n, line_text in prose_lines(text):
            for span in re.findall(r"`([^`]+)`", line_text):
                commands.append((n, span.split()))
        covered = {}  # line -> flags the command rule attributed
        for n, tokens in commands:
            for app, flag in command_flags(tokens):
                covered.setdefault(n, set()).add(flag)
                checked += check_flag(doc, n, app, flag, args, cache, fail)
        if doc == "docs/cli.md":
            checked += check_reference_flags(doc, text, covered, args, cache, fail)
    if not os.path.exists(os.path.join(root, "docs/cli.md")):
        fail.add("docs/cli.md", 1, "missing: the command-line reference (each app's --help)")
    print("flags: %d flag mentions checked" % checked)


# ---- env ----------------------------------------------------------------------------------------

def walk_sources(root, dirs, exts):
    for d in dirs:
        top = os.path.join(root, d)
        if os.path.isfile(top):
            yield top
            continue
        for base, subdirs, files in os.walk(top):
            subdirs[:] = [s for s in subdirs if not s.startswith(".") and not s.startswith("build")]
            for f in files:
                if f.endswith(exts):
                    yield os.path.join(base, f)


def code_variables(root):
    """(library and apps: {name: first file:line}, anywhere in code incl. tests/scripts/cmake: set)."""
    literal = re.compile(r'"(KILN_[A-Z0-9_]+)[="]')
    library = {}
    for path in walk_sources(root, LIBRARY_DIRS + ["kiln.h", "cuda.h"], CPP_EXTS):
        for n, line in enumerate(read(path).split("\n"), 1):
            for name in literal.findall(line):
                library.setdefault(name, "%s:%d" % (os.path.relpath(path, root), n))
    anywhere = set(library)
    patterns = [literal, re.compile(r"\$\{?(KILN_[A-Z0-9_]+)"), re.compile(r"\$ENV\{(KILN_[A-Z0-9_]+)\}"),
                re.compile(r"['\"](KILN_[A-Z0-9_]+)['\"]"), re.compile(r"\b(KILN_[A-Z0-9_]+)=")]
    for path in walk_sources(root, ["tests", "scripts", "cmake", "fuzz", "CMakeLists.txt", ".ci"],
                             CPP_EXTS + (".sh", ".py", ".cmake", ".txt", ".in", "run")):
        text = read(path)
        for p in patterns:
            anywhere.update(p.findall(text))
    return library, anywhere


def check_env(root, fail, args):
    env_doc = os.path.join(root, "docs/environment.md")
    library, anywhere = code_variables(root)
    if not os.path.exists(env_doc):
        fail.add("docs/environment.md", 1, "missing: it must document the %d KILN_* variables the code reads (%s)"
                 % (len(library), ", ".join(sorted(library))))
        return
    documented = {}
    for n, line in enumerate(read(env_doc).split("\n"), 1):
        for name in re.findall(r"\bKILN_[A-Z0-9_]+\b", line):
            documented.setdefault(name, n)
    for name, n in sorted(documented.items(), key=lambda kv: kv[1]):
        if name not in anywhere:
            fail.add("docs/environment.md", n, "%s is documented but no code reads it" % name)
    for name, where in sorted(library.items()):
        if name not in documented:
            fail.add("docs/environment.md", 1, "%s is read by the code (%s) but not documented here" % (name, where))
    print("env: %d variables in the code, %d documented" % (len(library), len(documented)))


# ---- links --------------------------------------------------------------------------------------

def github_anchor(heading):
    text = re.sub(r"<[^>]+>", "", heading)                     # inline HTML
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)     # links keep their text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)                        # punctuation goes, - and _ stay
    return text.replace(" ", "-")


def anchors_of(path, cache):
    if path not in cache:
        seen, anchors = {}, set()
        for _, line in prose_lines(read(path)):
            m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                a = github_anchor(m.group(2))
                k = seen.get(a, 0)
                seen[a] = k + 1
                anchors.add(a if k == 0 else "%s-%d" % (a, k))
            for explicit in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                anchors.add(explicit)
        cache[path] = anchors
    return cache[path]


def check_links(root, fail, args):
    cache, count = {}, 0
    link = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*(\S+)")
    for doc in doc_files(root):
        doc_path = os.path.join(root, doc)
        for n, line in prose_lines(read(doc_path)):
            stripped = re.sub(r"`[^`]*`", "", line)
            for m in link.finditer(stripped):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                count += 1
                path_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(doc_path), path_part)) if path_part else doc_path
                if not os.path.exists(dest):
                    fail.add(doc, n, "link to %s: %s does not exist" % (target, os.path.relpath(dest, root)))
                    continue
                if anchor and dest.endswith(".md") and anchor not in anchors_of(dest, cache):
                    fail.add(doc, n, "link to %s: %s has no heading with anchor #%s"
                             % (target, os.path.relpath(dest, root), anchor))
    print("links: %d relative links checked" % count)


# ---- history ------------------------------------------------------------------------------------

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def check_history(root, fail, args):
    for doc in doc_files(root):
        if doc in HISTORY_FILES:
            continue
        exempt = False
        for n, line in enumerate(read(os.path.join(root, doc)).split("\n"), 1):
            if "<!-- figures -->" in line:
                exempt = True
            if "<!-- /figures -->" in line:
                exempt = False
                continue
            if exempt:
                continue
            for m in DATE.finditer(line):
                fail.add(doc, n, "date %s: history belongs in CHANGELOG.md, figures in docs/benchmarks.md "
                         "(or between <!-- figures --> and <!-- /figures -->)" % m.group(0))
            for m in HASH.finditer(line):
                fail.add(doc, n, "commit hash %s: history belongs in CHANGELOG.md, figures in docs/benchmarks.md "
                         "(or between <!-- figures --> and <!-- /figures -->)" % m.group(0))


CHECKS = {"length": check_length, "examples": check_examples, "cpp": check_cpp, "flags": check_flags,
          "env": check_env, "links": check_links, "history": check_history}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checks", nargs="*", help="checks to run: %s (default: all)" % ", ".join(CHECKS))
    p.add_argument("--source", default=os.path.dirname(here), help="the Kiln source tree (default: this script's)")
    p.add_argument("--apps-dir", help="where the built apps are (<build>/apps)")
    p.add_argument("--cxx", help="the C++ compiler for the cpp check")
    p.add_argument("-I", dest="include", action="append", default=[], help="include dir for the cpp check")
    p.add_argument("--unbuilt", action="append", default=[], metavar="APP",
                   help="an app this build leaves out (bench_cuda without CUDA): its flags are not checked")
    p.add_argument("-j", dest="jobs", type=int, default=2, help="parallel compiles")
    args = p.parse_args()
    names = args.checks or list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        p.error("unknown check %s (the checks: %s)" % (", ".join(unknown), ", ".join(CHECKS)))
    root = os.path.abspath(args.source)
    failed = 0
    for name in names:
        fail = Failures()
        CHECKS[name](root, fail, args)
        for item in fail.items:
            print(item)
        if fail.items:
            failed += 1
            print("check-docs %s: FAILED (%d problems)" % (name, len(fail.items)))
        else:
            print("check-docs %s: ok" % name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
