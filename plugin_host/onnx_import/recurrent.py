"""ONNX LSTM, GRU and RNN: unrolled over a short static sequence length, one ABI op over a
longer or run-time one.

torch exports ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` (every layer, every direction) as the ONNX
sequence ops. Over a static length of at most :data:`UNROLLED_STEPS` the importer writes one
step per time step (while the model's unrolled steps stay within :data:`MAX_TOTAL_STEPS`, so a
file cannot make it write millions of nodes). An LSTM step is one ``lstm_cell`` (the layer op,
its weights converted once from ONNX's gate order i, o, f, c to the cell's i, f, g, o); a GRU
step is glue ops (``linear``, ``add``, ``sigmoid``, ``tanh``, ``mul``, ``sub``, ``split``)
after ONNX's equations, ``linear_before_reset`` 0 or 1, its input projection computed once for
the whole sequence; an RNN step is ``tanh`` or ``relu`` (torch's ``nonlinearity``) of that
projection plus a ``linear`` of the state. Every step reads the same weight constants, so the
artifact holds one copy whatever the length. Steps are named after the node: ``rnn/LSTM.t0``,
``rnn/LSTM.t1``, ... (``rnn/LSTM.reverse.t0`` for the reverse direction of a bidirectional
one).

Over a longer static length, or one known only at run time, each direction is one ABI ``lstm``,
``gru`` or ``rnn`` (the recurrence over the whole sequence, ``reverse`` for the reverse
direction; named ``rnn/LSTM`` and ``rnn/LSTM.reverse``), its weights converted once to the op's
gate order, its input transposed to (seq, batch, input) for layout 1, and Y, Y_h and Y_c made
of its outputs by ``unflatten`` and ``concat``; ``sequence_lens`` is then the op's ``lengths``
(checked when the call runs, as the op's rule says), and an LSTM's peepholes its ``peepholes``.

Directions forward, reverse and bidirectional; layouts 0 ``(seq, batch, input)`` and 1
``(batch, seq, input)``; initial states as run-time values or constants (absent: zeros, which
needs a static batch); ``sequence_lens`` over an unrolled length (torch's packed sequences under
the legacy exporter): each step's states kept and its output 0 where a sequence is shorter
(:meth:`_Rnn.masked`). On either path a sequence of length 0 ends with final states of 0, as
onnxruntime's kernels end it, not with a given initial state (:meth:`_Rnn.final`). An LSTM with
peepholes (``P``, not all zero) over an unrolled length is glue ops after ONNX's equations
(:func:`_lstm_with_peepholes`). Refused, naming the node and what: ``clip``, activations other
than the defaults (an RNN's: Tanh or Relu per direction), ``input_forget=1`` and a static
length of 0.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .ops import _only, _opt, _scalar, maps

__all__ = ["MAX_TOTAL_STEPS", "UNROLLED_STEPS"]

#: The longest static length an LSTM, GRU or RNN is unrolled over: a longer one is one ABI op
#: per direction, which both backends run faster from 2 steps on (64 units: at 16 steps the
#: onnxruntime backend's op, onnxruntime's own kernel, 0.04 ms against 0.13 ms unrolled, the
#: numpy backend's loop 0.17 against 0.24 ms for an LSTM, 0.26 against 0.91 ms for a GRU; at
#: 1 step the unrolled cell is a little faster). com.microsoft's DynamicQuantizeLSTM has its
#: own (:data:`.quantized_lstm.QUANTIZED_UNROLLED_STEPS`).
UNROLLED_STEPS = 1
#: The steps a model's unrolled nodes may write together (directions count): a node that would
#: pass it is one ABI op per direction instead.
MAX_TOTAL_STEPS = 8192

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
#: An RNN's activation (torch's nonlinearity) -> the ABI op
_RNN_ACTIVATIONS = {"Tanh": "tanh", "Relu": "relu"}
_DIRECTIONS = {"forward": ("",), "reverse": (".reverse",), "bidirectional": ("", ".reverse")}


def _dim(d) -> int:
    """A reshape target entry: the dim, or -1 for a run-time one (the batch)."""
    return d if type(d) is int else -1


class _Rnn:
    """What the LSTM and GRU mappers share: checks, time slicing, states and outputs."""

    def __init__(self, imp, node, attrs: dict, op: str | None = None) -> None:
        op = op or node.op_type  # the ONNX op it computes (com.microsoft's quantized: "LSTM")
        self.imp, self.node, self.op = imp, node, op
        allowed = {"hidden_size": ..., "direction": ..., "layout": ..., "activations": ...,
                   "input_forget": 0}
        _only(imp, attrs, {**allowed, "linear_before_reset": ...} if op == "GRU" else allowed)
        direction = attrs.get("direction", "forward")
        if direction not in _DIRECTIONS:
            raise imp.unsupported(f"attribute direction={direction!r} is not supported "
                                  f"(forward, reverse, bidirectional)")
        self.directions = _DIRECTIONS[direction]
        d = len(self.directions)
        acts = attrs.get("activations", _ACTIVATIONS[op] * d)
        if op == "RNN":  # one per direction, each Tanh or Relu
            if not (isinstance(acts, list) and len(acts) == d
                    and all(a in _RNN_ACTIVATIONS for a in acts)):
                raise imp.unsupported(f"attribute activations={acts!r} is not supported (one "
                                      f"per direction, each Tanh or Relu)")
        elif acts != _ACTIVATIONS[op] * d:
            raise imp.unsupported(f"attribute activations={acts!r} is not supported (only the "
                                  f"defaults {_ACTIVATIONS[op] * d!r})")
        #: the activations, one list per direction
        self.activations = [acts[i * len(acts) // d:(i + 1) * len(acts) // d] for i in range(d)]
        self.layout = attrs.get("layout", 0)
        if self.layout not in (0, 1):
            raise imp.unsupported(f"attribute layout={self.layout!r} is not supported (0, 1)")
        x = node.input[0]
        if imp.is_const(x):
            raise imp.unsupported(f"input X {x!r} is a constant; only a run-time sequence is "
                                  f"unrolled")
        shape = imp.type_of(x).shape
        if len(shape) != 3:
            raise imp.unsupported(f"input X {x!r} has shape {shape}; {op} needs 3 dims")
        self.steps = shape[self.layout]
        self.batch = shape[1 - self.layout]
        static = type(self.steps) is int
        if static and self.steps < 1:
            raise imp.unsupported(f"sequence length {self.steps}: a static sequence needs at "
                                  f"least 1 step")
        #: one ABI ``lstm``, ``gru`` or ``rnn`` per direction rather than a node per step: a
        #: run-time length, or a static one longer than :data:`UNROLLED_STEPS` or than the
        #: model's unrolled steps leave room for (:data:`MAX_TOTAL_STEPS`)
        self.sequence = not static or not self.unrolls(d)
        lens = _opt(node, 4)
        given = imp.const(lens) if lens and imp.is_const(lens) else None  # constant lengths
        #: sequence_lens (each sequence's length in the batch) where it can differ from the
        #: sequence length: each step masked (:meth:`masked`), or the ABI op's lengths
        #: (:attr:`sequence`); None where absent or all full
        self.lens = None
        if lens and not (given is not None and static and np.all(given == self.steps)):
            t = imp.type_of(lens)
            if t.dtype not in ("int32", "int64") or len(t.shape) != 1 or (
                    type(t.shape[0]) is int and type(self.batch) is int
                    and t.shape[0] != self.batch):
                raise imp.unsupported(f"sequence_lens {lens!r} of {t.dtype} {list(t.shape)}: "
                                      f"needs one integer per sequence of the batch "
                                      f"({self.batch!r})")
            if given is not None and (np.any(given < 0) or static
                                      and np.any(given > self.steps)):
                raise ModelFileError(f"sequence_lens {given.tolist()} must be in "
                                     f"[0, {self.steps}], the sequence length")
            self.lens = lens
        self._valid: dict[int, str] = {}
        #: an initial state is given (an input, or a constant not all zero): a sequence of
        #: length 0 then ends with zero states, not with it (:meth:`final`)
        self.started = False
        self._lens: str | None = None  # the lengths as (batch, 1), read once (:meth:`valid`)
        self._zero: str | None = None  # the states' dtype's 0 (:meth:`zero`)
        self._nonempty: str | None = None  # the lengths > 0, (batch, 1) (:meth:`final`)
        self.weights(attrs, shape, direction)
        peep = _opt(node, 7) if op == "LSTM" else None
        #: an LSTM's peepholes, (directions, 3 * hidden) in ONNX's order i, o, f; None where
        #: absent or all zero
        self.peepholes = None if peep is None else imp.const(peep, "P")
        if self.peepholes is not None:
            if self.peepholes.shape != (d, 3 * self.hidden) or self.peepholes.dtype != self.dtype:
                raise imp.unsupported(f"P {peep!r} of {self.peepholes.dtype} "
                                      f"{self.peepholes.shape} must be {self.dtype} "
                                      f"({d}, {3 * self.hidden})")
            if not self.peepholes.any():
                self.peepholes = None

    def unrolled_steps(self) -> int:
        """The longest static length this node is unrolled over."""
        return UNROLLED_STEPS

    def unrolls(self, d: int) -> bool:
        """Whether the static length is unrolled (its steps then counted in the model's): up
        to :meth:`unrolled_steps` steps while the model stays within :data:`MAX_TOTAL_STEPS`;
        else one ABI op per direction."""
        imp = self.imp
        total = imp.unrolled + self.steps * d
        if self.steps > self.unrolled_steps() or total > MAX_TOTAL_STEPS:
            return False
        imp.unrolled = total
        return True

    def weights(self, attrs: dict, shape: list, direction: str) -> None:
        """Read W, R and B (input 3, optional) as :attr:`w`, :attr:`r` and :attr:`b` in
        ONNX's layout, and :attr:`hidden` and :attr:`dtype` (the states' and outputs')."""
        imp, node, d, gates = self.imp, self.node, len(self.directions), _GATES[self.op]
        w, r = imp.const(node.input[1], "W"), imp.const(node.input[2], "R")
        hidden = r.shape[-1] if r.ndim == 3 else None
        if not hidden or attrs.get("hidden_size", hidden) != hidden or w.ndim != 3 or \
                w.shape != (d, gates * hidden, shape[2]) or r.shape != (d, gates * hidden, hidden):
            raise imp.unsupported(
                f"W {w.shape} and R {r.shape} must be ({d}, {gates}*hidden, input) and "
                f"({d}, {gates}*hidden, hidden) for X {shape}, direction={direction}, "
                f"hidden_size={attrs.get('hidden_size')}")
        b = self.bias(hidden)
        if w.dtype.kind != "f" or r.dtype != w.dtype or b is not None and b.dtype != w.dtype:
            raise imp.unsupported(f"W, R and B must be float of one dtype, got {w.dtype}, "
                                  f"{r.dtype}, {None if b is None else b.dtype}")
        self.hidden, self.w, self.r, self.b, self.dtype = hidden, w, r, b, w.dtype

    def bias(self, hidden: int) -> np.ndarray | None:
        """B (input 3), ``(directions, 2 * gates * hidden)``, or None where absent."""
        b = self.imp.const(self.node.input[3], "B") if _opt(self.node, 3) else None
        size = 2 * _GATES[self.op] * hidden
        if b is not None and b.shape != (len(self.directions), size):
            raise self.imp.unsupported(f"B {b.shape} must be ({len(self.directions)}, {size})")
        return b

    def constant(self, array: np.ndarray, what: str) -> str:
        return self.imp.add_constant(array, f"{self.imp.node_name}{what}")

    def blocks(self, array: np.ndarray | None, d: int, gates: str,
               what: str) -> list[str] | None:
        """Direction ``d``'s row of ``array`` (``(directions, len(gates) * hidden)``) as one
        constant per gate block, named ``what`` and the gate; None where ``array`` is."""
        if array is None:
            return None
        h = self.hidden
        return [self.constant(np.ascontiguousarray(array[d, k * h:(k + 1) * h]), f"{what}_{g}")
                for k, g in enumerate(gates)]

    def step_emitter(self, tag: str):
        """``step(op, inputs, attrs=None, n=1)``: one op of a time step (named after the node
        and ``tag``), its output, or its ``n`` outputs."""
        def step(op, inputs, attrs=None, n=1):
            out = self.imp.emit(op, inputs, [None] * n, attrs, suffix=tag)
            return out if n > 1 else out[0]
        return step

    def valid(self, t: int) -> str:
        """The bool ``(batch, 1)`` mask of the sequences at least ``t + 1`` long. The lengths
        are read once through a ``gather_elements`` from ``arange(steps + 1)``: a length
        outside [0, steps], which onnxruntime refuses, is an IndexRangeError naming the
        node."""
        imp = self.imp
        if t not in self._valid:
            [self._valid[t]] = imp.emit(
                "greater", [self.lengths(), self.constant(np.array([[t]], np.int64),
                                                          f".step{t}")],
                [None], suffix=f".valid{t}")
        return self._valid[t]

    def lengths(self) -> str:
        """sequence_lens as int64 ``(batch, 1)``, read once through a ``gather_elements`` from
        ``arange(steps + 1)`` (static length), which checks them (:meth:`valid`)."""
        imp = self.imp
        if self._lens is None:
            lens = imp.tensor(self.lens)
            if imp.types[lens].dtype != "int64":
                [lens] = imp.emit("cast", [lens], [None], {"dtype": "int64"}, suffix=".lens")
            counts = self.constant(np.arange(self.steps + 1, dtype=np.int64), ".lengths")
            [lens] = imp.emit("gather_elements", [counts, lens], [None], {"axis": 0},
                              suffix=".lens_checked")
            [self._lens] = imp.emit("reshape", [lens], [None], {"shape": [-1, 1]},
                                    suffix=".lens_column")
        return self._lens

    def masked(self, t: int, s: str, new: list[str], old: list[str]) -> tuple[str, list[str]]:
        """Step ``t``'s output and the states after it, ``new`` computed from ``old``: as they
        are without sequence_lens; with it, where a sequence is shorter than t + 1 the states
        stay ``old`` and the output is 0, as ONNX says (so the reverse direction starts at
        each sequence's own last step, and the final states are each sequence's last valid
        ones)."""
        if self.lens is None:
            return new[0], new
        imp, valid = self.imp, self.valid(t)
        kept = [imp.emit("where", [valid, n, o], [None], suffix=f"{s}.t{t}.keep{k}")[0]
                for k, (n, o) in enumerate(zip(new, old))]
        [y] = imp.emit("where", [valid, new[0], self.zero()], [None], suffix=f"{s}.t{t}.y_valid")
        return y, kept

    def zero(self) -> str:
        if self._zero is None:
            self._zero = self.constant(np.zeros((), self.dtype), ".zero")
        return self._zero

    def final(self, states: list[str], tag: str) -> list[str]:
        """Each direction's final state ``(batch, hidden)`` as onnxruntime's kernels give it:
        with sequence_lens and an initial state (:attr:`started`), 0 for a sequence of length
        0 (the ABI ops' lengths, and :meth:`masked`, keep the initial state there)."""
        if self.lens is None or not self.started:
            return states
        imp = self.imp
        if self._nonempty is None and self.sequence:  # the ABI op checks the lengths
            lens = imp.tensor(self.lens)
            [column] = imp.emit("reshape", [lens], [None], {"shape": [-1, 1]},
                                suffix=".lens_column")
            zero = self.constant(np.zeros((), imp.types[lens].dtype), ".no_steps")
            [self._nonempty] = imp.emit("greater", [column, zero], [None], suffix=".nonempty")
        elif self._nonempty is None:
            self._nonempty = self.valid(0)
        return [imp.emit("where", [self._nonempty, v, self.zero()], [None],
                         suffix=f"{s}{tag}.final")[0] for v, s in zip(states, self.directions)]

    def inputs(self, name: str, tag: str) -> list[str]:
        """The time steps of ``name`` (X or a projection of it, ``(seq, batch, k)``, layout 1
        ``(batch, seq, k)``) as ``(batch, k)`` values."""
        imp, t = self.imp, self.layout
        shape = imp.types[name].shape
        rows = [_dim(shape[1 - t]), shape[2]]
        if self.steps == 1:
            return imp.emit("reshape", [name], [None], {"shape": rows}, suffix=tag)
        parts = imp.emit("split", [name], [None] * self.steps,
                         {"axis": t, "sizes": [1] * self.steps}, suffix=tag)
        return [imp.emit("reshape", [p], [None], {"shape": rows}, suffix=f"{tag}.t{i}")[0]
                for i, p in enumerate(parts)]

    def over_the_sequence(self, op: str, order, states: list[list[str]],
                          attrs: list[dict]) -> None:
        """One ABI ``op`` per direction over the whole sequence (:attr:`sequence`), its weights
        ONNX's with the gate blocks in the ``order`` the op takes, from ``states`` (per state,
        its value per direction) with ``attrs`` (per direction), an LSTM's peepholes in the
        op's order i, f, o; then Y and the final states."""
        imp, hid, gates = self.imp, self.hidden, len(order)
        x = self.sequence_first(imp.tensor(self.node.input[0]))
        lengths = None if self.lens is None else imp.tensor(self.lens)
        ys, finals = [], [[] for _ in states]
        for d, s in enumerate(self.directions):
            w_ih = self.constant(_reorder(self.w[d], hid, order), f"{s}.weight_ih")
            w_hh = self.constant(_reorder(self.r[d], hid, order), f"{s}.weight_hh")
            b_ih = b_hh = None
            if self.b is not None:
                b_ih = self.constant(_reorder(self.b[d, :gates * hid], hid, order),
                                     f"{s}.bias_ih")
                b_hh = self.constant(_reorder(self.b[d, gates * hid:], hid, order),
                                     f"{s}.bias_hh")
            peepholes = None
            if self.peepholes is not None:  # ONNX's i, o, f
                peepholes = self.constant(_reorder(self.peepholes[d], hid, (0, 2, 1)),
                                          f"{s}.peepholes")
            outs = imp.emit(op, [x, *(state[d] for state in states), w_ih, w_hh, b_ih, b_hh,
                                 lengths, *([peepholes] if peepholes else [])],
                            [None] * (1 + len(states)), {"reverse": bool(s), **attrs[d]},
                            suffix=s)
            ys.append(outs[0])
            for final, out in zip(finals, outs[1:]):
                final.append(out)
        self.outputs(ys, finals)

    def sequence_first(self, name: str) -> str:
        """X as ``(seq, batch, input)``, the layout of the ABI's ``lstm``, ``gru`` and ``rnn``
        (layout 1 transposed)."""
        if self.layout == 0:
            return name
        return self.imp.emit("transpose", [name], [None], {"perm": [1, 0, 2]}, suffix=".x")[0]

    def initial(self, index: int, what: str) -> list[str]:
        """The initial state per direction as ``(batch, hidden)`` values."""
        imp, d, h = self.imp, len(self.directions), self.hidden
        name = _opt(self.node, index)
        want = (d, self.batch, h) if self.layout == 0 else (self.batch, d, h)
        if name is None:
            if type(self.batch) is not int:
                raise imp.unsupported(f"{what} is absent (zeros) but the batch {self.batch!r} "
                                      f"is known only at run time; give {what} as an input")
            zeros = self.constant(np.zeros((self.batch, h), self.dtype), f".{what}")
            return [zeros] * d
        shape = imp.type_of(name).shape
        if len(shape) != 3 or any(type(a) is int and type(b) is int and a != b
                                  for a, b in zip(shape, want)):
            raise imp.unsupported(f"{what} {name!r} has shape {shape}, not {want}")
        if imp.is_const(name):
            value = imp.const(name)
            self.started |= bool(value.any())
            return [self.constant(np.ascontiguousarray(
                value[i] if self.layout == 0 else value[:, i]), f"{s}.{what}")
                for i, s in enumerate(self.directions)]
        self.started = True
        parts = [imp.tensor(name)]
        if d == 2:
            parts = imp.emit("split", parts, [None, None], {"axis": self.layout, "sizes": [1, 1]},
                             suffix=f".{what}")
        return [imp.emit("reshape", [p], [None], {"shape": [_dim(self.batch), h]},
                         suffix=f"{s}.{what}")[0] for p, s in zip(parts, self.directions)]

    def order(self, direction: str) -> list[int]:
        return list(range(self.steps))[::-1 if direction else 1]

    def outputs(self, ys: list[list[str]], finals: list[list[str]]) -> None:
        """Bind Y ``(seq, dirs, batch, hidden)`` (layout 1: ``(batch, seq, dirs, hidden)``)
        from each direction's per-step states in time order, and the final states (Y_h, Y_c:
        ``(dirs, batch, hidden)``, layout 1 ``(batch, dirs, hidden)``); only those read."""
        imp, node, t = self.imp, self.node, self.layout
        wanted = [o if o and (o in imp.consumers or o in imp.graph_outputs) else None
                  for o in list(node.output) + [None] * 3]
        b, h = _dim(self.batch), self.hidden
        if self.sequence:  # each direction's y (seq, batch, hidden), states (batch, hidden)
            if wanted[0]:
                per_dir = [imp.emit("transpose", [y], [None], {"perm": [1, 0, 2]},
                                    suffix=f"{s}.y_batch_first")[0] if t else y
                           for y, s in zip(ys, self.directions)]
                per_dir = [imp.emit("unflatten", [y], [None], {"axis": t + 1, "sizes": [1, -1]},
                                    suffix=f"{s}.y")[0] for y, s in zip(per_dir, self.directions)]
                self.join(per_dir, t + 1, wanted[0], ".y")
            for k, states in enumerate(finals, start=1):
                if wanted[k]:
                    tag = ".y_h" if k == 1 else ".y_c"
                    parts = [imp.emit("unflatten", [v], [None],
                                      {"axis": t, "sizes": [1, -1]},
                                      suffix=f"{s}{tag}")[0]
                             for v, s in zip(self.final(states, tag), self.directions)]
                    self.join(parts, t, wanted[k], tag)
            return
        if wanted[0]:
            shape = [1, 1, b, h] if t == 0 else [b, 1, 1, h]
            per_dir = []
            for hs, s in zip(ys, self.directions):
                steps = [imp.emit("reshape", [v], [None], {"shape": shape},
                                  suffix=f"{s}.y.t{i}")[0] for i, v in enumerate(hs)]
                per_dir.append(steps[0] if len(steps) == 1 else
                               imp.emit("concat", steps, [None], {"axis": t}, suffix=f"{s}.y")[0])
            self.join(per_dir, t + 1, wanted[0], ".y")
        for k, states in enumerate(finals, start=1):
            if wanted[k]:
                shape = [1, b, h] if t == 0 else [b, 1, h]
                tag = ".y_h" if k == 1 else ".y_c"
                parts = [imp.emit("reshape", [v], [None], {"shape": shape}, suffix=f"{s}{tag}")[0]
                         for v, s in zip(self.final(states, tag), self.directions)]
                self.join(parts, t, wanted[k], tag)

    def join(self, parts: list[str], axis: int, out: str, tag: str) -> None:
        if len(parts) == 1:
            self.imp.alias(out, parts[0])
        else:
            self.imp.emit("concat", parts, [out], {"axis": axis}, suffix=tag)


def _reorder(a: np.ndarray, hidden: int, blocks) -> np.ndarray:
    """Gate blocks of ``hidden`` rows of ``a`` in the order ``blocks``."""
    return np.ascontiguousarray(np.concatenate([a[k * hidden:(k + 1) * hidden] for k in blocks]))


@maps("LSTM")
def _lstm(imp, node, attrs):
    rnn = _Rnn(imp, node, attrs)
    h_dim = rnn.hidden
    h0, c0 = rnn.initial(5, "initial_h"), rnn.initial(6, "initial_c")
    onnx_to_cell = (0, 2, 3, 1)  # ONNX gates i, o, f, c; lstm_cell's i, f, g(=c), o
    if rnn.sequence:
        rnn.over_the_sequence("lstm", onnx_to_cell, [h0, c0], [{}] * len(rnn.directions))
        return
    if rnn.peepholes is not None:
        _lstm_with_peepholes(imp, rnn, h0, c0)
        return
    xs = rnn.inputs(imp.tensor(node.input[0]), ".x")
    ys, finals_h, finals_c = [], [], []
    for d, s in enumerate(rnn.directions):
        w_ih = rnn.constant(_reorder(rnn.w[d], h_dim, onnx_to_cell), f"{s}.weight_ih")
        w_hh = rnn.constant(_reorder(rnn.r[d], h_dim, onnx_to_cell), f"{s}.weight_hh")
        b_ih = b_hh = None
        if rnn.b is not None:
            b_ih = rnn.constant(_reorder(rnn.b[d, :4 * h_dim], h_dim, onnx_to_cell),
                                f"{s}.bias_ih")
            b_hh = rnn.constant(_reorder(rnn.b[d, 4 * h_dim:], h_dim, onnx_to_cell),
                                f"{s}.bias_hh")
        h, c, hs = h0[d], c0[d], [None] * rnn.steps
        for t in rnn.order(s):
            step = imp.emit("lstm_cell", [xs[t], h, c, w_ih, w_hh, b_ih, b_hh], [None, None],
                            suffix=f"{s}.t{t}")
            hs[t], (h, c) = rnn.masked(t, s, step, [h, c])
        ys.append(hs)
        finals_h.append(h)
        finals_c.append(c)
    rnn.outputs(ys, [finals_h, finals_c])


def lstm_gates(step, gates: str, c: str, hidden: int, peepholes: list[str] | None = None,
               bias: list[str] | None = None) -> list[str]:
    """One LSTM step after its ``(batch, 4*hidden)`` pre-activations ``gates`` (ONNX's blocks
    i, o, f, c) and the cell state ``c``, ops emitted by ``step`` (:meth:`_Rnn.step_emitter`)
    in the order of onnxruntime's CPU kernel: to the i, f and o blocks ``P * C`` where there
    are ``peepholes`` (constants i, o, f; o's reads C'), then to each block its ``bias``
    (constants i, o, f, c) where given; sigmoid of i, f and o, tanh of c; ``C' = C * f + i *
    c``; ``H' = tanh(C') * o``. Returns [H', C']."""
    g_i, g_o, g_f, g_c = step("split", [gates], {"axis": 1, "sizes": [hidden] * 4}, 4)

    def gate(g, k, state):
        if peepholes is not None and k < 3:
            g = step("add", [g, step("mul", [state, peepholes[k]])])
        return g if bias is None else step("add", [g, bias[k]])

    i = step("sigmoid", [gate(g_i, 0, c)])
    f = step("sigmoid", [gate(g_f, 2, c)])
    cell = step("add", [step("mul", [c, f]), step("mul", [i, step("tanh", [gate(g_c, 3, c)])])])
    o = step("sigmoid", [gate(g_o, 1, cell)])
    return [step("mul", [step("tanh", [cell]), o]), cell]


def _lstm_with_peepholes(imp, rnn: _Rnn, h0: list[str], c0: list[str]) -> None:
    """An LSTM with peepholes (P), unrolled over a static length, after ONNX's equations: the
    input projection of every step at once, then per step a ``linear`` of the state, the
    gates after it (:func:`lstm_gates`): i = sigmoid(. + Pi * C), f = sigmoid(. + Pf * C),
    C' = C * f + i * tanh(c), o = sigmoid(. + Po * C'), H' = tanh(C') * o."""
    hid, x = rnn.hidden, imp.tensor(rnn.node.input[0])
    ys, finals_h, finals_c = [], [], []
    for d, s in enumerate(rnn.directions):
        b = rnn.b[d] if rnn.b is not None else None
        w_x = rnn.constant(rnn.w[d], f"{s}.weight_ih")
        b_x = None if b is None else rnn.constant(b[:4 * hid], f"{s}.bias_ih")
        xs = rnn.inputs(imp.emit("linear", [x, w_x, b_x], [None], suffix=f"{s}.x")[0], f"{s}.x")
        w_h = rnn.constant(rnn.r[d], f"{s}.weight_hh")
        b_h = None if b is None else rnn.constant(b[4 * hid:], f"{s}.bias_hh")
        peepholes = rnn.blocks(rnn.peepholes, d, "iof", f"{s}.peephole")
        h, c, hs = h0[d], c0[d], [None] * rnn.steps
        for t in rnn.order(s):
            step = rnn.step_emitter(f"{s}.t{t}")
            gates = step("add", [xs[t], step("linear", [h, w_h, b_h])])
            hs[t], (h, c) = rnn.masked(t, s, lstm_gates(step, gates, c, hid, peepholes), [h, c])
        ys.append(hs)
        finals_h.append(h)
        finals_c.append(c)
    rnn.outputs(ys, [finals_h, finals_c])


@maps("GRU")
def _gru(imp, node, attrs):
    rnn = _Rnn(imp, node, attrs)
    hid = rnn.hidden
    before_reset = attrs.get("linear_before_reset", 0)
    if before_reset not in (0, 1):
        raise imp.unsupported(f"attribute linear_before_reset={before_reset!r} is not supported")
    x = imp.tensor(node.input[0])
    h0 = rnn.initial(5, "initial_h")
    if rnn.sequence:  # ONNX gates z, r, h; the gru op's r, z, n
        rnn.over_the_sequence("gru", (1, 0, 2), [h0],
                              [{"linear_before_reset": bool(before_reset)}] * len(rnn.directions))
        return
    one = _scalar(imp, 1.0, x, f"{imp.node_name}.one")
    ys, finals = [], []
    for d, s in enumerate(rnn.directions):
        b = rnn.b[d] if rnn.b is not None else None
        w_x = rnn.constant(rnn.w[d], f"{s}.weight_ih")
        b_x = None if b is None else rnn.constant(b[:3 * hid], f"{s}.bias_ih")
        # z, r and h input projections of every step at once: (seq, batch, 3*hidden)
        xs = rnn.inputs(imp.emit("linear", [x, w_x, b_x], [None], suffix=f"{s}.x")[0], f"{s}.x")
        r_d, rb = rnn.r[d], None if b is None else b[3 * hid:]
        if before_reset:  # n = tanh(Wh x + Wbh + r * (Rh h + Rbh)): one linear over all of R
            rw, rb, tags = [r_d], [rb], [""]
        else:  # n = tanh(Wh x + Wbh + Rh (r * h) + Rbh): Rz, Rr apart from Rh
            rw, tags = [r_d[:2 * hid], r_d[2 * hid:]], ["_zr", "_n"]
            rb = [None, None] if rb is None else [rb[:2 * hid], rb[2 * hid:]]
        w_h = [rnn.constant(w, f"{s}.weight_hh{k}") for w, k in zip(rw, tags)]
        b_h = [None if v is None else rnn.constant(v, f"{s}.bias_hh{k}") for v, k in zip(rb, tags)]
        h, hs = h0[d], [None] * rnn.steps
        for t in rnn.order(s):
            def step(op, inputs, attrs=None, n=1, _t=t):
                out = imp.emit(op, inputs, [None] * n, attrs, suffix=f"{s}.t{_t}")
                return out if n > 1 else out[0]

            gx_zr, gx_n = step("split", [xs[t]], {"axis": 1, "sizes": [2 * hid, hid]}, 2)
            if h in imp.tensors:  # a constant state (zeros when absent): so is its projection
                gh = imp.tensors[h] @ rw[0].T + (0 if rb[0] is None else rb[0])
                parts = np.split(gh, [2 * hid], axis=1) if before_reset else [gh]
                gh_zr, *gh_n = [rnn.constant(p.astype(rw[0].dtype), f"{s}.t{t}.state")
                                for p in parts]
            else:
                gh = step("linear", [h, w_h[0], b_h[0]])
                gh_zr, *gh_n = (step("split", [gh], {"axis": 1, "sizes": [2 * hid, hid]}, 2)
                                if before_reset else [gh])
            z, r = step("split", [step("sigmoid", [step("add", [gx_zr, gh_zr])])],
                        {"axis": 1, "sizes": [hid, hid]}, 2)
            if before_reset:
                reset = step("mul", [r, gh_n[0]])
            else:
                reset = step("linear", [step("mul", [r, h]), w_h[1], b_h[1]])
            n = step("tanh", [step("add", [gx_n, reset])])
            # h' = (1 - z) * n + z * h, as ONNX writes it
            hs[t], [h] = rnn.masked(t, s, [step("add", [step("mul", [step("sub", [one, z]), n]),
                                                       step("mul", [z, h])])], [h])
        ys.append(hs)
        finals.append(h)
    rnn.outputs(ys, [finals])


@maps("RNN")
def _rnn(imp, node, attrs):
    """h' = f(W x + Wb + R h + Rb), f tanh or relu: the input projection of every step at
    once, then per step a ``linear`` of the state (a constant for a constant state), ``add``
    and the activation."""
    rnn = _Rnn(imp, node, attrs)
    hid = rnn.hidden
    x = imp.tensor(node.input[0])
    h0 = rnn.initial(5, "initial_h")
    if rnn.sequence:
        rnn.over_the_sequence("rnn", (0,), [h0], [
            {"nonlinearity": _RNN_ACTIVATIONS[a[0]]} for a in rnn.activations])
        return
    ys, finals = [], []
    for d, s in enumerate(rnn.directions):
        act = _RNN_ACTIVATIONS[rnn.activations[d][0]]
        b = rnn.b[d] if rnn.b is not None else None
        w_x = rnn.constant(rnn.w[d], f"{s}.weight_ih")
        b_x = None if b is None else rnn.constant(b[:hid], f"{s}.bias_ih")
        xs = rnn.inputs(imp.emit("linear", [x, w_x, b_x], [None], suffix=f"{s}.x")[0], f"{s}.x")
        r_d, rb = rnn.r[d], None if b is None else b[hid:]
        w_h = rnn.constant(r_d, f"{s}.weight_hh")
        b_h = None if rb is None else rnn.constant(rb, f"{s}.bias_hh")
        h, hs = h0[d], [None] * rnn.steps
        for t in rnn.order(s):
            if h in imp.tensors:  # a constant state (zeros when absent): so is its projection
                gh = imp.tensors[h] @ r_d.T + (0 if rb is None else rb)
                gh = rnn.constant(gh.astype(r_d.dtype), f"{s}.t{t}.state")
            else:
                [gh] = imp.emit("linear", [h, w_h, b_h], [None], suffix=f"{s}.t{t}.h")
            [pre] = imp.emit("add", [xs[t], gh], [None], suffix=f"{s}.t{t}.add")
            hs[t], [h] = rnn.masked(t, s, imp.emit(act, [pre], [None], suffix=f"{s}.t{t}"), [h])
        ys.append(hs)
        finals.append(h)
    rnn.outputs(ys, [finals])
