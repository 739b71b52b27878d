"""The architecture suite before and after a change, in one timed run: every model built all on
the host CPU by two versions of tvm_hetero (a git revision and the working tree), each build
exported to a library, then both libraries loaded into one process and timed in rounds
alternating onnxruntime, the revision's build and the tree's, the best median of each.

    python benchmarks/suite_ab.py --before REV [--models a,b] [--rounds 3] [--out DIR]

The revision is checked out in a git worktree (removed afterwards) and builds in a process of
its own with that worktree first on ``PYTHONPATH``; the models come from this tree's
``tvm_hetero.testing.suite`` for both sides (written once as ONNX files that both sides load).
Every output is checked against onnxruntime (relative error at most 1e-3); a model one side
cannot build, or builds wrong, is marked and left out of that side's summary. Prints per
model the milliseconds of each and the ratios to onnxruntime, the geometric mean and the worst
of each side, the models slower after than before (by more than 5 %), and the CPU. Takes about
as long as two suite builds plus the rounds (20-40 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOLERANCE = 1e-3
SLOWER = 1.05  # after / before above this: slower (the run-to-run spread of one model)


def export_builds(names: list[str], onnx_dir: str, out: str) -> None:
    """Build each model (``onnx_dir/NAME.onnx``) all on cpu with the tvm_hetero importable
    here, export it to ``out/NAME.so``; ``out/builds.json``: build seconds or the error per
    model."""
    import onnx

    import tvm_hetero as th

    os.makedirs(out, exist_ok=True)
    devices = th.DeviceSet.parse(["cpu"])
    results = {}
    for name in names:
        start = time.perf_counter()
        try:
            model = th.load_model(onnx.load(os.path.join(onnx_dir, f"{name}.onnx")), name=name)
            compiled = th.build(model, "all:cpu", devices)
            compiled.export_library(os.path.join(out, f"{name}.so"))
            results[name] = {"build_s": time.perf_counter() - start}
        except Exception as err:  # a side that cannot build a model: recorded, not fatal
            results[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        print(f"  {name}: {results[name]}", flush=True)
        with open(os.path.join(out, "builds.json"), "w") as handle:
            json.dump(results, handle, indent=1)


def build_side(label: str, tree: str, names: list[str], onnx_dir: str, out: str) -> dict:
    """Run :func:`export_builds` in a process importing tvm_hetero from `tree`."""
    print(f"building with {label} ({tree})", flush=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [tree, os.environ.get(
        "PYTHONPATH")])))
    subprocess.run([sys.executable, os.path.abspath(__file__), "--export-only", out,
                    "--onnx-dir", onnx_dir, "--models", ",".join(names)], env=env, check=True)
    with open(os.path.join(out, "builds.json")) as handle:
        return json.load(handle)


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def build_both(args, names: list[str], out: str) -> tuple[dict, str]:
    """Build every model with the revision (in a git worktree) and with this tree, into
    ``out/before`` and ``out/after``; returns the builds and the revision's short hash."""
    import onnx

    from tvm_hetero.testing.suite import SUITE

    worktree = tempfile.mkdtemp(prefix="suite_ab_tree_")
    onnx_dir = tempfile.mkdtemp(prefix="suite_ab_models_")
    try:
        for name in names:  # this tree's models, for both sides
            onnx.save(SUITE[name]()[0], os.path.join(onnx_dir, f"{name}.onnx"))
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "-q", worktree,
                        args.before], check=True)
        revision = subprocess.run(["git", "-C", worktree, "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True, check=True).stdout.strip()
        builds = {"before": build_side(f"{args.before} ({revision})", worktree, names,
                                       onnx_dir, os.path.join(out, "before")),
                  "after": build_side("the working tree", REPO, names, onnx_dir,
                                      os.path.join(out, "after"))}
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", worktree],
                       check=False)
        shutil.rmtree(onnx_dir, ignore_errors=True)
    return builds, revision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD", help="git revision built as 'before'")
    parser.add_argument("--models", help="comma-separated suite models (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", help="keep the libraries here (default: a temporary folder)")
    parser.add_argument("--time-only", action="store_true",
                        help="time the libraries an earlier run left in --out (no builds)")
    parser.add_argument("--export-only", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--onnx-dir", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export_only:  # a build side: tvm_hetero may be a revision without the suite
        export_builds([n for n in args.models.split(",") if n], args.onnx_dir,
                      args.export_only)
        return


    import tvm_hetero as th
    from tvm_hetero.devices import host_num_cores
    from tvm_hetero.testing import max_relative_error
    from tvm_hetero.testing.suite import SUITE, alternating_best, cpu_name, suite_case

    names = [n for n in (args.models or ",".join(SUITE)).split(",") if n]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        sys.exit(f"error: unknown suite models: {', '.join(unknown)}")
    if args.time_only:
        if not args.out:
            sys.exit("error: --time-only needs --out DIR of an earlier run")
        builds, revision = {}, "built earlier"
        for side in ("before", "after"):
            with open(os.path.join(args.out, side, "builds.json")) as handle:
                builds[side] = json.load(handle)
        missing = [n for n in names if n not in builds["before"] or n not in builds["after"]]
        if missing:
            sys.exit(f"error: {args.out} has no builds of {', '.join(missing)}")
        out = args.out
    else:
        out = args.out or tempfile.mkdtemp(prefix="suite_ab_")
        builds, revision = build_both(args, names, out)

    threads = host_num_cores()
    rows = []
    for name in names:
        _, feed, _, inputs, session, want = suite_case(name, threads)
        loaded, notes = {}, []
        for side in ("before", "after"):
            if "error" in builds[side][name]:
                notes.append(f"{side}: {builds[side][name]['error']}")
                continue
            compiled = th.load(os.path.join(out, side, f"{name}.so"))
            error = max_relative_error(compiled.run(inputs), want)
            if error > TOLERANCE:
                notes.append(f"{side}: wrong (relative error {error:.2g})")
                continue
            loaded[side] = compiled
        best = alternating_best(session, feed, loaded, inputs, args.rounds, args.repeat)
        rows.append((name, best, notes))
        print(f"  timed {name}", flush=True)

    print(f"\nCPU: {cpu_name()} ({threads} threads); before = {args.before} ({revision}), "
          f"after = the working tree; best median ms of {args.rounds} alternating rounds\n")
    print(f"{'model':22s} {'ort':>9s} {'before':>9s} {'x ort':>6s} {'after':>9s} {'x ort':>6s}"
          f" {'after/before':>12s}")
    ratios: dict[str, dict[str, float]] = {"before": {}, "after": {}}
    slower = []
    for name, best, notes in rows:
        cells = []
        for side in ("before", "after"):
            ms = best.get(side, math.inf)
            if math.isfinite(ms):
                ratios[side][name] = ms / best["ort"]
                cells.append(f"{ms:9.3f} {ms / best['ort']:6.2f}")
            else:
                cells.append(f"{'-':>9s} {'-':>6s}")
        change = best.get("after", math.inf) / best.get("before", math.inf) \
            if name in ratios["before"] and name in ratios["after"] else math.nan
        if change > SLOWER:
            slower.append(f"{name} {change:.2f}")
        print(f"{name:22s} {best['ort']:9.3f} {cells[0]} {cells[1]} {change:12.2f}"
              + (f"  ({'; '.join(notes)})" if notes else ""))
    for side in ("before", "after"):
        values = ratios[side]
        if values:
            worst = max(values, key=values.get)
            print(f"{side}: geometric mean {geomean(values.values()):.2f}x onnxruntime over "
                  f"{len(values)} models; worst {worst} {values[worst]:.2f}x")
    print(f"slower after than before (> {SLOWER:.2f}x): {', '.join(slower) or 'none'}")


if __name__ == "__main__":
    main()
