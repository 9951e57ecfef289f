#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The source layout's rules (docs/architecture.md, "Layers"), checked on
every hand-written source file:
  - arrows point down only: each folder includes only the folders it may
    depend on (the exporter and the CLI's printers never see the engine);
  - core/ is in sub-areas (CORE_AREAS), each including only the sub-areas
    it may depend on (the same DEPENDS as CMakeLists.txt's lw_core_area);
    no source file sits in core/ itself;
  - core/ and view/ never include libbpf or the generated skeleton;
  - of service/, only the adapter onto the engine (ENGINE_ADAPTERS) includes
    engine/: the daemon's parts speak to the tracer through
    service/tracer_control.h, so the unit tests link them without libbpf;
  - no hand-written source file is over 800 lines (bpf/vmlinux.h aside),
    and no function in the product's folders (PRODUCT_DIRS) is over 120
    (function_length.py; the house style aims at 80);
  - every repository path the README and docs/ cite exists;
  - decisions live one per file, docs/decisions/NNNN-slug.md, each listed in
    docs/architecture.md; a citation anywhere in the tree names one by its
    slug ("decision auto-sampling", "decisions a, b and c") and the slug
    must have its file; a citation by number (of a decision, or of
    docs/architecture.md followed by a number) is an error: the numbers
    were renumbered more than once, the slugs stay.
Usage: check_layout.py SOURCE_DIR"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from function_length import function_lengths  # noqa: E402

# folder -> folders of this project it may include from
ALLOWED = {
    "core": {"core"},
    "view": {"view", "core"},
    "engine": {"engine", "view", "core"},
    "service": {"service", "engine", "view", "core"},
    "exporter": {"exporter", "view", "core"},
    "cli": {"cli", "service", "engine", "exporter", "view", "core"},
}
# core/'s sub-areas -> the sub-areas each may include (CMakeLists.txt,
# lw_core_area(... DEPENDS ...); an arrow added here must be added there).
CORE_AREAS = {
    "platform": set(),
    "config": {"platform"},
    "proc": {"platform"},
    "symbols": {"platform", "config", "proc"},
    "unwind": {"platform", "symbols", "config", "proc"},
    "probes": {"platform", "proc", "symbols", "config"},
    "accounting": {"platform", "proc"},
    "analysis": {"platform", "proc", "accounting"},
    "policy": {"platform", "config", "proc"},
    "formats": {"platform", "symbols", "config", "proc"},
}
# The only service/ files that include engine/ (lw_service_engine).
ENGINE_ADAPTERS = {"service/engine_tracer.h", "service/engine_tracer.cc", "service/daemon_create.cc"}
# Files of cli/ that only print views (docs/architecture.md, "Layers").
PRINTERS = {"cli/top_printer.h", "cli/top_printer.cc"}
LIBBPF = {"bpf/libbpf.h", "bpf/bpf.h", "bpf/btf.h", "bpf/libbpf_common.h"}
PROJECT_DIRS = set(ALLOWED) | {"bpf", "tests", "bench", "fuzz", "demo"}
MAX_LINES = 800
MAX_FUNCTION_LINES = 120
PRODUCT_DIRS = {"bpf", "core", "engine", "view", "service", "exporter", "cli"}
CITED_DIRS = set(ALLOWED) | {"bpf", "tests", "bench", "docs", "deploy", "scripts", "fuzz", "demo", "config", "cmake"}
SOURCE_EXT = (".c", ".cc", ".h", ".py", ".sh")
SKIP_DIRS = {".git", "node_modules"}

# Decision citations (docs/architecture.md, "Decisions").
DECISIONS_DIR = "docs/decisions"
DECISION_FILE_RE = re.compile(r"^(\d{4})-([a-z]+(?:-[a-z]+){1,4})\.md$")
CITE_EXT = (".c", ".cc", ".h", ".py", ".sh", ".md", ".yaml", ".yml", ".json", ".txt", ".cmake", ".service", ".in")
CITE_NAMES = {"CMakeLists.txt", "Dockerfile"}
# a space, or a line break and the next line's comment leader
_SEP = r"(?:[ \t]+|[ \t]*\n[ \t]*(?://+|\*|#+|;+)?[ \t]*)"
_SLUG = r"[a-z]+(?:-[a-z]+)+"
SLUG_CITE_RE = re.compile(rf"\b[Dd]ecisions?{_SEP}({_SLUG}(?:,{_SEP}{_SLUG})*(?:,?{_SEP}and{_SEP}{_SLUG})?)")
_NUM = r"\d+(?![\d-])"
NUMBER_CITE_RES = [
    re.compile(rf"\b[Dd]ecisions?{_SEP}{_NUM}"),
    re.compile(rf"\barchitecture(?:\.md)?[,:]?{_SEP}(?:[Dd]ecisions?{_SEP})?{_NUM}"),
    re.compile(rf"\barchitecture\.md{_SEP}?\({_NUM}"),
]

include_re = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]')


def check_core_file(rel, lines):
    """core/AREA/FILE includes only core/AREA and the areas AREA depends on."""
    parts = rel.split("/")
    if len(parts) != 3 or parts[1] not in CORE_AREAS:
        return [f"{rel}: core/ sources live in a sub-area ({', '.join(sorted(CORE_AREAS))})"]
    area = parts[1]
    allowed = CORE_AREAS[area] | {area}
    errors = []
    for n, line in enumerate(lines, 1):
        m = include_re.match(line)
        if not m or not m.group(1).startswith("core/"):
            continue
        inc_parts = m.group(1).split("/")
        if len(inc_parts) != 3 or inc_parts[1] not in CORE_AREAS:
            errors.append(f"{rel}:{n}: includes {m.group(1)}, which is in no core/ sub-area")
        elif inc_parts[1] not in allowed:
            errors.append(f"{rel}:{n}: core/{area} may not include {m.group(1)} "
                          f"(allowed: {', '.join(sorted(allowed))})")
    return errors


def check_decisions(root):
    """One file per decision, each in the index; every citation by slug, and
    every slug cited has its file; no citation by number."""
    errors = []
    ddir = os.path.join(root, DECISIONS_DIR)
    slugs, numbers = {}, {}
    for name in sorted(os.listdir(ddir)) if os.path.isdir(ddir) else []:
        m = DECISION_FILE_RE.match(name)
        if not m:
            errors.append(f"{DECISIONS_DIR}/{name}: not NNNN-slug.md (slug: 2-5 lowercase words, hyphens)")
            continue
        num, slug = m.groups()
        if slug in slugs:
            errors.append(f"{DECISIONS_DIR}/{name}: slug {slug} also in {slugs[slug]}")
        if num in numbers:
            errors.append(f"{DECISIONS_DIR}/{name}: number {num} also in {numbers[num]}")
        slugs[slug], numbers[num] = name, name
        with open(os.path.join(ddir, name), encoding="utf-8") as f:
            first = f.readline()
        if not first.startswith(f"# {num}. "):
            errors.append(f"{DECISIONS_DIR}/{name}:1: the title line is not '# {num}. Title'")
    arch = os.path.join(root, "docs", "architecture.md")
    index = open(arch, encoding="utf-8").read() if os.path.exists(arch) else ""
    for name in slugs.values():
        if f"(decisions/{name})" not in index:
            errors.append(f"docs/architecture.md: the decisions index has no link to decisions/{name}")
    for rel in cite_files(root):
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for m in SLUG_CITE_RE.finditer(text):
            for slug in re.findall(_SLUG, m.group(1)):
                if slug not in slugs:
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{rel}:{line}: cites decision {slug}, which has no {DECISIONS_DIR}/NNNN-{slug}.md")
        for r in NUMBER_CITE_RES:
            for m in r.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                cite = " ".join(m.group(0).split())
                errors.append(f"{rel}:{line}: cites a decision by number ({cite!r}): cite its slug, "
                              f"decision <slug> ({DECISIONS_DIR}/)")
    return errors


def cite_files(root):
    """Every text file of the tree that may cite a decision."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not (rel_dir == "." and d.startswith("build")))
        for name in sorted(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if (name.endswith(CITE_EXT) or name in CITE_NAMES) and rel != "bpf/vmlinux.h":
                yield rel


def main():
    root = sys.argv[1]
    errors = []
    for top in sorted(os.listdir(root)):
        if top.startswith("build") or top in SKIP_DIRS or not os.path.isdir(os.path.join(root, top)):
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if not name.endswith(SOURCE_EXT) or rel == "bpf/vmlinux.h":
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                if len(lines) > MAX_LINES:
                    errors.append(f"{rel}: {len(lines)} lines (over {MAX_LINES}: split it by concern)")
                folder = rel.split("/", 1)[0]
                if folder in PRODUCT_DIRS and name.endswith((".c", ".cc", ".h")):
                    for length, first, _ in function_lengths("".join(lines)):
                        if length > MAX_FUNCTION_LINES:
                            errors.append(f"{rel}:{first}: a function of {length} lines "
                                          f"(over {MAX_FUNCTION_LINES}: cut it into named steps)")
                if folder not in ALLOWED:
                    continue
                if folder == "core":
                    errors.extend(check_core_file(rel, lines))
                allowed = {"view", "core"} if rel in PRINTERS else ALLOWED[folder]
                if folder == "service" and rel not in ENGINE_ADAPTERS:
                    allowed = allowed - {"engine"}
                own = {p for p in PRINTERS if rel in PRINTERS}
                for n, line in enumerate(lines, 1):
                    m = include_re.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    head = inc.split("/", 1)[0]
                    if folder in ("core", "view") and (inc in LIBBPF or inc.endswith(".skel.h")):
                        errors.append(f"{rel}:{n}: {folder}/ includes libbpf or the skeleton ({inc})")
                    if inc in own:
                        continue
                    if "/" in inc and head in PROJECT_DIRS and head not in allowed and head != "bpf":
                        errors.append(f"{rel}:{n}: {folder}/ may not include {inc} "
                                      f"(allowed: {', '.join(sorted(allowed))})")
    # Paths the docs cite must exist (a renamed file leaves stale citations).
    doc_files = [os.path.join(root, "README.md")] + [
        os.path.join(root, "docs", f) for f in sorted(os.listdir(os.path.join(root, "docs"))) if f.endswith(".md")]
    ddir = os.path.join(root, DECISIONS_DIR)
    if os.path.isdir(ddir):
        doc_files += [os.path.join(ddir, f) for f in sorted(os.listdir(ddir)) if f.endswith(".md")]
    cited = re.compile(r"`([A-Za-z0-9_./-]+\.(?:cc|h|c|py|sh|md|yaml|yml|json|txt))`")
    for doc in doc_files:
        for m in cited.finditer(open(doc, encoding="utf-8").read()):
            path = m.group(1)
            if "/" in path and path.split("/", 1)[0] in CITED_DIRS and not os.path.exists(os.path.join(root, path)):
                errors.append(f"{os.path.relpath(doc, root)} cites {path}, which is not in the tree")
    errors.extend(check_decisions(root))
    for e in errors:
        print(e)
    if errors:
        print(f"check_layout: {len(errors)} violation(s)")
        return 1
    print("check_layout: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
