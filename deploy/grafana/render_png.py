#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Draws deploy/grafana/leakwatch.json's panels as a PNG from a real
Prometheus, for the docs (docs/dashboard.png). Grafana is not packaged in
Debian, so this is not Grafana's rendering: it runs each panel's queries
(template variables substituted) over a time range and lays the results out
on the dashboard's grid with matplotlib: lines for time series, the last
value for stats, rows of values for tables. Panels without data say so.

Usage: render_png.py --prometheus URL --dashboard leakwatch.json
         --var instance=HOST:PORT --var process_instance=HOST:PORT --var pid=PID \
         [--var "pid:text=COMM (PID)"] --var __rate_interval=20s
         --start UNIX --end UNIX --out dashboard.png
(tests/integration/prometheus_test.cc runs it when LW_RENDER_DASHBOARD_PNG
names the output file.)"""
import argparse
import json
import re
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def substitute(expr, variables):
    # ${name:text} (the picker's text: a `name:text` variable if given, else
    # the value), then ${name} and $name, longest names first.
    expr = re.sub(r"\$\{(\w+):text\}", lambda m: variables.get(m.group(1) + ":text", variables.get(m.group(1), m.group(0))), expr)
    for name in sorted((n for n in variables if ":" not in n), key=len, reverse=True):
        expr = expr.replace("${%s}" % name, variables[name]).replace("$" + name, variables[name])
    return expr


def query(base, path, params):
    url = base + path + "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as reply:
        body = json.load(reply)
    if body.get("status") != "success":
        raise RuntimeError(f"{url}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in labels.items() if k != "__name__")[:60]
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def human(v, unit):
    if unit == "bytes":
        for u in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(v) < 1024:
                return f"{v:.1f} {u}"
            v /= 1024
    if unit == "Bps":
        return human(v, "bytes") + "/s"
    if unit == "percentunit":
        return f"{v * 100:.2f}%"
    return f"{v:.3g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--var", action="append", default=[])
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    variables = dict(v.split("=", 1) for v in args.var)
    dash = json.load(open(args.dashboard))
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"])
    scale = 0.42  # inches per grid unit of height; 24 columns across 20 inches
    fig = plt.figure(figsize=(20, height * scale), facecolor="#111217")
    step = max(1.0, (args.end - args.start) / 200)
    for r in rows:
        g = r["gridPos"]
        fig.text(0.005, 1 - (g["y"] + 0.5) / height, substitute(r["title"], variables), color="#ccccdc",
                 fontsize=13, weight="bold", va="center")
    for p in panels:
        g = p["gridPos"]
        ax = fig.add_axes([g["x"] / 24 + 0.004, 1 - (g["y"] + g["h"]) / height + 0.012,
                           g["w"] / 24 - 0.008, g["h"] / height - 0.03], facecolor="#181b1f")
        ax.set_title(p["title"], color="#ccccdc", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for s in ax.spines.values():
            s.set_color("#2c3235")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        texts, drew = [], False
        # Queries Grafana puts on a right-hand axis (an override by refId).
        right = {o["matcher"]["options"] for o in p.get("fieldConfig", {}).get("overrides", [])
                 if o["matcher"]["id"] == "byFrameRefID"
                 and {"id": "custom.axisPlacement", "value": "right"} in o["properties"]}
        twin = ax.twinx() if right and p["type"] == "timeseries" else None
        if twin is not None:
            twin.tick_params(colors="#8e8e8e", labelsize=7)
        for t in p["targets"]:
            expr = substitute(t["expr"], variables)
            target_ax = twin if twin is not None and t["refId"] in right else ax
            if p["type"] == "timeseries":
                for series in query(args.prometheus, "/api/v1/query_range",
                                    {"query": expr, "start": args.start, "end": args.end, "step": step})[:10]:
                    xs = [float(v[0]) - args.start for v in series["values"]]
                    ys = [float(v[1]) for v in series["values"]]
                    target_ax.plot(xs, ys, linewidth=1.2, linestyle="--" if target_ax is twin else "-",
                                   color=None if target_ax is ax else "#f2495c",
                                   label=legend(t.get("legendFormat"), series["metric"])[:48])
                    drew = True
            else:
                for series in query(args.prometheus, "/api/v1/query", {"query": expr, "time": args.end})[:8]:
                    m = series["metric"]
                    value = float(series["value"][1])
                    name = m.get("site") or legend(t.get("legendFormat"), m)
                    texts.append((t["refId"], name, value))
        if p["type"] == "timeseries":
            if drew:
                ax.legend(fontsize=6, loc="upper left", facecolor="#181b1f", labelcolor="#ccccdc", framealpha=0.6)
                if twin is not None and twin.lines:
                    twin.legend(fontsize=6, loc="lower right", facecolor="#181b1f", labelcolor="#ccccdc",
                                framealpha=0.6)
                ax.set_xlabel("seconds", color="#8e8e8e", fontsize=7)
        elif p["type"] == "stat" and texts:
            ax.set_xticks([]), ax.set_yticks([])
            ax.text(0.5, 0.45, " / ".join(human(v, unit) for _, _, v in texts), color="#73bf69", fontsize=20,
                    ha="center", va="center", transform=ax.transAxes)
        elif texts:
            ax.set_xticks([]), ax.set_yticks([])
            lines = [f"{ref}  {name[:70]:<70}  {v:.6g}" for ref, name, v in texts[:12]]
            ax.text(0.01, 0.95, "\n".join(lines), color="#ccccdc", fontsize=7, family="monospace", va="top",
                    transform=ax.transAxes)
        if not drew and not texts:
            ax.set_xticks([]), ax.set_yticks([])
            ax.text(0.5, 0.5, "No data", color="#8e8e8e", fontsize=12, ha="center", va="center",
                    transform=ax.transAxes)
    fig.text(0.995, 0.002, "Rendered from Prometheus by deploy/grafana/render_png.py (not Grafana)",
             color="#8e8e8e", fontsize=8, ha="right")
    fig.savefig(args.out, dpi=80, facecolor=fig.get_facecolor())


if __name__ == "__main__":
    main()
