"""Structural hashes of every scheduled kernel of the suite's models, all on ``cpu`` and all on
``cuda@sm_90`` (no GPU needed: scheduling only, no code generation), to show that a change
meant to move code leaves every schedule as it was.

    python benchmarks/schedule_hashes.py --out before.json [--models a,b]
    python benchmarks/schedule_hashes.py --compare before.json

Prints the kernels whose schedule differs (or that appear or vanish), by model and device;
``--compare`` exits non-zero when any does. About 2-4 minutes for the suite on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys

from tvm_hetero.testing.scheduled import keep_scheduled
from tvm_hetero.testing.suite import SUITE

DEVICES = ("cpu", "cuda")


def kernel_hashes(model, device: str) -> dict[str, str]:
    """``{kernel: structural hash}`` of `model` built all on `device` (``cpu`` or ``cuda``,
    for sm_90), taken after scheduling."""
    import tvm_ffi

    import tvm_hetero as th

    scheduled: dict = {}
    devices = ["cpu"] if device == "cpu" else ["cpu", "cuda@sm_90"]
    try:
        th.build(model, f"all:{device}", devices,
                 extra_passes=[keep_scheduled(scheduled, stop=True)])
    except th.BuildError:
        if not scheduled:
            raise
    return {name: f"{tvm_ffi.structural_hash(func):016x}" for name, func in scheduled.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--out", help="write the hashes here")
    parser.add_argument("--compare", help="compare with hashes written before")
    args = parser.parse_args()
    if not (args.out or args.compare):
        sys.exit("error: give --out FILE or --compare FILE")
    import tvm_hetero as th

    names = [n for n in args.models.split(",") if n]
    before = None
    if args.compare:
        with open(args.compare) as handle:
            before = json.load(handle)
        names = [n for n in names if n in before]
    result: dict[str, dict[str, dict[str, str]]] = {}
    differ = 0
    for name in names:
        proto, _ = SUITE[name]()
        model = th.load_model(proto, name=name)
        result[name] = {}
        for device in DEVICES:
            try:
                result[name][device] = kernel_hashes(model, device)
            except th.HeteroError as err:
                result[name][device] = {"<error>": str(err).splitlines()[0][:200]}
            if before is not None:
                old, new = before[name].get(device, {}), result[name][device]
                changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                differ += len(changed)
                state = f"{len(changed)} of {len(new)} differ: {', '.join(changed[:6])}" \
                    if changed else f"{len(new)} kernels, the same"
                print(f"{name:22s} {device:5s} {state}", flush=True)
            else:
                print(f"{name:22s} {device:5s} {len(result[name][device])} kernels", flush=True)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1, sort_keys=True)
    if before is not None:
        print(f"kernels whose schedule differs: {differ}")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
