"""A/B of preparation options on whole suite models: each model built with the preparation
configuration's fields overridden (A: ``--a``, B: ``--b``, default: none, that is the default
configuration for the device set) and run in alternating rounds in one process (best median
of rounds), onnxruntime timed in the same rounds; prints the CPU, the target, each variant's
ms, its ratio to onnxruntime, its error and the kernels each rule scheduled that differ.

    python benchmarks/experiments/prepare_ab.py --a grouped_pixels=false [--b ...]
                                                [--models shufflenet] [--target-mcpu haswell]
                                                [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import json
from dataclasses import fields, replace

import tvm_hetero as th
from tvm_hetero.devices import host_cpu_name, host_num_cores
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.testing import max_relative_error
from tvm_hetero.testing.suite import (SUITE, add_ab_args, alternating_best, cpu_devices, cpu_name,
                                      suite_case)


def overrides(text: str) -> dict:
    """``"name=value,name=value"`` as PrepareConfig fields (bool, int or float by the field)."""
    types = {f.name: f.type for f in fields(PrepareConfig)}
    result = {}
    for item in [i for i in text.split(",") if i]:
        name, _, value = item.partition("=")
        if name not in types:
            raise SystemExit(f"Error: PrepareConfig has no field {name!r} "
                             f"(fields: {', '.join(types)})")
        kind = types[name] if isinstance(types[name], str) else types[name].__name__
        if kind == "bool":
            if value.lower() not in ("true", "false"):
                raise SystemExit(f"Error: {name} takes true or false, got {value!r}")
            result[name] = value.lower() == "true"
        else:
            try:
                result[name] = int(value) if kind == "int" else float(value)
            except ValueError:
                raise SystemExit(f"Error: {name} takes a number, got {value!r}") from None
    return result


def build_with(model, devices, **changes):
    """`model` built for `devices`, its preparation configuration's fields `changes`d."""
    for_devices = PrepareConfig.for_devices.__func__

    def patched(cls, devs, **more):
        return replace(for_devices(cls, devs, **more), **changes)

    PrepareConfig.for_devices = classmethod(patched)
    try:
        return th.build(model, "all:" + devices.devices[0].name, devices)
    finally:
        PrepareConfig.for_devices = classmethod(for_devices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="A's PrepareConfig fields: name=value,...")
    parser.add_argument("--b", default="", help="B's fields (default: none)")
    add_ab_args(parser, "shufflenet")
    args = parser.parse_args()
    variants = {"A": overrides(args.a), "B": overrides(args.b)}
    unknown = [m for m in args.models.split(",") if m and m not in SUITE]
    if unknown:
        raise SystemExit(f"Error: unknown model(s) {', '.join(unknown)}")
    threads = host_num_cores()
    devices = cpu_devices(args.target_mcpu, threads)
    print(f"CPU: {cpu_name()} ({host_cpu_name()}), {threads} threads; target "
          f"{json.dumps(devices.devices[0].target)}; best of {args.rounds} alternating rounds")
    print(f"A: {variants['A'] or 'default'}; B: {variants['B'] or 'default'}")
    print(f"{'model':<20}{'ort ms':>9}{'A ms':>9}{'B ms':>9}{'A/ort':>7}{'B/ort':>7}"
          f"{'B/A':>7}{'A err':>9}{'B err':>9}")
    notes = []
    for name in [m for m in args.models.split(",") if m]:
        proto, feed, model, inputs, session, want = suite_case(name, threads)
        built = {key: build_with(model, devices, **changes) for key, changes in variants.items()}
        best = alternating_best(session, feed, built, inputs, args.rounds, args.repeat)
        errors = {key: max_relative_error(c.run(inputs), want) for key, c in built.items()}
        print(f"{name:<20}{best['ort']:>9.3f}{best['A']:>9.3f}{best['B']:>9.3f}"
              f"{best['A'] / best['ort']:>7.2f}{best['B'] / best['ort']:>7.2f}"
              f"{best['B'] / best['A']:>7.2f}{errors['A']:>9.1e}{errors['B']:>9.1e}",
              flush=True)
        rules = {key: collections.Counter(c.stats.rules.values()) for key, c in built.items()}
        changed = sorted(r for r in set(rules["A"]) | set(rules["B"])
                         if rules["A"][r] != rules["B"][r])
        notes.append(f"{name}: kernels per rule A -> B: " + ", ".join(
            f"{r} {rules['A'][r]} -> {rules['B'][r]}" for r in changed))
    print("\n".join(notes))


if __name__ == "__main__":
    main()
