// The GPU executable: what the DEVICE_GPU kernel of TfjitLaunch (launch_op_gpu.cc)
// runs, built by Python (runtime/launch_gpu.py, which mirrors these structs with
// ctypes and checks TfjitGpuAbiLayout at load, as abi.py does for abi.h).
//
// The program is runtime/cuda.py's: PTX with one `.entry (bufs, rows)` per step
// (codegen/nvptx.py: a grid-stride loop over [0, rows)), run in order on one
// stream; bufs is a device array of device pointers [inputs..., outputs...,
// temps..., status, 0] (no RuntimeContext on the GPU: GPU code makes no library
// calls). Everything but the code is the CPU's TfjitExecutable (`host`, with
// num_steps = 0): dtypes, output shapes, sources, temps, messages, updates.
#ifndef TFJIT_RUNTIME_GPU_ABI_H_
#define TFJIT_RUNTIME_GPU_ABI_H_

#include <cstddef>
#include <cstdint>

#include "abi.h"

extern "C" {
constexpr int32_t kTfjitGpuAbiVersion = 1;

// One kernel launch. block: threads per block (0: the driver's occupancy calculator
// chooses, per entry, as runtime/cuda.py does); the grid is ceil(rows / block)
// blocks, at most max_blocks_per_sm per multiprocessor (the entry's loop strides
// over the rest).
struct TfjitGpuStep {
  const char* entry;      // the PTX .entry name
  int64_t rows;
  int32_t block;
  int32_t max_blocks_per_sm;
};

struct TfjitGpuExecutable {
  TfjitExecutable host;   // everything but the code (host.num_steps == 0)
  const char* image;      // PTX text (NUL-terminated), loaded by the driver's JIT
  int64_t image_bytes;    // without the NUL
  int32_t arch;           // the compute capability the PTX targets: 90 for sm_90
  int32_t num_steps;
  const TfjitGpuStep* steps;
};

// [version, sizeof(TfjitGpuStep), sizeof(TfjitGpuExecutable),
//  offsetof(TfjitGpuExecutable, image), offsetof(TfjitGpuExecutable, steps)].
inline void TfjitGpuAbiLayoutOf(int64_t* out) {
  out[0] = kTfjitGpuAbiVersion;
  out[1] = sizeof(TfjitGpuStep);
  out[2] = sizeof(TfjitGpuExecutable);
  out[3] = offsetof(TfjitGpuExecutable, image);
  out[4] = offsetof(TfjitGpuExecutable, steps);
}
}

#endif  // TFJIT_RUNTIME_GPU_ABI_H_
