"""runtime/cuda.py without a GPU: the driver calls go to a fake driver whose "device
memory" is host memory and whose kernel launch runs the same kernels built for the
host CPU in their GPU form (``KernelEmitter(gpu=True)``: a row per element in flat
loops, no row buffers), row by row as the PTX entries take them.

So everything but LLVM's NVPTX backend and the real driver is checked against the IR
interpreter: the GPU form of the kernels, the buffer table, the arena, the status
block and its error text, outputs that are inputs, and the errors the runtime raises
(no cuda-python, no GPU, out of memory).  tools/gpu_check.py does the rest on a GPU.
"""
from __future__ import annotations

import ctypes
import dataclasses
import enum
import importlib
import types

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import pipeline
from tfjit.codegen import lanes, llvm_cpu, nvptx
from tfjit.codegen.elemental import MESSAGES
from tfjit.ir import interp
from tfjit.ir.text import parse_module
from tfjit.runtime import cuda

_ROW = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100


class DevicePointer:
    """cuda-python's CUdeviceptr: ``int()`` is the device address; ``getPtr()`` is the
    host address of the handle, which the first H200 run showed is no device address."""

    def __init__(self, address: int):
        self.address, self.handle = address, ctypes.c_uint64(address)

    def __int__(self):
        return self.address

    def getPtr(self):
        return ctypes.addressof(self.handle)


