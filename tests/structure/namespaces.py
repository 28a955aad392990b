#!/usr/bin/env python3
"""One root namespace (docs/architecture.md, "Namespaces"): every namespace declared at file scope
in the project's C++ (compiler/, runtime/, templates/, tests/, bench/) is `gc` or under it
(`gc::tree`, `gc::rt`, `gc::emu`, `gc::test`, ...). Anonymous namespaces, nested namespaces and
namespace aliases (`namespace kt = gc::test::kernels;`) are allowed.

The scan strips comments, string and character literals (raw strings included, so the fixture
code inside the specializer's tests is not read as the project's) and tracks brace depth, so a
namespace counts as file scope only where no brace is open.

Exit 0 when every file-scope namespace is under gc; otherwise each is printed as FILE:LINE: name.
`--self-test` first checks that the scanner catches and passes what it should; `--root DIR` checks
another checkout.
"""

from __future__ import annotations

import os
import re
import sys

FOLDERS = ("compiler", "runtime", "templates", "tests", "bench")
SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc", ".in")
NAMESPACE = re.compile(r"\bnamespace\s+([A-Za-z_][\w:]*)?\s*([{=])")
RAW_STRING = re.compile(r'R"([^()\\ ]{0,16})\(')


def strip_code(text: str) -> str:
    """The text with comments and literals blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        raw = RAW_STRING.match(text, i) if c == "R" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if raw:
            end = text.find(")" + raw.group(1) + '"', raw.end())
            j = n if end < 0 else end + len(raw.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # a digit separator: 1'000'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def file_scope_namespaces(text: str) -> list[tuple[int, str]]:
    """(line, name) of every named namespace opened where no brace is open, nested names kept
    whole ("gc::tree")."""
    code = strip_code(text)
    found = []
    depth = 0  # braces open before the match: a namespace can only open at namespace scope
    pos = 0
    for match in NAMESPACE.finditer(code):
        segment = code[pos:match.start()]
        depth += segment.count("{") - segment.count("}")
        pos = match.end()
        name, kind = match.group(1), match.group(2)
        if kind == "=":
            continue
        if name and depth == 0:
            found.append((code.count("\n", 0, match.start()) + 1, name))
        depth += 1
    return found


def violations(files: dict[str, str]) -> list[str]:
    out = []
    for path, text in sorted(files.items()):
        for line, name in file_scope_namespaces(text):
            if name != "gc" and not name.startswith("gc::"):
                out.append(f"{path}:{line}: namespace {name}: the project's one root namespace is gc")
    return out


def read_tree(root: str) -> dict[str, str]:
    files = {}
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in names:
                if name.endswith(SUFFIXES):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        files[os.path.relpath(path, root)] = f.read()
    return files


def self_test() -> None:
    cases = {
        "bad_root.hpp": ("namespace gcm {\nint x;\n}\n", ["gcm"]),
        "bad_nested_root.hpp": ("namespace kt::inner {\n}\n", ["kt::inner"]),
        "after_gc.hpp": ("namespace gc::tree {\n}  // namespace gc::tree\nnamespace other {\n}\n", ["other"]),
        "good.hpp": ("namespace gc::tree {\nnamespace detail {\n}\nnamespace {\n}\n}\n", []),
        "alias.cpp": ("namespace kt = gc::test::kernels;\nnamespace fs = std::filesystem;\n", []),
        "anonymous.cpp": ("namespace {\nint f() { return 1; }\n}\n", []),
        "raw_fixture.cpp": ('const char* k = R"cpp(namespace fixture {\n})cpp";\n', []),
        "comment.cpp": ("// namespace old {\n/* namespace older { */\nint y = 1'000;\n", []),
        "string.cpp": ('const char* s = "namespace q {";\nchar c = \'{\';\nnamespace bad {\n}\n', ["bad"]),
    }
    for path, (text, expected) in cases.items():
        got = [name for _, name in file_scope_namespaces(text)
               if name != "gc" and not name.startswith("gc::")]
        if got != expected:
            raise SystemExit(f"self-test: {path}: found {got}, expected {expected}")


def main(argv: list[str]) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "--self-test" in argv:
        self_test()
    if "--root" in argv:
        root = argv[argv.index("--root") + 1]
    bad = violations(read_tree(root))
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} namespace(s) outside gc (docs/architecture.md, Namespaces)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
