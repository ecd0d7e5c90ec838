"""The IR text parser (print → parse → print) and the tfjit-run-module tool."""
import numpy as np
import pytest

from tfjit.ir.module import IRError
from tfjit.ir.text import module_str, parse_module


def _functions(tf):
    return [
        (lambda x, y: tf.reduce_sum(tf.nn.softmax(x * 2.0 + y), axis=1),
         [np.ones((4, 5), np.float32), np.ones((4, 5), np.float32)]),
        (lambda x: (tf.transpose(x)[1:3], tf.concat([x, x], 0), tf.cast(x > 0, tf.int32)),
         [np.arange(12, dtype=np.float32).reshape(3, 4)]),
        (lambda i, j: (i // j, tf.reduce_max(i, axis=0), tf.argmax(i, axis=1), i),
         [np.ones((3, 4), np.int64), np.ones((3, 4), np.int64)]),
        (lambda x: tf.pad(tf.exp(x), [[1, 2]]) + tf.range(7, dtype=tf.float64),
         [np.ones(4, np.float64)]),
        (lambda x: tf.cast(tf.reshape(x, [2, 3]), tf.float32) * 1.5,
         [np.ones(6, np.float16)]),
        # a scatter into existing rows: its third operand (the rows it starts from)
        (lambda x, i: tf.tensor_scatter_nd_add(x, i, tf.ones((3, 4))),
         [np.zeros((5, 4), np.float32), np.array([[1], [3], [1]], np.int32)]),
    ]


def test_round_trip_of_compiled_modules(tf, tfjit):
    for fn, args in _functions(tf):
        compiled = tfjit.function(fn).compiled(*[tf.constant(a) for a in args])
        for text in (compiled.module_before, compiled.module_after):
            assert module_str(parse_module(text)) == text


HAND_WRITTEN = """\
module hand.1 {
  %p0 = bf16[2,2] parameter(0)
  %p1 = i32[3] parameter(1)
  %constant.0 = pred[3] constant({true, false, true})
  %constant.1 = i8[3] constant({-128, 0, 127})
  %constant.2 = u64[] constant(18446744073709551615)
  %constant.3 = f32[4] constant({nan, inf, -inf, -0.0})
  %constant.4 = bf16[2,2] constant({1.0, -2.5, 3.140625, 9.972771014849226e+19})
  %constant.5 = f64[0] constant({})
  %add.6 = bf16[2,2] add(%p0, %constant.4)
  %reduce.7 = bf16[2] reduce(%add.6), kind=sum, ndims=1
  %iota.8 = i32[3] iota(), dim=0
  %select.9 = i32[3] select(%constant.0, %p1, %iota.8)
  %slice.10 = i32[2] slice(%select.9), starts={2}, strides={-1}
  ROOT (%reduce.7, %slice.10, %constant.1, %constant.2, %constant.3, %constant.5, %p1)
}
"""


def test_round_trip_of_hand_written_text():
    m = parse_module(HAND_WRITTEN)
    assert module_str(m) == HAND_WRITTEN
    assert m.instrs[5].value.dtype == np.float32 and np.isnan(m.instrs[5].value[0])
    assert m.outputs[-1] is m.params[1]


@pytest.mark.parametrize("line, message", [
    ("  %add.1 = f32[2] add(%p0, %nope)", "unknown operand"),
    ("  %add.1 = f32[3] add(%p0, %p0)", r"not f32\[3\] as written"),
    ("  %add.1 = f32[2] frobnicate(%p0)", "unknown op"),
    ("  %add.1 = q7[2] add(%p0, %p0)", "unknown element type"),
    ("  %constant.1 = f32[2] constant({1.0})", "needs 2 values"),
    ("  %reduce.1 = f32[] reduce(%p0), kind=median, ndims=1", "reduce kind=median"),
    ("  %add.1 = f32[2] add(%p0, %p0), dims={1,x}", "invalid literal"),
    ("  garbage", "expected '%name"),
])
def test_parse_errors_name_the_line(line, message):
    text = f"module m {{\n  %p0 = f32[2] parameter(0)\n{line}\n  ROOT (%p0)\n}}\n"
    with pytest.raises(IRError, match=rf"line 3: .*{message}"):
        parse_module(text)


def test_parse_errors_for_structure():
    with pytest.raises(IRError, match="line 1: expected 'module"):
        parse_module("modul m {\n}\n")
    with pytest.raises(IRError, match="line 3: missing 'ROOT"):
        parse_module("module m {\n  %p0 = f32[2] parameter(0)\n}\n")
    with pytest.raises(IRError, match="line 2: parameter\\(1\\) out of order"):
        parse_module("module m {\n  %p0 = f32[2] parameter(1)\n  ROOT (%p0)\n}\n")


def _dump(tf, tfjit, tmp_path):
    fn = lambda x, y, i: (tf.reduce_sum(tf.tanh(x + y) * x, axis=1), i % 7 + i, tf.maximum(x, y))
    args = [np.ones((8, 16), np.float32), np.ones((8, 16), np.float32), np.ones(5, np.int32)]
    path = tmp_path / "module.txt"
    path.write_text(tfjit.function(fn).compiled(*[tf.constant(a) for a in args]).module_before)
    return str(path)


def test_run_module_passes_on_a_correct_module(tf, tfjit, tmp_path, capsys):
    from tfjit.api.run_module import main
    path = _dump(tf, tfjit, tmp_path)
    assert main([path, "--iterations", "3"]) == 0
    assert "0/3 runs miscompared" in capsys.readouterr().out
    assert main([path, "--iterations", "2", "--use_large_float_range", "--seed", "5"]) == 0
    assert "0/2 runs miscompared" in capsys.readouterr().out
    assert main([path, "--reference", "tf"]) == 2


def test_run_module_detects_a_planted_miscompile(tf, tfjit, tmp_path, capsys, monkeypatch):
    from tfjit.api.run_module import main
    from tfjit.codegen.elemental import Elemental
    from tfjit.ir.ops import Op
    path = _dump(tf, tfjit, tmp_path)
    original = Elemental._float

    def add_is_sub(self, op, d, args):
        return original(self, Op.SUB if op is Op.ADD else op, d, args)

    monkeypatch.setattr(Elemental, "_float", add_is_sub)
    assert main([path, "--iterations", "1"]) == 1
    out = capsys.readouterr().out
    assert "1/1 runs miscompared" in out and "output 0" in out
