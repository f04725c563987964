#!/usr/bin/env python3
"""Draws `glimpse eval`'s eval.json as a PNG: accuracy, greedy-token agreement and teacher-forced
KL against the kept budget, one line per method, the full cache as a dashed reference line; and,
in the manner of LookaheadKV's figure 2, each method's accuracy (mean over budgets) against its
scoring overhead (mean over budgets, % of a plain prefill, log scale).

usage: plot_eval.py EVAL_JSON OUT_PNG   (needs python3-matplotlib; no other dependency)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [
    ("accuracy", "task accuracy (%)", 100.0),
    ("agreement", "greedy-token agreement (%)", 100.0),
    ("kl", "teacher-forced KL(full ‖ evicted), nats", 1.0),
]


def overhead_panel(ax, rows, methods, markers):
    for i, method in enumerate(methods):
        mine = [r for r in rows if r["method"] == method]
        overhead = sum(r["overhead_pct"] for r in mine) / len(mine)
        accuracy = 100.0 * sum(r["accuracy"] for r in mine) / len(mine)
        ax.scatter([max(overhead, 1e-3)], [accuracy], marker=markers[i % len(markers)], s=70)
        ax.annotate(method, (max(overhead, 1e-3), accuracy), textcoords="offset points",
                    xytext=(6, 4), fontsize=9)
    ax.set_xscale("log")
    ax.set_xlabel("scoring overhead (% of prefill, mean over budgets)")
    ax.set_ylabel("task accuracy (%, mean over budgets)")
    ax.grid(True, alpha=0.3, which="both")


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    rows = doc["rows"]
    full = next(r for r in rows if r["method"] == "full")
    methods = []
    for r in rows:
        if r["method"] != "full" and r["method"] not in methods:
            methods.append(r["method"])
    fig, axes = plt.subplots(1, len(PANELS) + 1, figsize=(20, 5))
    markers = "osD^vP*X"
    for ax, (key, label, scale) in zip(axes, PANELS):
        for i, method in enumerate(methods):
            points = sorted((r["budget"], r[key]) for r in rows if r["method"] == method)
            ax.plot([100 * b for b, _ in points], [scale * v for _, v in points],
                    marker=markers[i % len(markers)], linewidth=1.8, label=method)
        ax.axhline(scale * full[key], color="black", linestyle="--", linewidth=1.2,
                   label="full cache")
        ax.set_xlabel("KV budget (% of prompt entries kept)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        budgets = sorted({100 * r["budget"] for r in rows if r["method"] != "full"})
        ax.set_xticks(budgets)
        if key != "kl":
            ax.set_ylim(-3, 103)
        else:
            ax.set_ylim(bottom=0)
    overhead_panel(axes[-1], rows, methods, markers)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=10, frameon=False)
    n_tasks = full.get("tasks", "?")
    fig.suptitle(f"glimpse eval: {n_tasks} tasks, seed {doc.get('seed', '?')}, "
                 f"{doc.get('date', '')}", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
