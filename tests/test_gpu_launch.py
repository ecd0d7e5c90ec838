"""TfjitLaunch's GPU kernel (runtime/launch_op_gpu.cc), checked without a GPU.

No machine here has both TensorFlow and a GPU, so the kernel has NOT run.  Checked:
it compiles and links against the CUDA tensorflow wheel (tools/check_gpu_launch_build.py,
when such a wheel or its headers are here: pass ``--cuda-tensorflow=PATH``, or leave
them where the tool's docstring downloads them); gpu_abi.h and abi.py agree; the Python
side builds GPU executables from real PTX and answers the GPU compile callback; a CPU
TensorFlow builds no GPU kernel and keeps every node on the CPU kernel.
"""
import ctypes
import glob
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfjit.runtime import abi, build, launch, launch_gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the tool's docstring puts the CUDA wheel (pip download) and its unzipped headers.
DEFAULT_CUDA_TF = ["/tmp/tfgpu/tensorflow/include", *sorted(glob.glob(
    "/tmp/tfwheel/tensorflow-*-manylinux*.whl"))]


def _cuda_tensorflow(config):
    given = config.getoption("--cuda-tensorflow", default=None)
    found = [p for p in ([given] if given else DEFAULT_CUDA_TF) if p and os.path.exists(p)]
    return found[0] if found else None


def test_the_gpu_kernel_compiles_and_links_against_the_cuda_wheel(pytestconfig):
    source = _cuda_tensorflow(pytestconfig)
    if source is None:
        pytest.skip("no CUDA tensorflow wheel or headers here (pip download --no-deps "
                    "tensorflow==<installed version> -d /tmp/tfwheel; this test downloads nothing)")
    sys.path.insert(0, ROOT)
    from tools import check_gpu_launch_build as tool
    assert tool.check(source), "the GPU kernel does not build against the CUDA TensorFlow"


