#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Licensing (README, "License"): every tracked source file names its license
in an SPDX-License-Identifier line at its top, and it is the one the
project's policy gives that file:
  - the BPF programs (bpf/*.bpf.c, bpf/*.bpf.h, bench/*.bpf.c): GPL-2.0-only,
    and each BPF object's license section says "GPL" (GPL-only helpers);
  - every header that both a BPF program and user-space code include
    (found from the #include lines, so a new bpf/lw_*_abi.h is covered):
    GPL-2.0-only OR BSD-2-Clause;
  - bpf/vmlinux.h (generated from the kernel): GPL-2.0-only WITH
    Linux-syscall-note;
  - everything else: Apache-2.0.
Every license named has its text in the tree (LICENSE, LICENSES/), the
texts are Debian's where Debian has them, and the Debian copyright file
(deploy/debian/copyright, DEP-5) gives every file the same license as its
SPDX line. Files without comments or whose bytes are test input are exempt,
each kind with its reason below.
Usage: license_test.py SOURCE_DIR"""
import fnmatch
import os
import re
import subprocess
import sys

src = sys.argv[1]
errors = []

# Exempt, with why. Everything else tracked must carry an SPDX line.
EXEMPT = [
    ("*.md", "prose (README, docs): covered by the copyright file"),
    ("*/README.*", "prose"),
    ("*.json", "JSON has no comments (dashboard, npm manifests)"),
    ("*.png", "image"),
    ("fuzz/corpus/*", "fuzzer inputs: their bytes are the test"),
    ("tests/data/config/*", "config inputs whose error line numbers the tests check"),
    ("tests/data/web/*", "web-config inputs, verbatim"),
    ("tests/data/cgroup/*", "/proc/PID/cgroup captures, verbatim"),
    ("deploy/debian/conffiles", "dpkg's conffiles list has no comment syntax"),
    ("deploy/debian/copyright", "the DEP-5 copyright file itself (no comment syntax)"),
    ("deploy/debian/changelog.in", "a Debian changelog must open with its first entry (no comment syntax)"),
    ("LICENSE", "license text"),
    ("LICENSES/*", "license texts"),
]
GPL = "GPL-2.0-only"
DUAL = "GPL-2.0-only OR BSD-2-Clause"
KERNEL = "GPL-2.0-only WITH Linux-syscall-note"
APACHE = "Apache-2.0"
# Where each license's text is.
TEXTS = {"Apache-2.0": "LICENSE", "GPL-2.0-only": "LICENSES/GPL-2.0-only.txt",
         "BSD-2-Clause": "LICENSES/BSD-2-Clause.txt", "Linux-syscall-note": "LICENSES/Linux-syscall-note.txt"}
# Debian's copy of a text, where it has one: ours must be the same.
DEBIAN_TEXTS = {"LICENSE": "/usr/share/common-licenses/Apache-2.0",
                "LICENSES/GPL-2.0-only.txt": "/usr/share/common-licenses/GPL-2"}
# The DEP-5 short names of our SPDX expressions.
DEP5 = {APACHE: "Apache-2.0", GPL: "GPL-2", DUAL: "GPL-2 or BSD-2-clause",
        KERNEL: "GPL-2 with Linux-syscall-note exception"}


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z"], capture_output=True, check=True).stdout
        return sorted(f for f in out.decode().split("\0") if f and os.path.isfile(os.path.join(src, f)))
    except (subprocess.CalledProcessError, FileNotFoundError):
        sys.exit("license_test: SOURCE_DIR must be a git checkout (the tracked files are what is checked)")


def spdx_of(text):
    """The SPDX expression in the first lines (after a shebang), or None."""
    for line in text.splitlines()[:3]:
        m = re.search(r"SPDX-License-Identifier:\s*(.+?)\s*(\*/)?\s*$", line)
        if m:
            return m.group(1)
    return None


files = tracked_files()
text_of = {}
for f in files:
    try:
        text_of[f] = open(os.path.join(src, f), encoding="utf-8").read()
    except UnicodeDecodeError:
        text_of[f] = None  # binary

# Which headers the BPF side and user space both include.
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(f):
    found = set()
    for name in INCLUDE.findall(text_of.get(f) or ""):
        for cand in (os.path.normpath(os.path.join(os.path.dirname(f), name)), os.path.normpath(name),
                     os.path.normpath(os.path.join("bpf", name))):
            if cand in text_of:
                found.add(cand)
                break
    return found


def closure(roots):
    seen, todo = set(), list(roots)
    while todo:
        f = todo.pop()
        for g in includes(f):
            if g not in seen:
                seen.add(g)
                todo.append(g)
    return seen


bpf_programs = [f for f in files if f.endswith(".bpf.c")]
bpf_side = closure(bpf_programs)
user_roots = [f for f in files if re.search(r"\.(cc|c|h)$", f) and not f.endswith(".bpf.c")
              and not f.endswith(".bpf.h") and not f.startswith("bpf/")]
