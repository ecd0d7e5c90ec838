// The CUDA driver as TfjitLaunch's GPU kernel (launch_op_gpu.cc) uses it: opened with
// dlopen at the first GPU launch, never linked, so the op library of a CUDA build of
// TensorFlow still loads on a machine without a driver (where TF runs on the CPU); and
// the modules it loaded, once per (executable, CUcontext). Included by
// launch_op_gpu.cc only, under GOOGLE_CUDA.
#ifndef TFJIT_RUNTIME_CUDA_DRIVER_H_
#define TFJIT_RUNTIME_CUDA_DRIVER_H_

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cuda.h"   // CUDA's driver API: types and prototypes only
#include "tensorflow/core/platform/errors.h"
#include "gpu_abi.h"

namespace tensorflow {
namespace tfjit {

// The driver functions used, by their cuda.h names; cuda.h maps some to versioned
// symbols (cuCtxPushCurrent -> cuCtxPushCurrent_v2), which are what dlsym looks up.
#define TFJIT_CUDA_FUNCTIONS(X)                                                          \
  X(cuGetErrorName) X(cuStreamGetCtx) X(cuCtxPushCurrent) X(cuCtxPopCurrent)             \
  X(cuCtxGetDevice) X(cuDeviceGetAttribute) X(cuModuleLoadData) X(cuModuleUnload)        \
  X(cuModuleGetFunction) X(cuOccupancyMaxPotentialBlockSize) X(cuLaunchKernel)           \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuStreamSynchronize)
#define TFJIT_STR(x) #x
#define TFJIT_SYMBOL(x) TFJIT_STR(x)

struct Driver {
#define TFJIT_MEMBER(fn) decltype(&fn) fn##_ = nullptr;
  TFJIT_CUDA_FUNCTIONS(TFJIT_MEMBER)
#undef TFJIT_MEMBER
  absl::Status status;   // why the driver could not be opened, if it could not
};

inline const Driver& Cuda() {
  static const Driver* driver = [] {
    auto* d = new Driver;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      d->status = absl::FailedPreconditionError(absl::StrCat(
          "tfjit's GPU launch cannot open the CUDA driver (libcuda.so.1): ", dlerror()));
      return d;
    }
#define TFJIT_RESOLVE(fn)                                                                  \
    d->fn##_ = reinterpret_cast<decltype(&fn)>(dlsym(lib, TFJIT_SYMBOL(fn)));                \
    if (d->fn##_ == nullptr && d->status.ok()) {                                           \
      d->status = absl::FailedPreconditionError(absl::StrCat(                              \
          "tfjit's GPU launch: the CUDA driver has no ", TFJIT_SYMBOL(fn)));               \
    }
    TFJIT_CUDA_FUNCTIONS(TFJIT_RESOLVE)
#undef TFJIT_RESOLVE
    return d;
  }();
  return *driver;
}

inline absl::Status Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  if (Cuda().cuGetErrorName_(r, &name) != CUDA_SUCCESS || name == nullptr) name = "?";
  return absl::InternalError(absl::StrCat("tfjit GPU launch: ", what, " failed: ", name,
                                          " (", static_cast<int>(r), ")"));
}

// Makes `context` current on this thread for the scope (TF's own may be another).
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context) {
    status_ = Check(Cuda().cuCtxPushCurrent_(context), "cuCtxPushCurrent");
  }
  ~ScopedContext() {
    CUcontext popped;
    if (status_.ok()) Cuda().cuCtxPopCurrent_(&popped);
  }
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// ---------------------------------------------------------------- modules
struct LoadedModule {
  CUmodule module = nullptr;
  std::vector<CUfunction> functions;   // per step
  std::vector<int> blocks;             // per step: threads per block
  int sms = 0;                         // the device's multiprocessors
};

// Modules loaded per (executable, context); entries live until TfjitGpuClearCache.
struct ModuleCache {
  absl::Mutex mu;
  std::map<std::pair<const TfjitGpuExecutable*, CUcontext>, LoadedModule> map
      ABSL_GUARDED_BY(mu);
};
inline ModuleCache& Modules() {
  static ModuleCache* cache = new ModuleCache;
  return *cache;
}

// The executable's module in `context` (current on this thread), loading it once.
inline absl::Status LoadModule(const TfjitGpuExecutable& exe, CUcontext context,
                        const LoadedModule** out) {
  const Driver& cu = Cuda();
  ModuleCache& cache = Modules();
  absl::MutexLock l(&cache.mu);
  auto it = cache.map.find({&exe, context});
  if (it != cache.map.end()) {
    *out = &it->second;
    return absl::OkStatus();
  }
  LoadedModule m;
  CUdevice device;
  TF_RETURN_IF_ERROR(Check(cu.cuCtxGetDevice_(&device), "cuCtxGetDevice"));
  TF_RETURN_IF_ERROR(Check(cu.cuDeviceGetAttribute_(
      &m.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute"));
  TF_RETURN_IF_ERROR(Check(cu.cuModuleLoadData_(&m.module, exe.image), "cuModuleLoadData"));
  for (int s = 0; s < exe.num_steps; ++s) {
    const TfjitGpuStep& step = exe.steps[s];
    CUfunction fn;
    absl::Status found = Check(cu.cuModuleGetFunction_(&fn, m.module, step.entry),
                               "cuModuleGetFunction");
    int block = step.block;
    if (found.ok() && block <= 0) {
      int min_grid = 0;
      found = Check(cu.cuOccupancyMaxPotentialBlockSize_(&min_grid, &block, fn, nullptr, 0, 0),
                    "cuOccupancyMaxPotentialBlockSize");
    }
    if (!found.ok()) {
      cu.cuModuleUnload_(m.module);
      return absl::Status(found.code(), absl::StrCat(found.message(), " (entry ", step.entry, ")"));
    }
    m.functions.push_back(fn);
    // Whole warps per block: entries whose warps share rows (codegen/lanes.py) need
    // every warp whole (runtime/cuda.py's whole_warps, the same rule).
    m.blocks.push_back(std::max(block / 32 * 32, 32));
  }
  *out = &cache.map.emplace(std::make_pair(&exe, context), std::move(m)).first->second;
  return absl::OkStatus();
}

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_CUDA_DRIVER_H_