def test_gpu_abi_h_and_abi_py_agree(tmp_path):
    src = tmp_path / "layout.cc"
    src.write_text('#include <cstdio>\n#include "gpu_abi.h"\nint main() { int64_t o[5]; '
                   'TfjitGpuAbiLayoutOf(o); for (int i = 0; i < 5; ++i) '
                   'std::printf("%lld ", static_cast<long long>(o[i])); }\n')
    exe = tmp_path / "layout"
    subprocess.run([build.find_compiler(), "-std=c++17", f"-I{build.HERE}", str(src), "-o",
                    str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert tuple(int(v) for v in out.split()) == abi.gpu_layout()


def test_a_cpu_tensorflow_builds_no_gpu_kernel(tf):
    assert not tf.test.is_built_with_cuda()     # this machine's TF (tensorflow-cpu)
    assert build.gpu_sources()[0] not in build.launch_sources()
    assert build.gpu_sources()[0] in build.launch_sources(cuda=True)
    assert build.gpu_sources()[0] not in build.sources()   # nor in the -march matrix
    assert "not a CUDA build" in build.gpu_kernel_note()
    assert "GPU kernel" in build.gpu_kernel_note(cuda=True)
    assert not launch_gpu.gpu_kernel_built()
    assert launch_gpu.set_gpu_compile_callback(lambda *a, **k: None) is False


def test_the_gpu_flags_find_cuda_h():
    flags = build.cuda_flags(["-I/nonexistent"])
    assert flags[0] == "-DGOOGLE_CUDA=1"
    assert os.path.exists(os.path.join(flags[1][2:], "cuda.h"))


def _cluster(fn, *dtypes):
    """A cluster definition (graph/cluster.py's form: _arg_i in, _retval_j out)."""
    g = tf.Graph()
    with g.as_default():     # TF's names may not start with "_": renamed below
        args = [tf.compat.v1.placeholder(d, name=f"arg_{i}") for i, d in enumerate(dtypes)]
        tf.identity(fn(*args), name="retval_0")
    gd = g.as_graph_def()
    rename = {f"arg_{i}": f"_arg_{i}" for i in range(len(dtypes))} | {"retval_0": "_retval_0"}
    for node in gd.node:
        node.name = rename.get(node.name, node.name)
        node.input[:] = [rename.get(i, i) for i in node.input]
    return gd.SerializeToString()


INT_DIV = _cluster(lambda a, b: a // b + a, tf.int32, tf.int32)
MATMUL = _cluster(lambda a, b: tf.matmul(a, b), tf.float32, tf.float32)
I32 = tf.int32.as_datatype_enum


@pytest.fixture(scope="module")
def service(tfjit):
    from tfjit.api.service import CompileService
    return CompileService()       # not installed: its callbacks are called directly


@pytest.mark.parametrize("device, ptx_arch", [("sm_90", "sm_90"), ("sm_100", "sm_90"),
                                              ("sm_89", "sm_80")])
def test_the_gpu_callback_compiles_a_cluster_to_ptx_for_the_device(service, device, ptx_arch):
    exe = service.on_miss_gpu("intdiv", INT_DIV, [(I32, (3, 5)), (I32, (3, 5))], arch=device)
    assert isinstance(exe, launch_gpu.GpuExecutable)
    s = exe._struct
    assert exe.program.arch == ptx_arch and s.arch == int(ptx_arch[3:])
    assert f".target {ptx_arch}" in s.image.decode() and s.image_bytes == len(s.image)
    assert s.host.num_steps == 0 and s.host.num_inputs == 2 and s.host.num_outputs == 1
    assert [s.host.input_dtypes[i] for i in range(2)] == [I32, I32]
    assert [s.host.output_dims[i] for i in range(s.host.output_ranks[0])] == [3, 5]
    entries = [(s.steps[k].entry.decode(), s.steps[k].rows) for k in range(s.num_steps)]
    assert entries == [tuple(e) for e in exe.program.entries] and entries
    assert all(f".entry {name}" in exe.program.ptx for name, _ in entries)
    assert all(s.steps[k].block == 0 and s.steps[k].max_blocks_per_sm == 32
               for k in range(s.num_steps))
    messages = [s.host.messages[k].decode() for k in range(s.host.num_messages)]
    assert any("division by zero" in m.lower() for m in messages), messages


def test_what_the_gpu_cannot_run_is_an_error_or_a_fallback(service):
    sig = [(tf.float32.as_datatype_enum, (4, 4))] * 2
    with pytest.raises(launch.CompileError, match="cannot run on the GPU.*runtime library"):
        service.on_miss_gpu("mm", MATMUL, sig, arch="sm_90")
    with pytest.raises(launch.Fallback, match="the GPU cannot run it") as e:
        service.on_miss_gpu("mm", MATMUL, sig, arch="sm_90", can_fall_back=True)
    assert e.value.remember
    with pytest.raises(launch.CompileError, match="sm_80 or newer; this GPU is sm_75"):
        service.on_miss_gpu("intdiv", INT_DIV, [(I32, (2,)), (I32, (2,))], arch="sm_75")


def _call(cb, signature, arch=90, can_fall_back=0):
    """Calls a GPU compile callback as launch_op_gpu.cc does: (rc, address, error)."""
    n = len(signature)
    dims = [d for _, s in signature for d in s]
    out = (ctypes.c_void_p * 1)()
    error = ctypes.create_string_buffer(256)
    rc = cb(b"c", None, 0, n, (ctypes.c_int32 * n)(*[d for d, _ in signature]),
            (ctypes.c_int32 * n)(*[len(s) for _, s in signature]),
            (ctypes.c_int64 * max(len(dims), 1))(*dims), (ctypes.c_void_p * n)(),
            (ctypes.c_int64 * n)(), 0, can_fall_back, arch, out,
            ctypes.cast(error, ctypes.c_void_p), len(error))
    return rc, out[0], error.value.decode()


def test_the_gpu_compile_callback_answers_as_the_op_expects(service):
    asked = []

    def fn(cluster, cluster_def, signature, *, arch, executions, can_fall_back):
        asked.append((cluster, signature, arch))
        if signature[0][1] == (1,):
            raise launch.Fallback("not this one", remember=False)
        if signature[0][1] == (2,):
            raise launch.CompileError("refused: reason")
        return service.on_miss_gpu("intdiv", INT_DIV, signature, arch=arch)

    cb = launch_gpu._trampoline(fn)
    rc, address, _ = _call(cb, [(I32, (3,)), (I32, (3,))])
    assert rc == 0 and address == launch_gpu._executables[
        ("c", "sm_90", ((I32, (3,)), (I32, (3,))), ())].address
    assert _call(cb, [(I32, (3,)), (I32, (3,))])[:2] == (0, address)     # cached: asked once
    assert len(asked) == 1 and asked[0][2] == "sm_90"
    assert _call(cb, [(I32, (1,)), (I32, (1,))], can_fall_back=1) == (2, None, "not this one")
    assert _call(cb, [(I32, (2,)), (I32, (2,))]) == (1, None, "refused: reason")
    launch.clear_cache()        # drops the GPU executables too
    assert not launch_gpu._executables


def test_a_gpu_executable_checks_its_program():
    program = launch_gpu.cuda.Program("p", "sm_90", "ptx", [("p_s0", 4)], [], [(np.float32, (4,))],
                                      [(np.float32, (4,))], [-1], [0], 64)
    with pytest.raises(ValueError, match="do not fill the program's arena"):
        launch_gpu.make_gpu_executable(program, input_dtypes=[1], output_dtypes=[1],
                                       temp_bytes=[16])
    exe = launch_gpu.make_gpu_executable(program, input_dtypes=[1], output_dtypes=[1],
                                         temp_bytes=[64], block=128)
    assert exe._struct.steps[0].block == 128 and exe._struct.host.arena_bytes == 64


def test_gpu_true_labels_the_node_for_the_gpu_kernel(tf):
    launch.load()

    @tf.function
    def f(x):
        return launch.launch([x], cluster="c", Tout=[tf.float32], output_shapes=[[2]], gpu=True)

    nodes = [n for n in f.get_concrete_function(tf.TensorSpec([2], tf.float32))
             .graph.as_graph_def().node if n.op == "TfjitLaunch"]
    assert [n.attr["_kernel"].s for n in nodes] == [launch_gpu.KERNEL_LABEL.encode()]
    with pytest.raises(ValueError, match="graph mode"):
        launch.launch([tf.zeros([2])], cluster="c", Tout=[tf.float32], output_shapes=[[2]],
                      gpu=True)