user_side = closure(user_roots) | set(user_roots)
shared = sorted(f for f in bpf_side & user_side if f.endswith(".h"))
if not {"bpf/leakwatch_abi.h", "bpf/lw_sampling.h"} <= set(shared):
    errors.append(f"expected bpf/leakwatch_abi.h and bpf/lw_sampling.h among the shared headers, found {shared}")


def policy(f):
    if f == "bpf/vmlinux.h":
        return KERNEL
    if f in shared or fnmatch.fnmatch(f, "bpf/lw_*_abi.h"):
        return DUAL
    if f.endswith(".bpf.c") or f.endswith(".bpf.h"):
        return GPL
    return APACHE


checked = 0
by_license = {}
for f in files:
    reason = next((why for pat, why in EXEMPT if fnmatch.fnmatch(f, pat)), None)
    if reason:
        continue
    text = text_of[f]
    if text is None:
        errors.append(f"{f}: binary file, neither exempt nor licensed (add it to EXEMPT with a reason)")
        continue
    got = spdx_of(text)
    want = policy(f)
    checked += 1
    by_license.setdefault(got, []).append(f)
    if got is None:
        errors.append(f"{f}: no SPDX-License-Identifier line in its first lines (expected {want})")
    elif got != want:
        errors.append(f"{f}: SPDX-License-Identifier: {got}, expected {want}")
    if f.endswith(".bpf.c"):
        lic = re.findall(r'char\s+LICENSE\[\]\s+SEC\("license"\)\s*=\s*"([^"]*)"', text)
        if lic != ["GPL"]:
            errors.append(f"{f}: the BPF object's license section must be \"GPL\" (GPL-only helpers), found {lic}")

# Every license named has its text; Debian's texts where Debian has them.
for expr in by_license:
    for ident in re.findall(r"[A-Za-z0-9.+-]+", expr or ""):
        if ident in ("OR", "AND", "WITH"):
            continue
        if ident not in TEXTS:
            errors.append(f"license {ident} ({expr}) has no text in LICENSE or LICENSES/")
        elif not os.path.isfile(os.path.join(src, TEXTS[ident])):
            errors.append(f"{TEXTS[ident]} missing (the text of {ident})")
for ours, debian in DEBIAN_TEXTS.items():
    if os.path.isfile(debian) and os.path.isfile(os.path.join(src, ours)):
        if open(os.path.join(src, ours), "rb").read() != open(debian, "rb").read():
            errors.append(f"{ours} differs from {debian}")
bsd = open(os.path.join(src, TEXTS["BSD-2-Clause"])).read() if os.path.isfile(os.path.join(src, TEXTS["BSD-2-Clause"])) else ""
for clause in ("1. Redistributions of source code must retain", "2. Redistributions in binary form must reproduce"):
    if clause not in bsd:
        errors.append(f"LICENSES/BSD-2-Clause.txt lacks '{clause}'")
if "3. " in bsd:
    errors.append("LICENSES/BSD-2-Clause.txt has a third clause")

# The DEP-5 copyright file: the last Files stanza matching a file gives its
# license (DEP-5: '*' matches '/' too), and it must be the SPDX line's.
copyright_path = os.path.join(src, "deploy/debian/copyright")
paragraphs = [p for p in re.split(r"\n\s*\n", open(copyright_path).read().strip()) if p.strip()]


def fields(p):
    out, key = {}, None
    for line in p.splitlines():
        if line[:1] in (" ", "\t") and key:
            out[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


header = fields(paragraphs[0])
if header.get("Format") != "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/":
    errors.append("deploy/debian/copyright: first paragraph must be the DEP-5 header (Format: ...copyright-format/1.0/)")
stanzas, standalone = [], set()
for p in paragraphs[1:]:
    fl = fields(p)
    if "Files" in fl:
        if not fl.get("Copyright") or not fl.get("License"):
            errors.append(f"copyright: Files stanza {fl['Files'].split()} lacks Copyright or License")
        stanzas.append((fl["Files"].split(), fl.get("License", "").split("\n")[0]))
    elif "License" in fl:
        name, _, body = fl["License"].partition("\n")
        if not body.strip():
            errors.append(f"copyright: standalone License: {name} has no text")
        standalone.add(name)
for _, lic in stanzas:
    for part in re.split(r"\s+or\s+", lic):
        if part not in standalone:
            errors.append(f"copyright: License {part} (in '{lic}') has no standalone License paragraph")
for f in files:
    got = spdx_of(text_of[f]) if text_of[f] else None
    if got is None:
        continue
    matching = [lic for pats, lic in stanzas if any(fnmatch.fnmatchcase(f, pat) for pat in pats)]
    if not matching:
        errors.append(f"copyright: no Files stanza covers {f}")
    elif matching[-1] != DEP5.get(got):
        errors.append(f"copyright: {f} is '{matching[-1]}' there, its SPDX line says {got} ({DEP5.get(got)})")

for e in errors:
    print("license_test:", e, file=sys.stderr)
summary = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_license.items(), key=lambda kv: -len(kv[1])))
print(f"license_test: {checked} files checked ({summary}); shared BPF/user-space headers: {', '.join(shared)}")
print("license_test: " + ("passed" if not errors else f"{len(errors)} problems"))
sys.exit(1 if errors else 0)
