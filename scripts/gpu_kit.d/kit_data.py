"""The GPU kit's file store: each distinct file of the kit's trees travels once.

The kit's trees share much of what they hold: the same token files (tiny and moe_tiny train on
the same text; the 0.1B and 1.5B trees on the same synthetic tokens) and, in every tree, the same
runtime and template sources. `prepare` moves every token file (a tree's data/) and every file
whose content another tree also holds into KIT/store/<sha256>, once, and writes KIT/store/index.json
(which paths each stored file stands for); the carried trees then lack those paths. A GPU kit holds
no link (a symbolic link travels as a link, not as the file); its run recreates the paths before
anything reads a tree: hard links to the store (a copy where a hard link fails), removed again when
the run ends. An emulated kit runs where it was prepared: its paths are relative symbolic links
into the store from the start, as its bin/ links to the build.

Standard library only (it runs on the GPU machine too). Used by scripts/gpu_kit.py.
"""
import hashlib
import json
import os
import shutil

STORE = "store"
INDEX = "index.json"
SCHEMA = "gpu-kit-store-1"
MIN_SHARED_BYTES = 1024  # a shared file smaller than this stays in its trees (its index line costs as much)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tree_files(kit):
    """Every regular file under KIT/trees, as kit-relative paths (links are skipped)."""
    out = []
    for root, dirs, files in os.walk(os.path.join(kit, "trees")):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                out.append(os.path.relpath(path, kit))
    return out


def is_token_file(rel):
    """A tree's token file: trees/NAME/data/FILE."""
    parts = rel.split(os.sep)
    return len(parts) == 4 and parts[0] == "trees" and parts[2] == "data"


def load_index(kit):
    """{sha: {"bytes": N, "paths": [...]}} of the kit's store ({} for a kit without one)."""
    path = os.path.join(kit, STORE, INDEX)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA}")
    return doc["files"]


def stored_paths(kit):
    """kit-relative path -> the store file that stands for it."""
    return {p: os.path.join(kit, STORE, sha) for sha, e in load_index(kit).items() for p in e["paths"]}


def store(kit, mode):
    """Moves the token files and the files several trees share into KIT/store/ (see the module's
    comment); prints what it saved. An emulated kit keeps relative links at the moved paths."""
    by_sha, sizes = {}, {}
    for rel in _tree_files(kit):
        size = os.path.getsize(os.path.join(kit, rel))
        sha = _sha256(os.path.join(kit, rel))
        by_sha.setdefault(sha, []).append(rel)
        sizes[sha] = size
    index, before, after = {}, 0, 0
    for sha, paths in sorted(by_sha.items()):
        if not (any(is_token_file(p) for p in paths) or (len(paths) > 1 and sizes[sha] >= MIN_SHARED_BYTES)):
            continue
        index[sha] = {"bytes": sizes[sha], "paths": paths}
        before += sizes[sha] * len(paths)
        after += sizes[sha]
    os.makedirs(os.path.join(kit, STORE), exist_ok=True)
    for sha, e in index.items():
        target = os.path.join(kit, STORE, sha)
        os.replace(os.path.join(kit, e["paths"][0]), target)
        for rel in e["paths"]:
            path = os.path.join(kit, rel)
            if os.path.lexists(path):
                os.remove(path)
            if mode != "gpu":
                os.symlink(os.path.relpath(target, os.path.dirname(path)), path)
    with open(os.path.join(kit, STORE, INDEX), "w") as f:
        json.dump({"schema": SCHEMA, "files": index}, f, indent=0, sort_keys=True)
    tokens = sum(1 for e in index.values() if any(is_token_file(p) for p in e["paths"]))
    paths = sum(len(e["paths"]) for e in index.values())
    print(f"{len(index)} files ({tokens} token files) stored once for {paths} paths: "
          f"{before / 2**20:.1f} -> {after / 2**20:.1f} MiB")


