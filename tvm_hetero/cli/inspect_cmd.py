"""`tvm-hetero inspect MODEL`: the model's layers."""

from __future__ import annotations

from .common import add_model_args, load_cli_model, print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser("inspect", help="list a model's operator-level layers",
                                   description="Split a model into operator-level layers (one "
                                               "fused operator group each) and list them.")
    add_model_args(parser)
    parser.add_argument("--json", action="store_true", help="print the layers as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..layers import extract_layers, layers_table

    model = load_cli_model(args)
    layers = extract_layers(model.mod)
    if args.json:
        print_json({
            "model": model.name,
            "inputs": [spec.to_json() for spec in model.inputs],
            "layers": [{"name": layer.name, "kind": layer.kind, "ops": layer.op_kinds,
                        "flops": layer.flops, "param_bytes": layer.param_bytes,
                        "activation_bytes_in": layer.activation_bytes_in,
                        "activation_bytes_out": layer.activation_bytes_out,
                        "outputs": [list(t.shape) for t in layer.outputs],
                        "predecessors": layer.predecessors, "model_inputs": layer.model_inputs}
                       for layer in layers],
        })
    else:
        print(f"model {model.name}: inputs " + ", ".join(
            f"{s.name} {list(s.shape)} {s.dtype}" for s in model.inputs))
        print(layers_table(layers))
    return 0
