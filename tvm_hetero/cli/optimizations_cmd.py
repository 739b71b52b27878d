"""`tvm-hetero optimizations`: the (device family, layer kind) -> rules table."""

from __future__ import annotations

from .. import api
from .common import print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "optimizations", help="list the optimization rules per (device kind, layer kind)",
        description="The rules each layer's kernel is scheduled with, by the kind of its "
                    "device and the kind of the layer, tried in order.")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    rows = api.optimization_table()
    if args.json:
        print_json([{"family": f, "kind": k, "rules": names} for f, k, names in rows])
        return 0
    print(f"{'device':<8}{'layer kind':<15}rules (first that applies wins)")
    for family, kind, names in rows:
        print(f"{family:<8}{kind:<15}{', '.join(names) or '(none: TVM default loops)'}")
    print()
    for name, description in api.optimization_rules().items():
        print(f"{name}: {description}")
    return 0