def materialize(kit, created_list=""):
    """Recreates every stored path of KIT (a hard link to the store, else a copy), after checking
    each store file's size and hash (a kit cut short in transit fails here, naming the file).
    Paths that already stand (an emulated kit's links, an earlier run's links) are left alone.
    Writes the paths it created to CREATED_LIST (for the run's cleanup). Exit 1 naming the problem."""
    try:
        index = load_index(kit)
    except (OSError, ValueError, KeyError) as e:
        print(f"the kit's store index is unreadable: {e}")
        return 1
    created, linked, copied = [], 0, 0
    for sha, e in sorted(index.items()):
        src = os.path.join(kit, STORE, sha)
        if not os.path.isfile(src) or os.path.getsize(src) != e["bytes"] or _sha256(src) != sha:
            print(f"{src} is missing or damaged (stands for {e['paths'][0]}): prepare the kit again")
            return 1
        for rel in e["paths"]:
            dst = os.path.join(kit, rel)
            if os.path.exists(dst):
                continue
            if os.path.lexists(dst):
                os.remove(dst)  # a dangling link
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                os.link(src, dst)
                linked += 1
            except OSError:
                shutil.copyfile(src, dst)
                copied += 1
            created.append(rel)
    if created_list:
        with open(created_list, "w") as f:
            f.write("".join(p + "\n" for p in created))
    total = sum(len(e["paths"]) for e in index.values())
    print(f"{total} paths from {len(index)} stored files ({linked} linked, {copied} copied, "
          f"{total - linked - copied} already there)")
    return 0


def unmaterialize(kit, created_list):
    """Removes the paths a run created (the kit leaves as it came)."""
    try:
        with open(created_list) as f:
            paths = [p.strip() for p in f if p.strip()]
    except OSError:
        return 0
    for rel in paths:
        try:
            os.remove(os.path.join(kit, rel))
        except OSError:
            pass
    return 0


def kind_of(rel):
    """What a kit file is, for the size table."""
    parts = rel.split(os.sep)
    name = parts[-1]
    if parts[0] == STORE:
        return "store index" if name == INDEX else "store"
    if parts[0] == "bin":
        return "binaries"
    if is_token_file(rel) or name.endswith(".bin"):
        return "token files"
    ext = os.path.splitext(name)[1]
    if ext in (".toml",):
        return "specs"
    if ext in (".cpp", ".hpp", ".cu", ".cuh", ".h", ".c", ".cc", ".inc") or name == "CMakeLists.txt":
        return "sources"
    if ext in (".json", ".jsonl"):
        return "json"
    return "other"


def sizes(kit):
    """What takes the kit's space: by top-level part (each tree) and by kind of file, the store's
    files counted by the kinds of the paths they stand for; and what the store saved."""
    by_part, by_kind, total = {}, {}, 0
    stored_kind = {}
    try:
        for sha, e in load_index(kit).items():
            stored_kind[sha] = kind_of(e["paths"][0])
    except (OSError, ValueError, KeyError):
        pass
    for root, _, files in os.walk(kit):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, kit)
            size = os.lstat(path).st_size
            total += size
            parts = rel.split(os.sep)
            part = "/".join(parts[:2]) if parts[0] == "trees" and len(parts) > 2 else parts[0]
            by_part[part] = by_part.get(part, 0) + size
            kind = stored_kind.get(name, kind_of(rel)) if parts[0] == STORE and name != INDEX else kind_of(rel)
            if parts[0] == STORE and name != INDEX:
                kind = f"{kind} (stored once)"
            by_kind[kind] = by_kind.get(kind, 0) + size
    lines = [f"kit {kit}: {total / 2**20:.2f} MiB ({total:,} bytes)", "by part:"]
    lines += [f"  {v / 2**20:8.2f} MiB  {k}" for k, v in sorted(by_part.items(), key=lambda kv: -kv[1])]
    lines += ["by kind:"]
    lines += [f"  {v / 2**20:8.2f} MiB  {k}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])]
    index = {}
    try:
        index = load_index(kit)
    except (OSError, ValueError, KeyError):
        pass
    if index:
        saved = sum(e["bytes"] * (len(e["paths"]) - 1) for e in index.values())
        lines.append(f"the store saves {saved / 2**20:.2f} MiB ({len(index)} files for "
                     f"{sum(len(e['paths']) for e in index.values())} paths)")
    print("\n".join(lines))
    return 0
