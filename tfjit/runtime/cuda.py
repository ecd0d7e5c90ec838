"""Runs tfjit's PTX on an NVIDIA GPU through the CUDA driver API, without TensorFlow.

    program = pipeline.compile_ptx(module, name).program()     # plain data
    outputs = cuda.run(program, [numpy arrays])                # numpy in, numpy out
    cuda.run_dlpack(program, inputs, outputs)                  # CuPy/torch arrays, in place

Why cuda-python (``cuda.bindings.driver``, ``pip install tfjit[gpu]``) and not
pycuda: it is NVIDIA's own thin binding of the driver API, ships as wheels for
every CUDA 12/13 driver (pycuda builds against a local toolkit), and exposes
exactly the calls used here: ``cuModuleLoadData`` (the driver compiles the PTX
for the device it runs on), ``cuMemAlloc``/copies, ``cuOccupancyMaxPotentialBlockSize``
and ``cuLaunchKernel``.

The buffer ABI is the CPU launch's (runtime/host.py): every kernel entry takes
``(bufs, rows)``, ``bufs`` a device array of device pointers ``[inputs...,
outputs..., temps..., status, 0]``; temps live in one arena; the status block
(runtime/abi.py) reports a kernel's runtime error, read after the steps run.

Errors: no cuda-python, no driver or no GPU is one ``GpuUnavailable``; a failed
allocation is ``GpuOutOfMemory`` (also a MemoryError); a kernel's runtime error
(an index out of range, ...) is ``KernelError`` with the CPU's text.  Like
launch.py, this module reads only a program's plain data and imports no compiler.

Not yet run on a GPU from this repository's CI (no machine there has one);
tools/gpu_check.py is the prepared check for a machine that has.
"""
from __future__ import annotations

import ctypes
import dataclasses
import threading

import numpy as np

from tfjit.runtime import abi
from tfjit.runtime.launch import status_text


# A launch's grid: ceil(rows / block) blocks, at most this many per multiprocessor (the
# entries' grid-stride loops take the rest); TfjitLaunch's GPU kernel uses the same rule.
BLOCKS_PER_SM = 32
WARP = 32                # threads of a warp (codegen/lanes.py; this module imports no compiler)


