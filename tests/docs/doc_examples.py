#!/usr/bin/env python3
"""The documentation test: runs the shell examples of README.md and docs/*.md as a user would.

Every console block (lines starting with "$ ") runs in order, in a scratch copy of the
repository, one shell session (exported variables and the working directory carry over), and its
exit status and the output lines the document shows are checked. The Markdown marks what a test
needs with HTML comments on the lines just before a block (invisible when rendered):

  <!-- doc-test: file PATH -->            the next block is a file a reader writes: write it to PATH
  <!-- doc-test: before COMMAND -->       run COMMAND (unchecked) before the block, e.g. an edit the
                                          text asks the reader to make
  <!-- doc-test: exit N -->               the block's commands exit with N (an error example)
  <!-- doc-test: skip REASON -->          do not run the block; reported as skipped with REASON
  <!-- doc-test: skip-command PREFIX :: REASON -->     skip the block's commands that start with PREFIX
  <!-- doc-test: unchecked-output PREFIX :: REASON --> run them, check only their exit status

Indented (4-space) command blocks are run only when marked `run`; in README.md, where they are
commands a reader runs, they must otherwise be marked `skip` with a reason: nothing is skipped
silently (in docs/*.md they illustrate, and only console blocks run). The substitutions a test needs (shorter runs,
CPU-only builds where CI has no GPU, Open MPI's --allow-run-as-root as root) are the table
SUBSTITUTIONS below, the one place they are stated; the figures that vary from run to run (times,
losses after shortened training) are the table VOLATILE. Output lines are compared after both;
"..." lines in the document stand for omitted output, and the shown lines must appear in order.

The test also keeps the command-line help in sync with the docs: every flag `gcompile --help`
and `train --help` print is documented (README.md or docs/*.md), every flag README.md lists for
train exists, and docs/spec.md's key reference equals `gcompile schema --markdown`.

usage: doc_examples.py --build-dir DIR [--venv DIR] [--keep] [--only SECTION_PREFIX] FILE.md...
Exit status 0 when every example that ran passed, 1 otherwise, 2 on bad usage.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# Stated once: how a command is changed to run in the test, and why.
SUBSTITUTIONS = [
    # CI has no GPU: trees are built without their CUDA backend (the nvcc build takes minutes and is
    # tested by CudaTree.* and the GPU kit); train would run on the CPU there anyway. And at -Og
    # (--quick-build: half the compile time for the same losses; Release is what a user gets),
    # and only the programs the documents run (--programs: train, and analyze for the trees whose
    # analyze a document runs, see programs_run; probe and gradcheck are tested by Export.*, Tree.*
    # and MoeTree.*).
    (r"\bgcompile (?!-)(\S+\.toml)(?=\s*(?:&&|$))",
     lambda m: f"gcompile {m.group(1)} --cpu-only --quick-build --programs {programs_run(m.group(1))}"),
    # Shorter training: the tour's runs take minutes; the checks need a run and its checkpoint.
    (r"(\./generated/[a-z0-9_]+/train)(?=\s*$|\s+#|\s+--init-from)", r"\1 --steps 12"),
    (r"(sweep [\s\S]*?--train) --steps \d+", r"\1 --steps 2 --quick-build --programs train"),
]
ROOT_SUBSTITUTIONS = [
    # Open MPI refuses to start as root without this flag (README section 11 says so).
    (r"\bmpirun\b(?! --allow-run-as-root)", "mpirun --allow-run-as-root"),
]
# Figures that change from run to run, or with the shortened runs: replaced by <*> on both sides.
VOLATILE = [
    r"\d+ tok/s", r"\b(loss|val_loss|grad_norm|lr) [0-9.e+-]+", r"step \d+/\d+", r"^step \d+:",
    r"step_\d{6}", r"\(step \d+\)", r"(train|test|inferential|symmetric) \d\.\d{3}",
    r"^  model:.*", r"\d+ plots", r"\d+ min \d+ s", r"\d+(\.\d+)? s\b",
]
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")


class Block:
    def __init__(self, path, line, section, kind, lines, directives):
        self.path, self.line, self.section, self.kind = path, line, section, kind
        self.lines, self.directives = lines, directives

    def directive(self, name):
        return [d[len(name):].strip() for d in self.directives if d == name or d.startswith(name + " ")]


def parse(path):
    """The code blocks of a Markdown file with the doc-test directives before each."""
    blocks, pending, section = [], [], ""
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            pending.append(m.group(1))
            i += 1
            continue
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if line.startswith("```"):
            kind = line[3:].strip() or "text"
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append(Block(path, i + 1, section, kind, lines[i + 1:j], pending))
            pending, i = [], j + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            body = [l[4:] for l in lines[i:j]]
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(path, i + 1, section, "indented", body, pending))
            pending, i = [], j
            continue
        if line.strip():
            pending = []  # directives belong to the block right after them
        i += 1
    return blocks


def balanced(text):
    """True when TEXT closes every quote it opens (a command may span lines inside quotes)."""
    quote, k = None, 0
    while k < len(text):
        c = text[k]
        if quote is None and c == "\\":
            k += 2
            continue
        if quote is None and c in "'\"":
            quote = c
        elif quote == c and (c == "'" or text[k - 1] != "\\"):
            quote = None
        k += 1
    return quote is None


def commands(block):
    """(command, shown output lines) of a console block."""
    out, k, lines = [], 0, block.lines
    while k < len(lines):
        if not lines[k].startswith("$ "):
            k += 1
            continue
        cmd = lines[k][2:]
        k += 1
        while (cmd.rstrip().endswith("\\") or not balanced(cmd)) and k < len(lines):
            cmd += "\n" + lines[k]
            k += 1
        shown = []
        while k < len(lines) and not lines[k].startswith("$ "):
            shown.append(lines[k])
            k += 1
        out.append((cmd, shown))
    return out


# The trees whose analyze the documents run (./generated/NAME/analyze), filled by main().
ANALYZED = set()


def programs_run(spec):
    """The programs a document runs of SPEC's tree: train, and analyze where one runs it. The tree's
    name is the spec file's stem, as in every spec the documents build (were it not, the analyze
    command would find no program and fail)."""
    return "train,analyze" if os.path.splitext(os.path.basename(spec))[0] in ANALYZED else "train"


def substitute(cmd):
    for pattern, repl in SUBSTITUTIONS + (ROOT_SUBSTITUTIONS if os.geteuid() == 0 else []):
        cmd = re.sub(pattern, repl, cmd, flags=re.M)
    return cmd


def normalize(line):
    line = line.rstrip()
    for pattern in VOLATILE:
        line = re.sub(pattern, "<*>", line)
    return line


def shown_lines_appear(shown, actual):
    """The shown lines ("..." and blank lines skipped) in order among the actual ones; the first
    that does not appear, or None."""
    want = [normalize(l) for l in shown if l.strip() and l.strip() != "..."]
    have = [normalize(l) for l in actual.split("\n")]
    pos = 0
    for w in want:
        while pos < len(have) and have[pos] != w:
            pos += 1
        if pos == len(have):
            return w
        pos += 1
    return None


class Session:
    """One shell session in the scratch copy: exports and the working directory carry over."""

    def __init__(self, scratch, env):
        self.scratch, self.env = scratch, env
        self.state = os.path.join(scratch, ".doc-test-state")
        os.makedirs(self.state, exist_ok=True)
        open(os.path.join(self.state, "env.sh"), "w").close()
        with open(os.path.join(self.state, "cwd"), "w") as f:
            f.write(scratch)

    def run(self, cmd, timeout):
        script = (f'source "{self.state}/env.sh"; cd "$(cat "{self.state}/cwd")"\n'
                  f"{cmd}\n"
                  f'__rc=$?; export -p > "{self.state}/env.sh"; pwd > "{self.state}/cwd"; exit $__rc\n')
        try:
            p = subprocess.run(["bash", "-c", script], cwd=self.scratch, env=self.env, timeout=timeout,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            return p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            return 124, (e.stdout or "") if isinstance(e.stdout, str) else "timed out"


def scratch_copy(repo, build_dir, venv):
    """The repository's tracked files in a temporary folder; build/ and .venv link to the real ones."""
    scratch = tempfile.mkdtemp(prefix="gcompile-doc-test-")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                           stdout=subprocess.PIPE, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(repo, rel)
        if not os.path.exists(src):
            continue
        dst = os.path.join(scratch, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    os.symlink(os.path.abspath(build_dir), os.path.join(scratch, "build"))
    if venv and os.path.isdir(venv):
        os.symlink(os.path.abspath(venv), os.path.join(scratch, ".venv"))
    return scratch


def check_help(build_dir, results, partial):
    """Every flag the help texts print is documented; README's train flags exist."""
    gcompile = os.path.join(build_dir, "compiler", "gcompile")
    docs_dir = os.path.join(os.getcwd(), "docs")
    every_doc = [os.path.join(os.getcwd(), "README.md")] + sorted(
        os.path.join(docs_dir, f) for f in os.listdir(docs_dir) if f.endswith(".md"))
    text = "\n".join(open(d).read() for d in every_doc)
    readme = open(every_doc[0]).read()
    helps = {"gcompile --help": subprocess.run([gcompile, "--help"], stdout=subprocess.PIPE, text=True).stdout}
    train = os.path.join("generated", "tiny", "train")
    if os.path.exists(train):
        helps["train --help"] = subprocess.run([train, "--help"], stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True).stdout
    else:
        results.append(("help", "train --help", "SKIP" if partial else "FAIL",
                        "no generated/tiny/train: README section 7 builds it" + (" (not run: --only)" if partial else "")))
    for name, help_text in helps.items():
        flags = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", help_text)))
        missing = [f for f in flags if f not in text]
        results.append(("help", name, "FAIL" if missing or not flags else "PASS",
                        f"undocumented: {' '.join(missing)}" if missing else f"{len(flags)} flags documented"))
        if name == "train --help":
            m = re.search(r"`\./train --help` lists the flags:(.*?)\n\n", readme, re.S)
            listed = sorted(set(re.findall(r"--[a-z][a-z0-9-]+", m.group(1)))) if m else []
            unknown = [f for f in listed if f not in flags]
            results.append(("help", "README's train flags", "FAIL" if unknown or not listed else "PASS",
                            f"not in train --help: {' '.join(unknown)}" if unknown else f"{len(listed)} flags exist"))
    schema = subprocess.run([gcompile, "schema", "--markdown"], stdout=subprocess.PIPE, text=True).stdout
    spec_md = open(os.path.join(docs_dir, "spec.md")).read()
    begin = "<!-- BEGIN GENERATED KEY REFERENCE (scripts/update_docs) -->\n"
    end = "<!-- END GENERATED KEY REFERENCE -->"
    b, e = spec_md.find(begin), spec_md.find(end)
    ok = b >= 0 and e > b and spec_md[b + len(begin):e] == schema
    results.append(("help", "docs/spec.md key reference", "PASS" if ok else "FAIL",
                    "equals gcompile schema --markdown" if ok else "stale: run scripts/update_docs"))


def run_file(path, session, results, only, timeout):
    for block in parse(path):
        where = f"{os.path.basename(path)}:{block.line} ({block.section})"
        skip = block.directive("skip")
        if skip and "" not in skip:
            results.append((where, block.lines[0][:60] if block.lines else "", "SKIP", skip[0]))
            continue
        files = block.directive("file")
        if files:  # written whatever --only selects: later sections use the files
            target = os.path.join(session.scratch, files[0])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write("\n".join(block.lines) + "\n")
            continue
        if only and not block.section.startswith(only):
            continue
        console = block.kind != "indented" and any(l.startswith("$ ") for l in block.lines)
        if block.kind == "indented":
            if not block.directive("run"):
                # README.md's indented blocks are commands a reader runs; in docs/ they illustrate.
                if os.path.basename(path) == "README.md" and any(re.match(r"\s*(\$ )?(\./|bash |gcompile |cmake |scripts/|bench/)", l) for l in block.lines):
                    results.append((where, block.lines[0][:60], "FAIL",
                                    "an indented command block must be marked doc-test: run or skip REASON"))
                continue
            cmds = [(l, []) for l in block.lines if l.strip()]
        elif console:
            cmds = commands(block)
        else:
            continue
        for before in block.directive("before"):
            session.run(before, timeout)
        want_exit = int((block.directive("exit") or ["0"])[0])
        skip_cmds = [d.split("::", 1) for d in block.directive("skip-command")]
        unchecked = [d.split("::", 1) for d in block.directive("unchecked-output")]
        for cmd, shown in cmds:
            label = cmd.split("\n")[0][:90]
            why = next((r.strip() for p, r in skip_cmds if cmd.startswith(p.strip())), None)
            if why:
                results.append((where, label, "SKIP", why))
                continue
            ran = substitute(cmd)
            start = time.time()
            rc, out = session.run(ran, timeout)
            secs = time.time() - start
            log = f"$ {ran}\n{out}"
            if rc != want_exit:
                results.append((where, label, "FAIL", f"exit {rc} (want {want_exit}) after {secs:.0f} s\n{tail(log)}"))
                continue
            if any(cmd.startswith(p.strip()) for p, _ in unchecked):
                results.append((where, label, "PASS", f"exit {rc}, output not compared, {secs:.0f} s"))
                continue
            missing = shown_lines_appear(shown, out)
            if missing is not None:
                results.append((where, label, "FAIL", f"the shown line\n    {missing}\nis not in the output:\n{tail(log)}"))
            else:
                results.append((where, label, "PASS", f"exit {rc}, {len([s for s in shown if s.strip() and s.strip() != '...'])} shown lines found, {secs:.0f} s"))


def tail(text, n=25):
    lines = text.rstrip().split("\n")
    return "\n".join("    | " + l for l in (lines if len(lines) <= n else lines[:3] + ["..."] + lines[-(n - 4):]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--venv", default="")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    ap.add_argument("--only", default="", help="run only the sections whose title starts with this")
    ap.add_argument("--timeout", type=int, default=600, help="seconds one command may take")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(args.build_dir, "compiler", "gcompile")):
        print(f"doc_examples: no {args.build_dir}/compiler/gcompile", file=sys.stderr)
        return 2
    scratch = scratch_copy(repo, args.build_dir, args.venv)
    env = dict(os.environ)
    env["PATH"] = os.path.join(scratch, "build", "compiler") + os.pathsep + env.get("PATH", "")
    env["GCOMPILE_CACHE_DIR"] = env.get("GCOMPILE_CACHE_DIR", "")
    env.pop("GCOMPILE_CACHE_DIR") if not env["GCOMPILE_CACHE_DIR"] else None
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "2")
    # Offline: transformers and lm-eval read the local export and docs/eval's local task only
    # (CI reaches PyPI and Debian, not the Hugging Face Hub).
    env["HF_HUB_OFFLINE"] = env["HF_DATASETS_OFFLINE"] = "1"
    for f in args.files:
        ANALYZED.update(re.findall(r"generated/([A-Za-z0-9_.-]+)/analyze\b", open(os.path.join(repo, f)).read()))
    session = Session(scratch, env)
    results = []
    try:
        for f in args.files:
            run_file(os.path.join(repo, f), session, results, args.only, args.timeout)
        cwd = os.getcwd()
        os.chdir(scratch)
        check_help(os.path.join(scratch, "build"), results, bool(args.only))
        os.chdir(cwd)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"doc_examples: kept {scratch}")
    width = max((len(r[0]) for r in results), default=10)
    for where, label, result, detail in results:
        secs = re.search(r"(\d+) s$", detail) if result == "PASS" else None
        print(f"{result:4}  {where:<{width}}  {label}" + (f"  ({secs.group(1)} s)" if secs else ""))
        if result != "PASS":
            print("      " + detail.replace("\n", "\n      "))
    counts = {k: sum(r[2] == k for r in results) for k in ("PASS", "FAIL", "SKIP")}
    print(f"doc_examples: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped (each with its reason)")
    return 1 if counts["FAIL"] or not counts["PASS"] else 0


if __name__ == "__main__":
    sys.exit(main())
