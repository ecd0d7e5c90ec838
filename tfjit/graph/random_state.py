"""Stateful random ops as their state plus a stateless op, so they compile bit for bit.

TF's stateful random kernels (RandomUniform, RandomStandardNormal,
TruncatedNormal, RandomUniformInt) each own a Philox generator, seeded from the
node's ``seed``/``seed2`` attrs (both 0: random seeds per kernel instance), and
on every run reserve ``256 * num_elements`` blocks from it and fill the output
from the generator at the old counter.  The fill is exactly what the
StatelessRandom*V2 kernels compute from a key and a counter, and tfjit lowers
those bit for bit (lower/random.py).  So :func:`split` rewrites

    x = RandomUniform(shape){seed, seed2}
into
    key, counter = TfjitRandomReserve(shape){seed, seed2}      (runtime/random_state.cc)
    x = StatelessRandomUniformV2(shape, key, counter, alg=Philox)

The reserve node keeps TF's state where TF keeps it (its kernel instance, one
per node per Session or instantiated function; stateful, so a Session shares it
across fetch sets by node name) and stays with TensorFlow; the stateless node
keeps the original name and is an ordinary candidate that fuses with its
consumers.  Only CPU (or unplaced) nodes are split: the reserve op has a CPU
kernel only.  tfjit-aot does not split (a compiled program has no TF kernel to
keep the state): the stateful ops stay refused there, with marking's reason.

The new nodes join the random node's v1 loop frame (the reserve reads its shape,
the alg constant waits on it).  In a v1 loop with parallel iterations, which
iteration reserves first is a race in TF's executor as much as here.

RandomShuffle becomes TfjitRandomReserve (``samples="shuffle"``: RandomShuffle's
own reservation, sized by a Shape node of the value) and StatelessShuffle
(lower/shuffle.py).  tf.random.Generator's ops (StatefulUniform*,
RngReadAndSkip) and the other sequential or rejection samplers
(ParameterizedTruncatedNormal, RandomGamma, RandomPoisson, Multinomial) are not
split.
"""
from __future__ import annotations

RESERVE_OP = "TfjitRandomReserve"
PHILOX = 1

# stateful op -> (stateless V2 op, its output dtype attr in the stateful op)
STATELESS = {
    "RandomUniform": ("StatelessRandomUniformV2", "dtype"),
    "RandomStandardNormal": ("StatelessRandomNormalV2", "dtype"),
    "TruncatedNormal": ("StatelessTruncatedNormalV2", "dtype"),
    "RandomUniformInt": ("StatelessRandomUniformIntV2", "Tout"),
    "RandomShuffle": ("StatelessShuffle", "T"),
}
_DT_INT32, _DT_INT64, _DT_UINT64 = 3, 9, 23


def reserve_name(node: str) -> str:
    return f"{node}/tfjit_rng_state"


def _alg_name(node: str) -> str:
    return f"{node}/tfjit_rng_alg"


def _on_cpu(device: str) -> bool:
    for part in device.lower().split("/"):
        if part.startswith(("device:", "gpu", "tpu", "cpu")):
            return "cpu" in part
    return True


def splittable(nd) -> bool:
    return nd.op in STATELESS and _on_cpu(nd.device)


def split(graph_def, tensor_info=None):
    """(new GraphDef, tensor_info covering the new nodes, {random node: reserve node}).

    The GraphDef is ``graph_def`` itself when it has no node to split."""
    from tensorflow.core.framework import attr_value_pb2, graph_pb2
    if not any(splittable(nd) for nd in graph_def.node):
        return graph_def, tensor_info, {}
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    reserves, values = {}, {}     # random node -> reserve node; shuffle -> its value
    for nd in list(out.node):
        if not splittable(nd):
            continue
        stateless, dtype_attr = STATELESS[nd.op]
        data = [i for i in nd.input if not i.startswith("^")]
        controls = [i for i in nd.input if i.startswith("^")]
        shuffle = nd.op == "RandomShuffle"
        res = out.node.add(name=reserve_name(nd.name), op=RESERVE_OP, device=nd.device)
        res.input.extend([_shape_of(out, nd, data[0]) if shuffle else data[0]] + controls)
        for a in ("seed", "seed2") if shuffle else ("seed", "seed2", "T"):
            if a in nd.attr:
                res.attr[a].CopyFrom(nd.attr[a])
        if shuffle:
            name, _, idx = data[0].partition(":")
            values[nd.name] = (name, int(idx) if idx else 0)
            res.attr["T"].CopyFrom(attr_value_pb2.AttrValue(type=_DT_INT64))
            res.attr["samples"].CopyFrom(attr_value_pb2.AttrValue(s=b"shuffle"))
        alg = out.node.add(name=_alg_name(nd.name), op="Const", device=nd.device)
        # after the shape's node: in a v1 loop body it stays in the loop's frame
        after = "^" + data[0].split(":")[0]
        alg.input.extend([after] + [c for c in controls if c != after])
        alg.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=_DT_INT32))
        alg.attr["value"].tensor.dtype = _DT_INT32
        alg.attr["value"].tensor.int_val.append(PHILOX)
        shape_t = nd.attr["T"].type
        out_t = nd.attr[dtype_attr].type
        keep = {k: nd.attr[k] for k in nd.attr if k.startswith("_")}
        nd.op = stateless
        del nd.input[:]
        nd.input.extend([data[0], f"{res.name}:0", f"{res.name}:1", alg.name] + data[1:] + controls)
        nd.ClearField("attr")
        if shuffle:
            nd.attr["T"].CopyFrom(attr_value_pb2.AttrValue(type=out_t))
        else:
            nd.attr["dtype"].CopyFrom(attr_value_pb2.AttrValue(type=out_t))
            nd.attr["Tshape"].CopyFrom(attr_value_pb2.AttrValue(type=shape_t))
        for k, v in keep.items():
            nd.attr[k].CopyFrom(v)
        reserves[nd.name] = res.name
    return out, _info_with(tensor_info, reserves, values), reserves


def _shape_name(node: str) -> str:
    return f"{node}/tfjit_rng_shape"


def _shape_of(out, nd, value: str) -> str:
    """A Shape node (int64) of RandomShuffle's value, which sizes its reservation."""
    shape = out.node.add(name=_shape_name(nd.name), op="Shape", device=nd.device)
    shape.input.append(value)
    shape.attr["T"].CopyFrom(nd.attr["T"])
    shape.attr["out_type"].type = _DT_INT64
    return shape.name


def _info_with(tensor_info, reserves: dict, values: dict):
    """tensor_info answering for the new nodes too."""
    if tensor_info is None:
        return None
    new = {r: ((_DT_UINT64, (1,)), (_DT_UINT64, (2,))) for r in reserves.values()}
    new.update({_alg_name(n): ((_DT_INT32, ()),) for n in reserves})
    shapes = {_shape_name(n): src for n, src in values.items()}

    def info(node: str, index: int):
        if node in new:
            return new[node][index]
        if node in shapes:            # the Shape of a shuffled value: [its rank]
            shape = tensor_info(*shapes[node])[1]
            return _DT_INT64, None if shape is None else (len(shape),)
        return tensor_info(node, index)
    return info