def whole_warps(block: int) -> int:
    """Threads per block rounded down to whole warps (at least one): entries whose warps
    share rows (codegen/lanes.py) need every warp whole; cuda_driver.h rounds the same."""
    return max(WARP, block // WARP * WARP)


class GpuError(RuntimeError):
    """A CUDA driver call failed (its name and the driver's error name)."""


class GpuUnavailable(GpuError):
    """No cuda-python, no CUDA driver, or no GPU: the CPU paths are unaffected."""


class GpuOutOfMemory(GpuError, MemoryError):
    """The device has no room for a buffer."""


class KernelError(ValueError):
    """A kernel reported a runtime error through the status block."""


@dataclasses.dataclass
class Program:
    """What running one compiled module needs (pipeline.CompiledPtx.program())."""
    name: str
    arch: str
    ptx: str
    entries: list            # [(PTX entry name, rows)] in run order
    messages: list           # status code k is messages[k - 1]
    inputs: list             # [(numpy dtype, shape)]
    outputs: list            # [(numpy dtype, shape)]
    output_source: list      # per output: the input it is (-1: its own buffer)
    temp_offsets: list       # per temp: offset in the arena
    arena_bytes: int
    blocks: list = dataclasses.field(default_factory=list)   # per entry: its exact threads
    # per block (a row per block, codegen/lanes.py), or 0: the occupancy calculator's


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver      # cuda-python before 12.6
        except ImportError:
            raise GpuUnavailable("running on a GPU needs cuda-python "
                                 "(pip install 'tfjit[gpu]'), which is not installed") from None
    return driver


def _check(what: str, result):
    """The values of a cuda-python call's (error, *values) result, or the error raised."""
    drv = _driver()
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise GpuOutOfMemory(f"{what}: {name} (the GPU has no room for it)")
        if err in (drv.CUresult.CUDA_ERROR_NO_DEVICE, drv.CUresult.CUDA_ERROR_NOT_INITIALIZED):
            raise GpuUnavailable(f"{what}: {name}: no CUDA GPU is usable here")
        raise GpuError(f"{what}: {name}")
    return values[0] if len(values) == 1 else values


class Device:
    """One GPU's primary context, its loaded modules and each entry's block size."""

    _lock = threading.Lock()
    _devices: dict = {}

    @classmethod
    def get(cls, ordinal: int = 0) -> "Device":
        with cls._lock:
            if ordinal not in cls._devices:
                cls._devices[ordinal] = cls(ordinal)
            return cls._devices[ordinal]

    def __init__(self, ordinal: int):
        drv = self.drv = _driver()
        try:
            _check("cuInit", drv.cuInit(0))
        except Exception as e:     # noqa: BLE001 - cuda-python raises its own when libcuda is absent
            raise GpuUnavailable(f"no CUDA driver or GPU: {e}") from None
        self.handle = _check("cuDeviceGet", drv.cuDeviceGet(ordinal))
        self.context = _check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(self.handle))
        attr = drv.CUdevice_attribute
        self.sms = _check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle))
        major = _check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle))
        minor = _check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle))
        self.arch = f"sm_{major}{minor}"
        self._modules: dict = {}        # PTX text -> (module, {entry: (function, block)})

    def activate(self) -> None:
        _check("cuCtxSetCurrent", self.drv.cuCtxSetCurrent(self.context))

    def functions(self, program: Program) -> dict:
        """{entry: (CUfunction, threads per block)}: loaded once per PTX text."""
        self.activate()
        with self._lock:
            if program.ptx not in self._modules:
                if int(program.arch[3:]) > int(self.arch[3:]):
                    raise GpuError(f"{program.name} was compiled for {program.arch}; "
                                   f"this GPU is {self.arch}")
                image = np.frombuffer(program.ptx.encode() + b"\0", np.uint8)
                module = _check("cuModuleLoadData", self.drv.cuModuleLoadData(image.ctypes.data))
                found = {}
                for k, (entry, _) in enumerate(program.entries):
                    fn = _check(f"cuModuleGetFunction({entry})",
                                self.drv.cuModuleGetFunction(module, entry.encode()))
                    exact = program.blocks[k] if k < len(program.blocks) else 0
                    found[entry] = (fn, exact or self._block_size(fn))
                self._modules[program.ptx] = (module, found)
            return self._modules[program.ptx][1]

    def _block_size(self, fn) -> int:
        """The block size that fills an SM best for this entry's registers (the driver's
        occupancy calculator), or 256 threads where the binding cannot ask it."""
        try:
            _, block = _check("cuOccupancyMaxPotentialBlockSize",
                              self.drv.cuOccupancyMaxPotentialBlockSize(fn, None, 0, 0))
        except TypeError:          # a cuda-python that wants a real callback
            return 256
        return whole_warps(int(block))

    def alloc(self, nbytes: int):
        return _check(f"cuMemAlloc({nbytes} bytes)", self.drv.cuMemAlloc(max(int(nbytes), 1)))

    def free(self, ptr) -> None:
        self.drv.cuMemFree(ptr)

    def launch(self, fn, block: int, rows: int, bufs: int) -> None:
        grid = max(1, min(-(-rows // block), self.sms * BLOCKS_PER_SM))
        args = [ctypes.c_uint64(bufs), ctypes.c_int64(rows)]
        params = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])
        _check("cuLaunchKernel", self.drv.cuLaunchKernel(
            fn, grid, 1, 1, block, 1, 1, 0, 0, ctypes.addressof(params), 0))


def _pointer(p) -> int:
    """The device address a ``CUdeviceptr`` holds (its ``getPtr()`` is the host address
    of the handle itself, which a kernel that dereferences it faults on)."""
    return int(p)


class Bound:
    """``program`` bound once to device pointers ``inputs``/``outputs`` (ints): its arena,
    status block and buffer table are allocated here, so ``launch()`` only enqueues the
    steps on the default stream, with no host round trip between them, and ``check()``
    waits and raises the first error.  That is how a timed loop runs a program, and how
    TfjitLaunch's GPU kernel does: kernels record only the first error (a compare-and-swap
    on the status code), so one read after the last step names the step that failed.
    A step after a failed one still runs, on whatever the failed step left (every kernel
    checks the indices it reads itself); ``run`` and ``run_dlpack`` check after each step
    instead, stopping where the CPU launch stops.  ``close()`` frees what it holds."""

    def __init__(self, dev: Device, program: Program, inputs: list, outputs: list):
        self.dev, self.program = dev, program
        self.steps = []
        self._owned: list = []
        fns = dev.functions(program)
        try:
            arena = self._alloc(program.arena_bytes)
            self.status = self._alloc(abi.STATUS_BYTES)
            temps = [_pointer(arena) + off for off in program.temp_offsets]
            table = np.array(inputs + outputs + temps + [_pointer(self.status), 0], np.uint64)
            self.bufs = self._alloc(table.nbytes)
            _check("cuMemcpyHtoD", dev.drv.cuMemcpyHtoD(self.bufs, table.ctypes.data, table.nbytes))
            self.clear()
        except BaseException:
            self.close()
            raise
        self.steps = [(fns[entry][0], fns[entry][1], rows) for entry, rows in program.entries]

    def _alloc(self, nbytes: int):
        p = self.dev.alloc(nbytes)
        self._owned.append(p)
        return p

    def clear(self) -> None:
        _check("cuMemsetD8", self.dev.drv.cuMemsetD8(self.status, 0, abi.STATUS_BYTES))

    def launch(self, only: int | None = None) -> None:
        """Enqueues every step (or step ``only``); returns before they run."""
        for k, (fn, block, rows) in enumerate(self.steps):
            if rows > 0 and only in (None, k):
                self.dev.launch(fn, block, rows, _pointer(self.bufs))

    def check(self) -> None:
        """Waits for the launched steps; KernelError with the first one's error text."""
        _check("cuCtxSynchronize", self.dev.drv.cuCtxSynchronize())
        block_status = np.zeros(abi.STATUS_BYTES, np.uint8)
        _check("cuMemcpyDtoH", self.dev.drv.cuMemcpyDtoH(block_status.ctypes.data, self.status,
                                                        abi.STATUS_BYTES))
        code = int(block_status[:4].view(np.int32)[0])
        if code:
            details = block_status[abi.STATUS_DETAIL_OFFSET:].view(np.int64)
            raise KernelError(status_text(code, details, self.program.messages))

    def close(self) -> None:
        while self._owned:
            self.dev.free(self._owned.pop())


def _execute(dev: Device, program: Program, inputs: list, outputs: list) -> None:
    """Runs the steps on device pointers ``inputs``/``outputs`` (ints) and checks them."""
    bound = Bound(dev, program, inputs, outputs)
    try:
        for k in range(len(bound.steps)):    # step by step, stopping where the CPU stops
            bound.launch(only=k)
            bound.check()
    finally:
        bound.close()


def run(program: Program, inputs: list, device: int = 0) -> list:
    """``program``'s outputs (numpy) for numpy ``inputs``, computed on GPU ``device``."""
    if len(inputs) != len(program.inputs):
        raise ValueError(f"{program.name} takes {len(program.inputs)} inputs, got {len(inputs)}")
    dev = Device.get(device)
    dev.activate()
    drv, owned = dev.drv, []
    host_in = []
    for k, (x, (dtype, shape)) in enumerate(zip(inputs, program.inputs)):
        x = np.require(x, requirements="C")        # (ascontiguousarray makes a scalar [1])
        if x.dtype != np.dtype(dtype) or tuple(x.shape) != tuple(shape):
            raise ValueError(f"input {k}: expected {np.dtype(dtype)}{list(shape)}, "
                             f"got {x.dtype}{list(x.shape)}")
        host_in.append(x)
    host_out = [np.empty(shape, dtype) for dtype, shape in program.outputs]
    try:
        d_in = []
        for x in host_in:
            p = dev.alloc(x.nbytes)
            owned.append(p)
            if x.nbytes:
                _check("cuMemcpyHtoD", drv.cuMemcpyHtoD(p, x.ctypes.data, x.nbytes))
            d_in.append(p)
        d_out = []
        for y in host_out:
            p = dev.alloc(y.nbytes)
            owned.append(p)
            d_out.append(p)
        _execute(dev, program, [_pointer(p) for p in d_in], [_pointer(p) for p in d_out])
        for k, (y, p) in enumerate(zip(host_out, d_out)):
            src = program.output_source[k]
            if src >= 0:
                host_out[k] = host_in[src].copy()
            elif y.nbytes:
                _check("cuMemcpyDtoH", drv.cuMemcpyDtoH(y.ctypes.data, p, y.nbytes))
    finally:
        for p in owned:
            dev.free(p)
    return host_out


# ---------------------------------------------------------------- DLPack
KDL_CPU, KDL_CUDA = 1, 2
_DL_CODES = {0: "i", 1: "u", 2: "f", 4: "bf", 6: "b"}    # kDLInt, kDLUInt, kDLFloat, ...


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


@dataclasses.dataclass
class DLView:
    """What a DLPack tensor says about itself; ``keep`` holds the capsule while in use."""
    pointer: int
    device: tuple
    dtype: str                  # numpy-style: "f4", "i8", "bf2" (bfloat16), "b1" (bool)
    shape: tuple
    contiguous: bool
    keep: object


def dlpack_view(x) -> DLView:
    """Reads ``x.__dlpack__()`` (a legacy "dltensor" capsule; its destructor releases it)."""
    capsule = x.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))
    shape = tuple(t.shape[k] for k in range(t.ndim))
    contiguous = True
    if t.strides:
        expect = 1
        for k in reversed(range(t.ndim)):
            if shape[k] != 1 and t.strides[k] != expect:
                contiguous = False
            expect *= shape[k]
    if t.dtype.code not in _DL_CODES or t.dtype.lanes != 1:
        raise TypeError(f"DLPack dtype code {t.dtype.code} x{t.dtype.lanes} is not one tfjit runs")
    dtype = _DL_CODES[t.dtype.code] + str(t.dtype.bits // 8)
    return DLView((t.data or 0) + t.byte_offset, (t.device.device_type, t.device.device_id),
                  dtype, shape, contiguous, capsule)


def _matches(view: DLView, dtype, shape) -> bool:
    want = np.dtype(dtype)
    name = "bf2" if want.name == "bfloat16" else ("b1" if want == np.bool_ else
                                                   want.kind + str(want.itemsize))
    return view.dtype == name and view.shape == tuple(shape)


def run_dlpack(program: Program, inputs: list, outputs: list) -> None:
    """Runs ``program`` on CUDA arrays that speak DLPack (CuPy, torch), writing ``outputs``
    (arrays of the outputs' dtypes and shapes, made by the caller) in place."""
    views = [dlpack_view(x) for x in list(inputs) + list(outputs)]
    specs = list(program.inputs) + list(program.outputs)
    if len(views) != len(specs):
        raise ValueError(f"{program.name} takes {len(program.inputs)} inputs and "
                         f"{len(program.outputs)} outputs, got {len(inputs)} and {len(outputs)}")
    ordinal = None
    for k, (v, (dtype, shape)) in enumerate(zip(views, specs)):
        what = f"input {k}" if k < len(inputs) else f"output {k - len(inputs)}"
        if v.device[0] != KDL_CUDA:
            raise ValueError(f"{what} is not on a CUDA device (DLPack device {v.device})")
        if not _matches(v, dtype, shape) or not v.contiguous:
            raise ValueError(f"{what}: expected a contiguous {np.dtype(dtype)}{list(shape)}, "
                             f"got {v.dtype}{list(v.shape)}")
        if v.pointer % abi.ALIGN:      # kernels make 16-byte accesses (codegen/lanes.py)
            raise ValueError(f"{what} is not {abi.ALIGN}-byte aligned (a view into a larger "
                             "array?); tfjit's kernels need every buffer aligned")
        if ordinal is not None and v.device[1] != ordinal:
            raise ValueError(f"{what} is on GPU {v.device[1]}, the others on {ordinal}")
        ordinal = v.device[1]
    dev = Device.get(ordinal or 0)
    n_in = len(program.inputs)
    _execute(dev, program, [v.pointer for v in views[:n_in]], [v.pointer for v in views[n_in:]])
    drv = dev.drv
    for k, src in enumerate(program.output_source):
        if src >= 0:
            out, inp = views[n_in + k], views[src]
            nbytes = int(np.prod(out.shape, dtype=np.int64)) * np.dtype(program.outputs[k][0]).itemsize
            _check("cuMemcpyDtoD", drv.cuMemcpyDtoD(out.pointer, inp.pointer, nbytes))
