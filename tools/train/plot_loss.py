#!/usr/bin/env python3
"""Loss curve PNG from a train.py log.json (needs matplotlib; the GPU machine may not have it, so this
also runs here afterwards).

    python3 tools/train/plot_loss.py OUT/tiny-block/log.json [more log.json ...] [--out loss.png]
"""
import argparse
import json
import os


def plot(log_paths, out_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if isinstance(log_paths, str):
        log_paths = [log_paths]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for path in log_paths:
        with open(path) as fh:
            log = json.load(fh)
        steps = [r["step"] for r in log["curve"]]
        label = log["model"] if len(log_paths) > 1 else "train"
        ax.plot(steps, [r["ce_masked"] for r in log["curve"]], label=f"{label}: train CE (predicted tokens)")
        if log.get("val"):
            ax.plot([r["step"] for r in log["val"]], [r["ce_masked"] for r in log["val"]], "o--", ms=3,
                    label=f"{label}: val CE (held-out documents)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    title = log["model"] + f" ({log['family']}, {log['params'] / 1e6:.1f}M params)" if len(log_paths) == 1 else "loss"
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.out:
        plot(args.logs, args.out)
        print(args.out)
    else:
        for p in args.logs:
            out = os.path.join(os.path.dirname(p), "loss.png")
            plot(p, out)
            print(out)


if __name__ == "__main__":
    main()
