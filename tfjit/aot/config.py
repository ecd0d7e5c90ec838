"""tfcompile's ``tf2xla.Config``: which tensors are fed and fetched, with their shapes.

The file format is tfcompile's own (``tensorflow/compiler/tf2xla/tf2xla.proto``),
in text form (``*.pbtxt``/``*.config.pbtxt``) or binary, so a config written for
tfcompile works unchanged::

    feed  { id { node_name: "x" } shape { dim { size: 2 } dim { size: 3 } } name: "x" }
    fetch { id { node_name: "out" output_index: 0 } name: "out" }

The installed TensorFlow ships the generated message (``tf2xla_pb2``), so it
is used rather than a private copy of the schema: a config that tfcompile
accepts parses here the same way, including fields tfjit then refuses
(``variable``).  Everything is validated before any graph is read, and every
error names the feed or fetch it is about.
"""
from __future__ import annotations

import dataclasses
import re

from tfjit import dtypes as dt


class AotError(Exception):
    """A user-facing error of ahead-of-time compilation (bad config, graph or op)."""


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One feed or fetch: the graph tensor, its C name, and (feeds) its static shape."""
    node: str
    index: int
    name: str                 # valid C identifier, used for accessors in the header
    shape: tuple | None       # feeds: fully known dims; fetches: None (inferred)
    dtype: dt.DType | None    # None: take it from the graph

    @property
    def tensor(self) -> str:
        return f"{self.node}:{self.index}"


@dataclasses.dataclass(frozen=True)
class Spec:
    feeds: list
    fetches: list


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The header's class has static arg_name(i), arg_type(i), ... and arg_data(i): a feed
# or fetch with one of these names would give an accessor that collides with them.
RESERVED = frozenset({"name", "type", "size", "rank", "shape", "data"})


def c_identifier(text: str) -> str:
    """``text`` made into a C identifier (for names taken from SavedModel signatures)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", text) or "_"
    if out[0].isdigit():
        out = "_" + out
    return out + "_" if out in RESERVED else out


def _dtype(enum: int, what: str) -> dt.DType | None:
    if enum == 0:      # DT_INVALID: not given
        return None
    d = dt.from_tf_enum(enum)
    if d is None:
        from tensorflow.core.framework import types_pb2
        raise AotError(f"{what}: tfjit cannot compile tensors of type "
                       f"{types_pb2.DataType.Name(enum)}")
    if d.is_complex:     # the graph may compute complex values inside; its edges are real
        raise AotError(f"{what}: tfjit-aot does not take or return {d.numpy().name} tensors "
                       "(the header has no complex type); pass the real and imaginary parts "
                       "as two feeds (tf.complex) or fetch tf.math.real/imag")
    return d


def _shape(proto, what: str) -> tuple:
    """A feed's shape; tfcompile reads a missing shape as a scalar, and so does this."""
    if proto.unknown_rank:
        raise AotError(f"{what}: the shape has unknown rank; AOT compilation needs a fully "
                       "known shape for every feed")
    dims = tuple(int(d.size) for d in proto.dim)
    if any(d < 0 for d in dims):
        shown = "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"
        raise AotError(f"{what}: shape {shown} is not fully known; AOT compilation needs a "
                       "static size for every dimension of every feed")
    return dims


def from_proto(config) -> Spec:
    """Validates a ``tf2xla_pb2.Config`` and returns its feeds and fetches."""
    if len(config.variable):
        names = ", ".join(v.node_name for v in config.variable)
        raise AotError(f"config declares variables ({names}); tfjit-aot compiles frozen graphs "
                       "only: fold variables into constants first (the saved_model mode does this)")
    if not len(config.fetch):
        raise AotError("config has no fetch: nothing to compute")
    feeds, fetches, used = [], [], {}
    for kind, items, out in (("feed", config.feed, feeds), ("fetch", config.fetch, fetches)):
        prefix = "arg" if kind == "feed" else "result"
        for k, item in enumerate(items):
            if not item.id.node_name:
                raise AotError(f"{kind} {k}: id.node_name is empty")
            if item.id.output_index < 0:
                raise AotError(f"{kind} {k} ({item.id.node_name}): negative output_index")
            what = f"{kind} '{item.id.node_name}:{item.id.output_index}'"
            name = item.name or f"{prefix}{k}"
            if not _IDENT.match(name):   # accessors are arg_<name>: C keywords are fine
                raise AotError(f"{what}: name {name!r} is not a valid C identifier")
            if name in RESERVED:
                raise AotError(f"{what}: name {name!r} is reserved (the generated class has "
                               f"{prefix}_{name}(i)); choose another")
            if (kind, name) in used:
                raise AotError(f"{what}: name {name!r} is also used by {used[(kind, name)]}")
            used[(kind, name)] = what
            shape = _shape(item.shape, what) if kind == "feed" else None
            out.append(Tensor(item.id.node_name, item.id.output_index, name, shape,
                              _dtype(item.type, what)))
    seen = {}
    for f in feeds:
        if f.tensor in seen:
            raise AotError(f"feed '{f.tensor}' is fed twice ({seen[f.tensor]} and {f.name})")
        seen[f.tensor] = f.name
    return Spec(feeds, fetches)


def parse(data: bytes) -> Spec:
    """A config from a file's bytes: text format, or binary when it is not valid text."""
    from google.protobuf import message, text_format
    from tensorflow.compiler.tf2xla import tf2xla_pb2
    config = tf2xla_pb2.Config()
    try:
        text_format.Parse(data.decode("utf-8"), config)
    except (UnicodeDecodeError, text_format.ParseError) as text_error:
        config = tf2xla_pb2.Config()
        try:
            config.ParseFromString(data)
        except message.DecodeError:
            raise AotError(f"config is neither tf2xla.Config text nor binary: {text_error}") from None
    return from_proto(config)


def read(path: str) -> Spec:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise AotError(f"cannot read config {path}: {e.strerror}") from None
    try:
        return parse(data)
    except AotError as e:
        raise AotError(f"{path}: {e}") from None
