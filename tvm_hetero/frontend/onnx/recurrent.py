"""ONNX's recurrent layers (LSTM, GRU, RNN), which TVM 0.27's ONNX importer does not convert.

Each layer is unrolled over its (static) sequence: the input projection of every step is one
matmul over the whole sequence, split into the steps' rows by one kernel (GRU's (z, r) and h
columns apart); the recurrence weights are sliced once per direction; then each step is a
matmul of the hidden state with the recurrence weights and the gates' elementwise math, all
plain Relax ops that the optimization rules schedule like any other. Covered: every direction
(forward, reverse, bidirectional), both layouts, biases, initial states, peepholes,
``input_forget``, ``clip``, ``linear_before_reset``, ``sequence_lens`` (steps past a batch
entry's length keep its state and output zeros, which is also right for the reverse
direction: it starts at the entry's last step), and the activation functions the spec lists.
Checked against the onnx package's 18 recurrent node cases and onnxruntime
(``tests/frontend/onnx/test_recurrent.py``).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from .index_guard import static_dims
from .registry import fix, node_name

#: the spec's activation functions: (alpha default, beta default); None where the function
#: takes no such parameter
_ACTIVATIONS = {
    "sigmoid": (None, None), "tanh": (None, None), "relu": (None, None),
    "softsign": (None, None), "softplus": (None, None),
    "hardsigmoid": (0.2, 0.5), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "elu": (1.0, None), "affine": (1.0, 0.0), "scaledtanh": (1.0, 1.0),
}

_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                        "RNN": ("Tanh",)}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _activations(op_type: str, attrs, directions: int, node: str, dtype: str):
    """One list of callables (Relax expr -> expr) per direction."""
    from tvm import relax

    names = [_text(n) for n in attrs.get("activations", ())] \
        or list(_DEFAULT_ACTIVATIONS[op_type]) * directions
    per_direction = len(_DEFAULT_ACTIVATIONS[op_type])
    if len(names) != per_direction * directions:
        raise ModelError(f"{op_type} (node {node}) has {len(names)} activations; it takes "
                         f"{per_direction} per direction ({per_direction * directions})")
    alphas = list(attrs.get("activation_alpha", ()))
    betas = list(attrs.get("activation_beta", ()))

    def make(name: str):
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ModelError(f"{op_type} (node {node}): unknown activation function {name}")
        alpha_default, beta_default = _ACTIVATIONS[key]
        # the parameters are consumed in order by the functions that take them
        alpha = (alphas.pop(0) if alphas else alpha_default) if alpha_default is not None \
            else None
        beta = (betas.pop(0) if betas else beta_default) if beta_default is not None else None

        def apply(x):
            def const(v):
                return relax.const(v, dtype)

            if key == "sigmoid":
                return relax.op.sigmoid(x)
            if key == "tanh":
                return relax.op.tanh(x)
            if key == "relu":
                return relax.op.nn.relu(x)
            if key == "softsign":
                return x / (const(1.0) + relax.op.abs(x))
            if key == "softplus":
                return relax.op.log(const(1.0) + relax.op.exp(x))
            if key == "hardsigmoid":
                return relax.op.clip(const(alpha) * x + const(beta), 0.0, 1.0)
            if key == "leakyrelu":
                return relax.op.where(relax.op.less(x, const(0.0)), const(alpha) * x, x)
            if key == "thresholdedrelu":
                return relax.op.where(relax.op.greater(x, const(alpha)), x, const(0.0))
            if key == "elu":
                return relax.op.where(relax.op.less(x, const(0.0)),
                                      const(alpha) * (relax.op.exp(x) - const(1.0)), x)
            if key == "affine":
                return const(alpha) * x + const(beta)
            return const(alpha) * relax.op.tanh(const(beta) * x)  # scaledtanh

        return apply

    funcs = [make(name) for name in names]
    return [funcs[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


class _Layer:
    """The shared setup of one recurrent node: shapes, weights per direction, options."""

    def __init__(self, op_type, importer, inputs, attrs):
        from tvm import relax

        self.op_type, self.bb = op_type, importer.bb
        self.node = node_name(attrs)
        what = f"{op_type} (node {self.node})"
        x, w, r = inputs[0], inputs[1], inputs[2]
        if x is None or w is None or r is None:
            raise ModelError(f"{what} needs its X, W and R inputs")
        self.dtype = str(x.ty.dtype)
        self.batch_first = int(attrs.get("layout", 0)) == 1
        if self.batch_first:
            x = relax.op.permute_dims(x, [1, 0, 2])
            x = self.bb.normalize(x)
        self.seq, self.batch, self.features = static_dims(x, what)
        self.directions, rows, self.hidden = static_dims(r, what)
        gates = _GATES[op_type]
        if rows != gates * self.hidden or "hidden_size" in attrs \
                and int(attrs["hidden_size"]) != self.hidden:
            raise ModelError(f"{what}: R has shape {static_dims(r, what)}, not "
                             f"[directions, {gates} * hidden_size, hidden_size]")
        direction = _text(attrs.get("direction", "forward"))
        expected = {"forward": 1, "reverse": 1, "bidirectional": 2}.get(direction)
        if expected is None or expected != self.directions:
            raise ModelError(f"{what}: direction {direction!r} with {self.directions} "
                             "direction(s) of weights")
        self.reverse = [False, True] if direction == "bidirectional" \
            else [direction == "reverse"]
        self.x, self.w, self.r, self.b = x, w, r, inputs[3]
        self.activations = _activations(op_type, attrs, self.directions, self.node,
                                        self.dtype)
        self.clip = attrs.get("clip")
        self.mask = None
        if inputs[4] is not None:  # sequence_lens: [batch] int32
            steps = relax.op.astype(inputs[4], "int64")
            self.mask = [self.bb.normalize(relax.op.expand_dims(relax.op.less(
                relax.const(t, "int64"), steps), [1])) for t in range(self.seq)]
        self.initial = {}
        for name, index in (("h", 5), ("c", 6)):
            value = inputs[index]
            if value is not None and self.batch_first:
                value = self.bb.normalize(relax.op.permute_dims(value, [1, 0, 2]))
            self.initial[name] = value

    def direction(self, d: int, tensor):
        """Direction ``d`` of a [directions, ...] tensor."""
        from tvm import relax

        if tensor is None:
            return None
        return self.bb.normalize(relax.op.squeeze(
            relax.op.strided_slice(tensor, [0], [d], [d + 1]), [0]))

    def state(self, name: str, d: int):
        from tvm import relax

        value = self.initial.get(name)
        if value is None:
            return relax.const(np.zeros([self.batch, self.hidden], self.dtype), self.dtype)
        return self.direction(d, value)

    def projections(self, d: int):
        """(the input projection of every step [seq * batch, G*H] with W's bias added,
        R^T [H, G*H], R's bias [G*H] or None)."""
        from tvm import relax

        gates_h = _GATES[self.op_type] * self.hidden
        w_t = relax.op.permute_dims(self.direction(d, self.w), [1, 0])
        x = relax.op.reshape(self.x, [self.seq * self.batch, self.features])
        projected = relax.op.matmul(x, w_t)
        r_bias = None
        if self.b is not None:
            bias = self.direction(d, self.b)
            projected = projected + relax.op.strided_slice(bias, [0], [0], [gates_h])
            r_bias = self.bb.normalize(relax.op.strided_slice(bias, [0], [gates_h],
                                                              [2 * gates_h]))
        projected = self.bb.normalize(projected)
        r_t = self.bb.normalize(relax.op.permute_dims(self.direction(d, self.r), [1, 0]))
        return projected, r_t, r_bias

    def column_parts(self, tensor, axis: int, columns: list[int]):
        """`tensor` cut at `columns` along `axis` by one split: a tuple of its parts."""
        from tvm import relax

        parts = self.bb.normalize(relax.op.split(tensor, list(columns), axis=axis))
        return tuple(self.bb.normalize(relax.TupleGetItem(parts, i))
                     for i in range(len(columns) + 1))

    def step_inputs(self, projected, columns: list[int] = ()):
        """Each step's rows [batch, G*H] of the input projection, from one split whose outputs
        the steps' kernels read (a slice per step was a kernel per step); with `columns`
        (indices of the gate columns), a tuple per step of those column ranges."""
        from tvm import relax

        def by_step(tensor):
            if self.seq == 1:
                return [tensor]
            parts = self.bb.normalize(relax.op.split(tensor, self.seq, axis=0))
            return [relax.TupleGetItem(parts, t) for t in range(self.seq)]

        if not columns:
            return by_step(projected)
        return list(zip(*(by_step(part) for part in self.column_parts(projected, 1, columns))))

    def clipped(self, x):
        from tvm import relax

        if self.clip is None:
            return x
        return relax.op.clip(x, -float(self.clip), float(self.clip))

    def gate(self, tensor, index: int):
        """Gate ``index`` (``hidden`` columns each) of a [batch, G*H] tensor."""
        from tvm import relax

        h = self.hidden
        return relax.op.strided_slice(tensor, [1], [index * h], [(index + 1) * h])

    def keep(self, t: int, new, old):
        """``new`` where step ``t`` is inside the batch entry's sequence, else ``old``."""
        from tvm import relax

        return new if self.mask is None else relax.op.where(self.mask[t], new, old)

    def finish(self, outputs, finals, attrs):
        """The node's outputs (Y, Y_h[, Y_c]) in the node's layout, as many as it names."""
        from tvm import relax

        bb = self.bb
        per_direction = [relax.op.stack(steps, axis=0) for steps in outputs]  # [seq, b, h]
        y = relax.op.stack(per_direction, axis=1)  # [seq, directions, batch, hidden]
        states = [relax.op.stack(list(values), axis=0) for values in zip(*finals)]
        if self.batch_first:
            y = relax.op.permute_dims(y, [2, 0, 1, 3])
            states = [relax.op.permute_dims(s, [1, 0, 2]) for s in states]
        results = [bb.normalize(y)] + [bb.normalize(s) for s in states]
        count = attrs["tvm_custom"]["num_outputs"]
        return results[0] if count == 1 else relax.Tuple(results[:count])


def _run(op_type, importer, inputs, attrs, step, gate_groups: tuple[int, ...] = ()):
    """Unroll every direction with ``step(layer, d, acts, x_t, r_t, r_bias, t, states)``
    (``x_t``: the step's rows of the input projection, `Layer.step_inputs`)
    -> (h_out, new states tuple). With `gate_groups` (the gates after which to cut: GRU's (2,)
    reads its (z, r) and h gates in two kernels) ``x_t``, ``r_t`` and ``r_bias`` are tuples of
    those groups' columns, cut once per direction: a slice per step became a folded copy of
    the weights per step (the suite's GRU: 96 MB for 4.5 MB of weights)."""
    from tvm import relax

    layer = _Layer(op_type, importer, inputs, attrs)
    columns = [gate * layer.hidden for gate in gate_groups]
    outputs, finals = [], []
    for d in range(layer.directions):
        projected, r_t, r_bias = layer.projections(d)
        inputs = layer.step_inputs(projected, columns)
        if columns:
            r_t = layer.column_parts(r_t, 1, columns)
            r_bias = None if r_bias is None else layer.column_parts(r_bias, 0, columns)
        states = (layer.state("h", d),) + ((layer.state("c", d),) if op_type == "LSTM" else ())
        steps: list = [None] * layer.seq
        order = range(layer.seq - 1, -1, -1) if layer.reverse[d] else range(layer.seq)
        for t in order:
            x_t = inputs[t]
            h_new, new_states = step(layer, d, layer.activations[d], x_t, r_t, r_bias, t, states)
            states = tuple(layer.bb.normalize(layer.keep(t, new, old))
                           for new, old in zip(new_states, states))
            zero = relax.const(np.zeros([], layer.dtype), layer.dtype)
            steps[t] = layer.bb.normalize(layer.keep(t, h_new, zero))
        outputs.append(steps)
        finals.append(states)
    return layer.finish(outputs, finals, attrs)


def _peephole(layer, inputs, d: int, index: int):
    from tvm import relax

    if inputs[7] is None:
        return None
    p = layer.direction(d, inputs[7])
    h = layer.hidden
    return layer.bb.normalize(relax.op.strided_slice(p, [0], [index * h], [(index + 1) * h]))


# onnx node cases test_lstm_* (6): LSTM is not in TVM 0.27's converter map
@fix("LSTM")
def _lstm(importer, inputs, attrs, opset):
    from tvm import relax

    input_forget = int(attrs.get("input_forget", 0)) == 1

    def step(layer, d, acts, x_t, r_t, r_bias, t, states):
        f_act, g_act, h_act = acts
        h, c = states
        gates = x_t + relax.op.matmul(h, r_t)
        if r_bias is not None:
            gates = gates + r_bias
        gates = layer.bb.normalize(gates)
        p_i, p_o, p_f = (_peephole(layer, inputs, d, k) for k in range(3))
        i = layer.gate(gates, 0)  # ONNX's gate order: i, o, f, c
        if p_i is not None:
            i = i + p_i * c
        i = f_act(layer.clipped(i))
        if input_forget:
            f = relax.const(1.0, layer.dtype) - i
        else:
            f = layer.gate(gates, 2)
            if p_f is not None:
                f = f + p_f * c
            f = f_act(layer.clipped(f))
        c_new = layer.bb.normalize(f * c + i * g_act(layer.clipped(layer.gate(gates, 3))))
        o = layer.gate(gates, 1)
        if p_o is not None:
            o = o + p_o * c_new
        o = f_act(layer.clipped(o))
        h_new = layer.bb.normalize(o * h_act(c_new))
        return h_new, (h_new, c_new)

    return _run("LSTM", importer, inputs, attrs, step)


# onnx node cases test_gru_* (6): GRU is not in TVM 0.27's converter map
@fix("GRU")
def _gru(importer, inputs, attrs, opset):
    from tvm import relax

    linear_before_reset = int(attrs.get("linear_before_reset", 0)) != 0
    def step(layer, d, acts, x_t, r_t, r_bias, t, states):
        f_act, g_act = acts
        (h,) = states
        (x_zr, x_h), (r_zr, r_h) = x_t, r_t  # the (z, r) and h gates' columns
        b_zr, b_h = (None, None) if r_bias is None else r_bias
        recurrent = relax.op.matmul(h, r_zr)
        if b_zr is not None:
            recurrent = recurrent + b_zr
        zr = layer.bb.normalize(x_zr + recurrent)
        z = f_act(layer.clipped(layer.gate(zr, 0)))  # ONNX's gate order: z, r, h
        r = f_act(layer.clipped(layer.gate(zr, 1)))
        if linear_before_reset:
            candidate = relax.op.matmul(h, r_h)
            if b_h is not None:
                candidate = candidate + b_h
            candidate = r * candidate
        else:
            candidate = relax.op.matmul(r * h, r_h)
            if b_h is not None:
                candidate = candidate + b_h
        h_tilde = g_act(layer.clipped(x_h + candidate))
        one = relax.const(1.0, layer.dtype)
        h_new = layer.bb.normalize((one - z) * h_tilde + z * h)
        return h_new, (h_new,)

    return _run("GRU", importer, inputs, attrs, step, gate_groups=(2,))


# onnx node cases test_simple_rnn_*, test_rnn_seq_length (6)
@fix("RNN")
def _rnn(importer, inputs, attrs, opset):
    from tvm import relax

    def step(layer, d, acts, x_t, r_t, r_bias, t, states):
        (h,) = states
        value = x_t + relax.op.matmul(h, r_t)
        if r_bias is not None:
            value = value + r_bias
        h_new = layer.bb.normalize(acts[0](layer.clipped(value)))
        return h_new, (h_new,)

    return _run("RNN", importer, inputs, attrs, step)
