"""Exports of whole real models as users write them, for ``benchmarks/real_models.py``.

    python benchmarks/real_models_export.py --model NAME --exporter torchscript|dynamo
                                            [--out out/real_models/exports] [--list]

Builds one model at its real size with seeded random weights (torchvision with
``weights=None``, transformers from its default config: nothing is downloaded), re-draws the
weights that are constant (zero heads, zero biases, layer scales of 1e-6) so that no branch
vanishes, sets the batch norms' running statistics from seeded random inputs, checks that
every output varies (over its elements and between two inputs), and exports it with
``torch.onnx.export``: ``torchscript`` is ``dynamo=False, opset_version=17``, ``dynamo`` is
``dynamo=True`` (its default opset, weights in ``NAME.dynamo.onnx.data`` beside the file).
The dynamic axes users give (batch, sequence) stay dynamic in the file. Writes into the output
directory:

- ``NAME.EXPORTER.onnx`` (and its ``.data``), or nothing where the exporter fails;
- ``NAME.EXPORTER.json``: ``status`` (``ok`` or ``not exportable``), the one-line error, the
  export seconds, the input names and the shapes to pin at load, the output names;
- ``NAME.inputs.npz``: the seeded inputs (the same for both exporters).

Needs the ``bench`` extra (torch, torchvision, transformers, onnxscript). Prints one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

EXPORTERS = ("torchscript", "dynamo")
SEED = 0


# -- the models: each returns (module, inputs as an ordered dict of tensors, output names,
#    dynamic axes by input name) ---------------------------------------------------------------

def _image(size=224):
    import torch

    return {"pixel_values": torch.randn(1, 3, size, size)}


def _torchvision(builder, size=224, **kwargs):
    def make():
        import torchvision

        module = getattr(torchvision.models, builder)(weights=None, **kwargs)
        return module, _image(size), ["logits"], {"pixel_values": {0: "batch"}}
    return make


def _deeplab():
    import torch
    import torchvision

    class Segment(torch.nn.Module):  # the dict output as one tensor
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
                weights=None, weights_backbone=None)

        def forward(self, pixel_values):
            return self.net(pixel_values)["out"]

    return Segment(), _image(256), ["out"], {"pixel_values": {0: "batch"}}


def _fasterrcnn_fpn():
    import torch
    import torchvision

    class BackboneFPN(torch.nn.Module):  # MobileNetV3 + FPN: the detector's feature maps
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
                weights=None, weights_backbone=None).backbone

        def forward(self, pixel_values):
            return tuple(self.net(pixel_values).values())

    # the detector's transform resizes a square image to 800x800
    return BackboneFPN(), _image(800), ["features_0", "features_1", "features_pool"], \
        {"pixel_values": {0: "batch"}}


def _ssdlite():
    import torch
    import torchvision

    class BackboneHead(torch.nn.Module):  # SSDlite's backbone and its box and class heads
        def __init__(self):
            super().__init__()
            net = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
                weights=None, weights_backbone=None)
            self.backbone, self.head = net.backbone, net.head

        def forward(self, pixel_values):
            out = self.head(list(self.backbone(pixel_values).values()))
            return out["bbox_regression"], out["cls_logits"]

    return BackboneHead(), _image(320), ["bbox_regression", "cls_logits"], \
        {"pixel_values": {0: "batch"}}


def _tokens(vocab, length=128, mask=True):
    import torch

    inputs = {"input_ids": torch.randint(0, vocab, (1, length))}
    if mask:
        attention = torch.ones(1, length, dtype=torch.int64)
        attention[:, -16:] = 0  # padded tail
        inputs["attention_mask"] = attention
    return inputs


_SEQ_AXES = {0: "batch", 1: "sequence"}


def _bert():
    import torch
    from transformers import BertConfig, BertModel

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = BertModel(BertConfig())

        def forward(self, input_ids, attention_mask):
            out = self.net(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    return Bert(), _tokens(30522), ["last_hidden_state", "pooler_output"], \
        {"input_ids": _SEQ_AXES, "attention_mask": _SEQ_AXES}


def _gpt2_prefill():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    class Prefill(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = GPT2LMHeadModel(GPT2Config())

        def forward(self, input_ids, attention_mask):
            return self.net(input_ids=input_ids, attention_mask=attention_mask,
                            use_cache=False).logits

    inputs = _tokens(50257, mask=False)
    inputs["attention_mask"] = torch.ones(1, 128, dtype=torch.int64)
    return Prefill(), inputs, ["logits"], {"input_ids": _SEQ_AXES, "attention_mask": _SEQ_AXES}


def _gpt2_decode(past=127):
    import torch
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    config = GPT2Config()
    layers, heads = config.n_layer, config.n_head
    head_dim = config.n_embd // heads

    class Decode(torch.nn.Module):  # one token with its KV cache in, logits and the cache out
        def __init__(self):
            super().__init__()
            self.net = GPT2LMHeadModel(config)

        def forward(self, input_ids, attention_mask, *cache):
            kv = DynamicCache()
            for i in range(layers):
                kv.update(cache[2 * i], cache[2 * i + 1], i)
            out = self.net(input_ids=input_ids, attention_mask=attention_mask,
                           past_key_values=kv, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    inputs = {"input_ids": torch.randint(0, config.vocab_size, (1, 1)),
              "attention_mask": torch.ones(1, past + 1, dtype=torch.int64)}
    axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: "total_sequence"}}
    outputs = ["logits"]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs[f"past_{kind}_{i}"] = torch.randn(1, heads, past, head_dim)
            axes[f"past_{kind}_{i}"] = {0: "batch", 2: "past_sequence"}
            outputs.append(f"present_{kind}_{i}")
    return Decode(), inputs, outputs, axes


def _t5_encoder():
    import torch
    from transformers import T5Config, T5EncoderModel

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = T5EncoderModel(T5Config())  # t5-small's sizes

        def forward(self, input_ids, attention_mask):
            return self.net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Encoder(), _tokens(32128), ["last_hidden_state"], \
        {"input_ids": _SEQ_AXES, "attention_mask": _SEQ_AXES}


def _whisper_encoder():
    import torch
    from transformers import WhisperConfig, WhisperModel

    # whisper-base: 6 layers of width 512, 8 heads, 80 mel bins, 30 s of audio (3000 frames)
    config = WhisperConfig(d_model=512, encoder_layers=6, decoder_layers=6,
                           encoder_attention_heads=8, decoder_attention_heads=8,
                           encoder_ffn_dim=2048, decoder_ffn_dim=2048, num_mel_bins=80)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = WhisperModel(config).encoder

        def forward(self, input_features):
            return self.net(input_features).last_hidden_state

    return Encoder(), {"input_features": torch.randn(1, 80, 3000)}, ["last_hidden_state"], \
        {"input_features": {0: "batch"}}


def _hf_vit():
    import torch
    from transformers import ViTConfig, ViTModel

    class ViT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = ViTModel(ViTConfig())

        def forward(self, pixel_values):
            out = self.net(pixel_values=pixel_values)
            return out.last_hidden_state, out.pooler_output

    return ViT(), _image(224), ["last_hidden_state", "pooler_output"], \
        {"pixel_values": {0: "batch"}}


def _lstm():
    import torch

    class LSTM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.LSTM(512, 512, num_layers=2)

        def forward(self, sequence):
            out, (h, c) = self.net(sequence)
            return out, h, c

    return LSTM(), {"sequence": torch.randn(64, 1, 512)}, ["output", "h", "c"], \
        {"sequence": {0: "sequence", 1: "batch"}}


MODELS = {
    "resnet50": _torchvision("resnet50"),
    "vit_b_16": _torchvision("vit_b_16"),
    "convnext_tiny": _torchvision("convnext_tiny"),
    "swin_t": _torchvision("swin_t"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large"),
    "regnet_y_1_6gf": _torchvision("regnet_y_1_6gf"),
    "deeplabv3_mnv3": _deeplab,
    "fasterrcnn_mnv3_fpn": _fasterrcnn_fpn,
    "ssdlite320_mnv3": _ssdlite,
    "bert_base": _bert,
    "gpt2_prefill": _gpt2_prefill,
    "gpt2_decode": _gpt2_decode,
    "t5_small_encoder": _t5_encoder,
    "whisper_base_encoder": _whisper_encoder,
    "hf_vit_base": _hf_vit,
    "lstm": _lstm,
}


# -- weights -----------------------------------------------------------------------------------

def redraw_constant_weights(module, generator) -> list[str]:
    """Re-draw (seeded) every floating parameter whose elements are all equal, and the
    batch-norm running statistics: weight matrices N(0, 1/fan_in), scales (norm weights, layer
    scales) 1 + 0.1 N, the rest (biases, tokens, running means) 0.1 N, running variances
    uniform in [0.5, 1.5]. Returns the names re-drawn."""
    import torch

    changed = []
    buffers = {name for name, _ in module.named_buffers()}
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if not tensor.is_floating_point() or tensor.numel() == 0:
                continue
            leaf = name.rsplit(".", 1)[-1]
            shape = tensor.shape
            if leaf == "running_var":
                tensor.copy_(0.5 + torch.rand(shape, generator=generator))
            elif leaf == "running_mean":
                tensor.copy_(0.1 * torch.randn(shape, generator=generator))
            elif name in buffers or tensor.numel() > 1 and \
                    bool((tensor != tensor.reshape(-1)[0]).any()):
                continue  # other buffers (masks, tables), and weights that already vary
            elif leaf == "weight" and tensor.dim() >= 2:
                fan_in = tensor[0].numel()
                tensor.copy_(torch.randn(shape, generator=generator) / fan_in ** 0.5)
            elif leaf in ("weight", "gamma") or "scale" in leaf:
                tensor.copy_(1 + 0.1 * torch.randn(shape, generator=generator))
            else:
                tensor.copy_(0.1 * torch.randn(shape, generator=generator))
            changed.append(name)
    return changed


def calibrate_batch_norms(module, inputs: dict, generator) -> bool:
    """Set the batch norms' running statistics to those of seeded random inputs (a batch of
    4, train mode, cumulative averages), as a trained model's norms scale its activations:
    with the default statistics a deep CNN's signal vanishes (MobileNetV3's output then
    depends on no input). Returns whether the module has batch norms."""
    import torch

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return False
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    batch = {name: torch.randn((4, *value.shape[1:]), generator=generator)
             for name, value in inputs.items()}
    module.train()
    with torch.no_grad():
        module(*batch.values())
    module.eval()
    return True


def _flat(outputs):
    import torch

    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [t for o in outputs for t in _flat(o)]


def check_outputs_vary(module, inputs: dict) -> str | None:
    """None if every float output varies over its elements and between `inputs` and a second
    seeded input; else what does not."""
    import torch

    other = {}
    gen = torch.Generator().manual_seed(SEED + 1)
    for name, value in inputs.items():
        if value.is_floating_point():
            other[name] = torch.randn(value.shape, generator=gen)
        elif name == "input_ids":
            other[name] = torch.randint(0, int(value.max()) + 1, value.shape, generator=gen)
        else:
            other[name] = value
    with torch.no_grad():
        first, second = _flat(module(*inputs.values())), _flat(module(*other.values()))
    for index, (a, b) in enumerate(zip(first, second)):
        if not a.is_floating_point():
            continue
        scale = float(a.abs().max()) + 1e-30
        if not torch.isfinite(a).all():
            return f"output {index} is not finite"
        if float(a.std()) < 1e-6 * scale:
            return f"output {index} is constant over its elements"
        if float((a - b).abs().max()) < 1e-4 * scale:
            return f"output {index} does not depend on the input"
    return None


def build(name: str):
    """The module in eval mode with seeded, re-drawn weights, its inputs, output names and
    dynamic axes; raises if an output stays constant after three draws."""
    import torch

    for attempt in range(3):
        torch.manual_seed(SEED + 10 * attempt)
        module, inputs, outputs, axes = MODELS[name]()
        module.eval()
        generator = torch.Generator().manual_seed(SEED + 10 * attempt + 1)
        redraw_constant_weights(module, generator)
        calibrate_batch_norms(module, inputs, generator)
        problem = check_outputs_vary(module, inputs)
        if problem is None:
            return module, inputs, outputs, axes, attempt
    raise RuntimeError(f"{name}: {problem} after 3 draws of its weights")


def one_line(err: BaseException) -> str:
    """The first line of the error that caused it (torch's exporter wraps the real one), with
    its type, terminal colours removed."""
    import re

    while err.__cause__ is not None:
        err = err.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def _dynamo_axes(module, inputs: dict, axes: dict) -> dict:
    """``dynamic_axes``, or for a forward taking ``*args`` (which torch cannot map names
    onto) the same axes as ``dynamic_shapes``, one entry per argument."""
    import inspect

    import torch

    kinds = [p.kind for p in inspect.signature(module.forward).parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL not in kinds:
        return {"dynamic_axes": axes}
    shapes = [{dim: torch.export.Dim.AUTO for dim in axes.get(name, {})} for name in inputs]
    fixed = kinds.index(inspect.Parameter.VAR_POSITIONAL)
    return {"dynamic_shapes": (*shapes[:fixed], tuple(shapes[fixed:]))}  # *args: one tuple


def export(name: str, exporter: str, out_dir: str) -> dict:
    """Export model `name` with `exporter` into `out_dir`; returns (and writes) its record."""
    import torch

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.{exporter}.onnx")
    module, inputs, outputs, axes, attempt = build(name)
    np.savez(os.path.join(out_dir, f"{name}.inputs.npz"),
             **{key: value.numpy() for key, value in inputs.items()})
    record = dict(model=name, exporter=exporter, path=os.path.basename(path),
                  inputs=list(inputs), input_shapes={k: list(v.shape) for k, v in inputs.items()},
                  outputs=outputs, dynamic_axes=axes, weight_draws=attempt + 1,
                  torch=torch.__version__)
    start = time.perf_counter()
    try:
        # grad mode on, as users call it (under no_grad nn.MultiheadAttention takes its fused
        # fast path, which TorchScript cannot export)
        if exporter == "torchscript":
            torch.onnx.export(module, tuple(inputs.values()), path, dynamo=False,
                              opset_version=17, input_names=list(inputs),
                              output_names=outputs, dynamic_axes=axes)
        else:
            torch.onnx.export(module, tuple(inputs.values()), path, dynamo=True,
                              input_names=list(inputs), output_names=outputs,
                              **_dynamo_axes(module, inputs, axes))
        record.update(status="ok", error=None)
    except Exception as err:  # the exporter's failure is the record, not ours
        for leftover in (path, path + ".data"):
            if os.path.exists(leftover):
                os.remove(leftover)
        record.update(status="not exportable", error=one_line(err))
        traceback.print_exc(file=sys.stderr)
    record["export_s"] = round(time.perf_counter() - start, 1)
    with open(os.path.join(out_dir, f"{name}.{exporter}.json"), "w") as handle:
        json.dump(record, handle, indent=1)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS))
    parser.add_argument("--exporter", choices=EXPORTERS, default="dynamo")
    parser.add_argument("--out", default=os.path.join("out", "real_models", "exports"))
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args()
    if args.list or not args.model:
        print("\n".join(MODELS))
        return
    record = export(args.model, args.exporter, args.out)
    print(f"{args.model} {args.exporter}: {record['status']} in {record['export_s']} s"
          + (f" ({record['error']})" if record["error"] else ""))


if __name__ == "__main__":
    main()
