"""tools/xla_op_tests.py on a tiny test file of its own (not TF's): the stand-in
harness gives what XLATestCase gives, and each test's record says whether it passed
and where it ran (tfjit kernels or tfjit's raised error, partly, TF only, or no graph)."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = '''
import numpy as np
from tensorflow.compiler.tests import xla_test
from tensorflow.python.framework import dtypes, errors
from tensorflow.python.ops import array_ops, math_ops
from tensorflow.python.platform import googletest


class TinyTest(xla_test.XLATestCase):

  def _run(self, op, *args):
    with self.session() as sess, self.test_scope():
      ps = [array_ops.placeholder(dtypes.as_dtype(a.dtype), a.shape) for a in args]
      return sess.run(op(*ps), dict(zip(ps, args)))

  def testTypes(self):
    self.assertEqual(self.device, "XLA_CPU")
    self.assertEqual(self.float_types, {np.float32, np.float64})
    self.assertEqual(self.int_types, {np.int32, np.int64})
    self.assertIn(np.bool_, self.all_types)

  def testCompiled(self):
    for dtype in self.float_types:
      x = np.array([1, 2, 3], dtype=dtype)
      self.assertAllClose(self._run(lambda a, b: a * b + 1, x, x), x * x + 1)

  def testInTensorFlow(self):
    x = np.array([3, 1, 3], np.int32)
    self.assertAllEqual(self._run(lambda a: array_ops.unique(a)[0], x), [3, 1])

  def testRaised(self):
    x = np.ones([2, 3], np.float32)
    with self.session() as sess, self.test_scope():
      p, axis = array_ops.placeholder(dtypes.float32), array_ops.placeholder(dtypes.int32)
      y = math_ops.reduce_sum(p, axis)
      self.assertAllClose(sess.run(y, {p: x, axis: [1]}), [3.0, 3.0])
      with self.assertRaisesRegex(errors.InvalidArgumentError, "Invalid reduction dim"):
        sess.run(y, {p: x, axis: [2]})

  def testNoGraph(self):
    for dtype in self.float_types & {np.float16}:    # core types: empty, runs nothing
      self._run(math_ops.exp, np.ones([1], dtype))

  def testWrong(self):
    x = np.array([1.0], np.float32)
    self.assertAllClose(self._run(math_ops.exp, x), [2.0])


if __name__ == "__main__":
  googletest.main()
'''


def test_runner_records_status_and_where_each_test_ran(tmp_path):
    (tmp_path / "tiny_test.py").write_text(TINY)
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "xla_op_tests.py"), "--tests-dir",
         str(tmp_path), "tiny_test", "--types", "core", "--timeout", "300", "--json", str(out)],
        capture_output=True, text=True, timeout=400, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {r["test"]: r for r in json.loads(out.read_text())["records"]}
    assert set(records) == {f"TinyTest.test{n}" for n in ("Types", "Compiled", "InTensorFlow",
                                                          "Raised", "NoGraph", "Wrong")}
    assert records["TinyTest.testTypes"]["status"] == "pass"
    compiled = records["TinyTest.testCompiled"]
    assert compiled["status"] == "pass" and compiled["where"] == "tfjit", compiled
    assert compiled["compiled"] >= 2                 # one launch per float type
    in_tf = records["TinyTest.testInTensorFlow"]
    assert in_tf["status"] == "pass" and in_tf["where"] == "tf", in_tf
    assert any(k.startswith("Unique") for k in in_tf["refused"]), in_tf
    raised = records["TinyTest.testRaised"]      # tfjit raised TF's error itself
    assert raised["status"] == "pass" and raised["where"] == "tfjit", raised
    assert raised["raised"] == 1 and not raised["fallbacks"], raised
    nothing = records["TinyTest.testNoGraph"]
    assert nothing["status"] == "pass" and nothing["where"] == "none", nothing
    wrong = records["TinyTest.testWrong"]
    assert wrong["status"] == "fail" and wrong["where"] == "tfjit"
    assert wrong["why"].startswith("AssertionError"), wrong
    table = proc.stdout
    assert "tiny_test" in table and "TOTAL" in table and "Failure reasons" in table
