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
  - no hand-written source file is over 800 lines (bpf/vmlinux.h aside);
  - every repository path the README and docs/ cite exists.
Usage: check_layout.py SOURCE_DIR"""
import os
import re
import sys

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
CITED_DIRS = set(ALLOWED) | {"bpf", "tests", "bench", "docs", "deploy", "scripts", "fuzz", "demo", "config", "cmake"}
SOURCE_EXT = (".c", ".cc", ".h", ".py", ".sh")
SKIP_DIRS = {".git", "node_modules"}

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
    cited = re.compile(r"`([A-Za-z0-9_./-]+\.(?:cc|h|c|py|sh|md|yaml|yml|json|txt))`")
    for doc in doc_files:
        for m in cited.finditer(open(doc, encoding="utf-8").read()):
            path = m.group(1)
            if "/" in path and path.split("/", 1)[0] in CITED_DIRS and not os.path.exists(os.path.join(root, path)):
                errors.append(f"{os.path.relpath(doc, root)} cites {path}, which is not in the tree")
    for e in errors:
        print(e)
    if errors:
        print(f"check_layout: {len(errors)} violation(s)")
        return 1
    print("check_layout: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