class FakeDriver:
    """The cuda-python calls runtime/cuda.py makes, over host memory."""
    CUresult = _Result
    CUdevice_attribute = types.SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor")

    def __init__(self, functions: dict, devices: int = 1, memory: int = 1 << 30):
        self.functions = functions        # PTX entry name -> (host address of its row body, rows)
        self.devices, self.memory = devices, memory
        self.live: dict = {}              # address -> buffer
        self.launches: list = []

    def cuGetErrorName(self, err):
        return _Result.CUDA_SUCCESS, _Result(err).name.encode()

    def cuInit(self, flags):
        return _Result.CUDA_SUCCESS if self.devices else _Result.CUDA_ERROR_NO_DEVICE

    def cuDeviceGet(self, ordinal):
        return _Result.CUDA_SUCCESS, ordinal

    def cuDevicePrimaryCtxRetain(self, device):
        return _Result.CUDA_SUCCESS, f"ctx{device}"

    def cuDeviceGetAttribute(self, attr, device):
        return _Result.CUDA_SUCCESS, {"sms": 132, "major": 9, "minor": 0}[attr]

    def cuCtxSetCurrent(self, ctx):
        return _Result.CUDA_SUCCESS

    def cuModuleLoadData(self, image):
        text = ctypes.string_at(image).decode()
        assert ".version" in text and ".entry" in text
        return _Result.CUDA_SUCCESS, text

    def cuModuleGetFunction(self, module, name):
        assert f".entry {name.decode()}(" in module
        return _Result.CUDA_SUCCESS, name.decode()

    def cuOccupancyMaxPotentialBlockSize(self, fn, callback, smem, limit):
        return _Result.CUDA_SUCCESS, 264, 128

    def cuMemAlloc(self, nbytes):
        if nbytes > self.memory:
            return _Result.CUDA_ERROR_OUT_OF_MEMORY, 0
        buf = np.full(nbytes, 0xAB, np.uint8)      # garbage, as device memory is
        self.live[buf.ctypes.data] = buf
        return _Result.CUDA_SUCCESS, DevicePointer(buf.ctypes.data)

    def cuMemFree(self, ptr):
        del self.live[int(ptr)]
        return (_Result.CUDA_SUCCESS,)

    def cuMemsetD8(self, ptr, value, n):
        ctypes.memset(int(ptr), value, n)
        return (_Result.CUDA_SUCCESS,)

    def _copy(self, dst, src, n):
        ctypes.memmove(int(dst), int(src), n)
        return (_Result.CUDA_SUCCESS,)

    cuMemcpyHtoD = cuMemcpyDtoH = cuMemcpyDtoD = _copy

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        args = (ctypes.c_void_p * 2).from_address(params)
        bufs = ctypes.c_uint64.from_address(args[0]).value
        rows = ctypes.c_int64.from_address(args[1]).value
        # the occupancy calculator's 128, or a held row's exact block (codegen/lanes.py)
        assert (bx == 128 or bx in (64, 256, 512)) and gx == max(1, min(-(-rows // bx), 132 * 32))
        self.launches.append((fn, rows))
        address, host_rows = self.functions[fn]
        _ROW(address)(bufs, 0, host_rows)        # every row, as the grid-stride loop
        return (_Result.CUDA_SUCCESS,)

    def cuCtxSynchronize(self):
        return (_Result.CUDA_SUCCESS,)


def _compile(fn, *specs):
    """(PTX program, {entry: host address of its GPU-form row body}, module, code)."""
    text = tfjit.function(fn, jit_compile=True).experimental_get_compiler_ir(*specs)()
    program = pipeline.compile_ptx(parse_module(text), "m").program()
    o = pipeline.optimize(parse_module(text))
    host = dataclasses.replace(pipeline.jit_target(), gpu_arch="sm_90")   # GPU form, host code
    llmod, steps = llvm_cpu.emit_module("m", o.fusions, o.plan, list(MESSAGES), host)
    code = llvm_cpu.compile_module(llmod, [s for s, _, _ in steps], host.compiler)
    entries = [nvptx.entry_name("m", n) for n in range(len(steps))]
    # a PTX entry whose warps share rows counts threads (codegen/lanes.py); the host
    # form takes a row per call, so it runs the rows alone (a GPU's column tiles are rows
    # of their own: the host form runs the CPU's rows of the same kernel)
    assert [e for e, _ in program.entries] == entries
    for (_, r), (_, hr, _), block in zip(program.entries, steps, program.blocks):
        assert r in [hr * g for g in (1, 8, 16, lanes.WARP)] or (block > 0 and r % block == 0)
    assert len(program.blocks) == len(program.entries)
    return program, {e: (code.addresses[s], hr) for e, (s, hr, _) in zip(entries, steps)}, \
        parse_module(text), code


@pytest.fixture()
def fake(monkeypatch):
    def install(functions, **kwargs):
        driver = FakeDriver(functions, **kwargs)
        monkeypatch.setattr(cuda, "_driver", lambda: driver)
        monkeypatch.setattr(cuda.Device, "_devices", {})
        return driver
    return install


def seed(x, y, z):
    return tf.reduce_sum(x + y * z)


def rows(x, y):
    s = tf.nn.softmax(x)
    return s, tf.reduce_max(x * y, axis=0), x + 1.0, tf.math.floordiv(y, x)


@pytest.mark.parametrize("fn, shapes, dtype", [
    (seed, [[256, 300]] * 3, tf.float32),
    (rows, [[33, 70], [33, 70]], tf.float32),
    (rows, [[5, 9000], [5, 9000]], tf.float32),            # a row past the CPU's row buffer
    (lambda x, y: (tf.cast(x, tf.float16) * 3, tf.reduce_sum(y, axis=1)),
     [[7, 4099], [7, 4099]], tf.float32),
    (lambda x, y: (x // y, x % y, tf.reduce_prod(x, axis=0)), [[40, 13], [40, 13]], tf.int32),
    (lambda x, s: (x * s, tf.reduce_sum(x) + s), [[4, 5], []], tf.float32),   # a scalar input
])
def test_the_gpu_form_of_the_kernels_matches_the_interpreter(fake, fn, shapes, dtype):
    program, functions, module, code = _compile(fn, *[tf.TensorSpec(s, dtype) for s in shapes])
    driver = fake(functions)
    rng = np.random.default_rng(7)
    xs = [(rng.integers(1, 50, s) if dtype == tf.int32 else rng.standard_normal(s))
          .astype(dtype.as_numpy_dtype) for s in shapes]
    got = cuda.run(program, xs)
    want = interp.evaluate(module, xs)
    for g, w in zip(got, want):
        assert_matches(g, w, rtol=2e-5, atol=2e-5)
    assert [fn for fn, _ in driver.launches] == [e for e, _ in program.entries]
    assert not driver.live                      # every device buffer was freed


def test_an_output_that_is_an_input_and_a_kernel_error(fake):
    program, functions, _, _ = _compile(lambda x, i: (x, tf.gather(x, i)),
                                        tf.TensorSpec([4]), tf.TensorSpec([2], tf.int32))
    fake(functions)
    x = np.arange(4, dtype=np.float32)
    got = cuda.run(program, [x, np.array([3, 0], np.int32)])
    assert got[0].tolist() == x.tolist() and got[1].tolist() == [3.0, 0.0]
    with pytest.raises(cuda.KernelError, match=r"indices\[0\] = 9 is not in \[0, 4\)"):
        cuda.run(program, [x, np.array([9, 0], np.int32)])


def test_a_bound_program_runs_its_steps_without_a_round_trip(fake):
    """cuda.Bound (what a timed loop and TfjitLaunch's GPU kernel do): buffers bound
    once, every step enqueued, the status read once; the first error is the one named."""
    program, functions, module, _ = _compile(
        lambda x, i: (tf.nn.softmax(x) * 2.0, tf.gather(x, i)),
        tf.TensorSpec([6, 40]), tf.TensorSpec([3], tf.int32))
    assert len(program.entries) >= 2
    driver = fake(functions)
    dev = cuda.Device.get(0)
    x = np.random.default_rng(3).standard_normal([6, 40]).astype(np.float32)
    i = np.array([5, 0, 2], np.int32)
    ins = [np.require(v, requirements="C") for v in (x, i)]
    outs = [np.empty(shape, dtype) for dtype, shape in program.outputs]
    bound = cuda.Bound(dev, program, [v.ctypes.data for v in ins], [v.ctypes.data for v in outs])
    for _ in range(2):
        bound.launch()
    bound.check()
    for g, w in zip(outs, interp.evaluate(module, [x, i])):
        assert_matches(g, w, rtol=2e-5, atol=2e-5)
    assert len(driver.launches) == 2 * len(program.entries)
    ins[1][:] = [1, 7, 2]
    bound.launch()
    with pytest.raises(cuda.KernelError, match=r"indices\[1\] = 7 is not in \[0, 6\)"):
        bound.check()
    bound.clear()
    ins[1][:] = [1, 2, 3]
    bound.launch(only=len(program.entries) - 1)
    bound.check()
    bound.close()
    assert not driver.live


def test_runtime_errors_are_typed(fake, monkeypatch):
    program, functions, _, _ = _compile(seed, *[tf.TensorSpec([64, 64])] * 3)
    x = np.ones([64, 64], np.float32)
    fake(functions, memory=1000)
    with pytest.raises(cuda.GpuOutOfMemory, match=r"cuMemAlloc\(16384 bytes\).*OUT_OF_MEMORY"):
        cuda.run(program, [x, x, x])
    fake(functions, devices=0)
    with pytest.raises(cuda.GpuUnavailable, match="no CUDA driver or GPU"):
        cuda.run(program, [x, x, x])
    fake(functions)
    with pytest.raises(ValueError, match=r"input 1: expected float32\[64, 64\], got float64"):
        cuda.run(program, [x, x.astype(np.float64), x])
    monkeypatch.setattr(cuda, "_driver", _REAL_DRIVER)
    monkeypatch.setattr(cuda.Device, "_devices", {})
    try:
        importlib.import_module("cuda.bindings")
    except ImportError:        # (this machine: no cuda-python) one clear error
        with pytest.raises(cuda.GpuUnavailable, match=r"pip install 'tfjit\[gpu\]'"):
            cuda.run(program, [x, x, x])


_REAL_DRIVER = cuda._driver
