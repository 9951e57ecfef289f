#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""No container engine runs here, so the Dockerfile is held to what can be
checked: it is multi-stage on Debian bookworm; its build stage runs exactly
the README's build commands ("Run it in production", host steps: the same
scripts CI runs on a fresh Debian 12), and its runtime stage installs the
.deb they make with apt-get, as the README does and as tests/deploy/
deb_test.sh does in a fresh bookworm root; nothing is downloaded any other
way; the entrypoint is the packaged binary, run as the DaemonSet runs it.
Usage: check_dockerfile.py SOURCE_DIR"""
import re
import sys

import yaml

src = sys.argv[1]
errors = []
text = open(f"{src}/Dockerfile").read()
# Join continuation lines, drop comments.
logical = re.sub(r"\\\n\s*", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
stages = []
for line in logical.splitlines():
    line = line.strip()
    if not line:
        continue
    op, _, arg = line.partition(" ")
    if op.upper() == "FROM":
        stages.append({"from": arg.split()[0], "run": [], "lines": []})
    elif stages:
        stages[-1]["lines"].append((op.upper(), arg.strip()))
        if op.upper() == "RUN":
            stages[-1]["run"].append(arg.strip())
if len(stages) != 2:
    errors.append(f"expected two stages (build, runtime), got {len(stages)}")
for s in stages:
    if not re.fullmatch(r"debian:bookworm(-slim)?", s["from"]):
        errors.append(f"stage FROM {s['from']}: must be Debian bookworm")

readme = open(f"{src}/README.md").read()
m = re.search(r"## Run it in production(.*?)(\n## |\Z)", readme, re.S)
if not m:
    errors.append("README has no 'Run it in production' section")
    section = ""
else:
    section = m.group(1)
blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
host_cmds = [l.strip() for l in (blocks[0] if blocks else "").splitlines() if l.strip() and not l.strip().startswith("#")]
unsudo = [re.sub(r"^sudo ", "", c) for c in host_cmds]
build_cmds = [c for c in unsudo if c.startswith("./scripts/")]
if not build_cmds:
    errors.append("README's first 'Run it in production' block runs no ./scripts/ command")
if stages and stages[0]["run"] != build_cmds:
    errors.append(f"build stage RUNs {stages[0]['run']}, README builds with {build_cmds}: they must be the same")
deb_installs = [c for c in unsudo if re.match(r"apt-get install .*leakwatch_\*\.deb$", c)]
if len(deb_installs) != 1:
    errors.append(f"README must install the .deb with one `apt-get install ./build/leakwatch_*.deb`, has {deb_installs}")
if len(stages) == 2:
    runtime = " && ".join(stages[1]["run"])
    if not re.search(r"apt-get install (-\S+ )*/tmp/leakwatch_\*\.deb", runtime):
        errors.append("runtime stage must install the .deb with apt-get install")
    copies = [a for op, a in stages[1]["lines"] if op == "COPY"]
    if copies != ["--from=build /src/build/leakwatch_*.deb /tmp/"]:
        errors.append(f"runtime stage must copy only the .deb from the build stage, copies {copies}")
    installs = re.findall(r"apt-get install ([^&]*)", runtime)
    for inst in installs:
        names = [w for w in inst.split() if not w.startswith("-")]
        if names != ["/tmp/leakwatch_*.deb"]:
            errors.append(f"runtime stage installs {names}: only the .deb (its dependencies come with it)")
for s in stages:
    for r in s["run"]:
        if re.search(r"\b(curl|wget|pip|npm|go get|git clone)\b", r):
            errors.append(f"RUN {r}: downloads outside apt and the scripts")
entry = re.search(r'^ENTRYPOINT (\[.*\])', text, re.M)
if not entry or yaml.safe_load(entry.group(1)) != ["/usr/bin/leakwatch"]:
    errors.append("ENTRYPOINT must be [\"/usr/bin/leakwatch\"] (the packaged binary)")
cmd = re.search(r'^CMD (\[.*\])', text, re.M)
ds = yaml.safe_load(open(f"{src}/deploy/kubernetes/daemonset.yaml"))
args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
if not cmd or yaml.safe_load(cmd.group(1)) != args:
    errors.append(f"CMD must equal the DaemonSet's args {args}")

for e in errors:
    print("check_dockerfile:", e, file=sys.stderr)
print("check_dockerfile: " + ("passed" if not errors else f"{len(errors)} problems"))
sys.exit(1 if errors else 0)
