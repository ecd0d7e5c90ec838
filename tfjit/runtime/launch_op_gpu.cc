// The DEVICE_GPU kernel of TfjitLaunch: runs tfjit's PTX (codegen/nvptx.py) on
// TensorFlow's own CUDA stream, with every buffer from TF's device allocator.
// Built into the op library only when the installed TensorFlow is a CUDA build
// (runtime/build.py); without GOOGLE_CUDA this file compiles to nothing.
//
// NOT YET RUN ON A GPU: it is compiled against the CUDA tensorflow wheel's
// headers (tools/check_gpu_launch_build.py), nothing more.
//
// Opt-in per node: the kernel is registered with the label "tfjit_gpu"
// (kTfjitGpuLabel), so TF's placer sees it only for a TfjitLaunch node whose
// `_kernel` attr says so (runtime/launch_gpu.py sets it). Every other node keeps
// the CPU kernel, even with a GPU present: without the label a GPU kernel would
// pull every unplaced TfjitLaunch onto the GPU, where dot, convolution and
// control flow do not compile yet.
//
// A launch, on the thread TF calls ComputeAsync on:
//   1. the variables are looked up and locked (variables.h, as the CPU kernel);
//      constant arguments (attr constant_args) are read to the host: they are
//      part of the signature. `args` is one list, so they cannot be declared
//      HostMemory one by one; one in device memory is copied with a wait on TF's
//      stream (int32 values TF keeps on the host need none);
//   2. the executable comes from the process-wide cache keyed by cluster,
//      device arch and signature, or from the GPU compile callback into Python
//      (TfjitGpuCompileCallback below), which may answer "run the fallback";
//   3. the PTX is loaded once per (executable, CUcontext) with the driver's JIT
//      (cuModuleLoadData), each entry's block size asked of the occupancy
//      calculator unless the executable fixes it;
//   4. outputs are allocated with ctx->allocate_output, and ONE device temp
//      holds the status block, the buffer table and the arena; one pinned host
//      temp holds the table's source and the status read back;
//   5. on TF's stream (the op device context's stream, its CUstream from
//      stream_executor's platform_specific_handle): the table and a zeroed status
//      are copied in, each step is one cuLaunchKernel, the status is copied out;
//   6. completion: without variable updates, asynchronously: TF's EventMgr calls
//      back once the stream has passed the copy, and a nonzero status becomes the
//      op's InvalidArgumentError (the CPU kernel's text). With variable updates
//      the kernel waits for the stream (cuStreamSynchronize) while the variables
//      are locked, then swaps in the new values only if every step succeeded, as
//      the CPU kernel does. All steps are enqueued at once: a step after a failing
//      one still runs (kernels never index out of bounds), its results discarded.
//
// The CUDA driver (libcuda.so.1) is opened with dlopen at the first GPU launch,
// never linked: the op library must load on a machine without a driver, where a
// CUDA build of TensorFlow runs on the CPU.
//
//   int32_t TfjitGpuCompileCallback(... the CPU callback's arguments ...,
//       int32_t arch, const TfjitGpuExecutable** out, char* error, int32_t error_len);
//     arch: the device's compute capability (90 for sm_90); otherwise as
//     TfjitCompileCallback (launch_op.cc), returning a TfjitGpuExecutable (gpu_abi.h).
//   extern "C" void TfjitSetGpuCompileCallback(TfjitGpuCompileCallback cb);
//   extern "C" void TfjitGpuClearCache();   // must not race with running launches
//   extern "C" void TfjitGpuAbiLayout(int64_t* out);
#if GOOGLE_CUDA

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tensorflow/core/common_runtime/device/device_event_mgr.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "xla/stream_executor/stream.h"
#include "abi.h"
#include "cuda_driver.h"
#include "gpu_abi.h"
#include "launch_common.h"
#include "launch_outputs.h"
#include "variables.h"

extern "C" {
typedef int32_t (*TfjitGpuCompileCallback)(
    const char* cluster, const char* cluster_def, int64_t cluster_def_len,
    int32_t num_inputs, const int32_t* dtypes, const int32_t* ranks,
    const int64_t* dims, const void* const* values, const int64_t* value_bytes,
    int64_t executions, int32_t can_fall_back, int32_t arch,
    const TfjitGpuExecutable** out, char* error, int32_t error_len);
}

namespace tensorflow {
namespace {

using tfjit::Check;
using tfjit::Cuda;
using tfjit::Data;
using tfjit::Driver;
using tfjit::ErrorText;
using tfjit::Invalid;
using tfjit::LoadedModule;
using tfjit::LoadModule;
using tfjit::ScopedContext;
using tfjit::TypeName;
using tfjit::ValidateExecutable;
using tfjit::Variables;

constexpr const char* kTfjitGpuLabel = "tfjit_gpu";
constexpr int kErrorLen = 4096;
constexpr int32_t kCallbackFallbackOnce = 2;
constexpr int32_t kCallbackFallbackAlways = 3;
const TfjitGpuExecutable kFallbackMarker{};

// ---------------------------------------------------------------- executables
std::atomic<TfjitGpuCompileCallback> g_callback{nullptr};

struct ExecutableCache {
  absl::Mutex mu;
  std::map<std::string, const TfjitGpuExecutable*> map ABSL_GUARDED_BY(mu);
};
ExecutableCache& Executables() {
  static ExecutableCache* cache = new ExecutableCache;
  return *cache;
}

int64_t AlignUp(int64_t n) { return (n + kTfjitAlign - 1) / kTfjitAlign * kTfjitAlign; }

class TfjitLaunchGpuOp : public AsyncOpKernel {
 public:
  explicit TfjitLaunchGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, tfjit::ReadLaunchAttrs(ctx, &cluster_, &fallback_, &is_constant_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    executions_.fetch_add(1, std::memory_order_relaxed);
    OP_REQUIRES_OK_ASYNC(ctx, Cuda().status, done);
    se::Stream* stream = ctx->op_device_context() ? ctx->op_device_context()->stream() : nullptr;
    OP_REQUIRES_ASYNC(ctx, stream != nullptr && stream->platform_specific_handle().stream,
                      absl::InternalError(absl::StrCat("tfjit cluster ", cluster_,
                                                       ": no CUDA stream on this device")),
                      done);
    CUstream cu_stream = static_cast<CUstream>(stream->platform_specific_handle().stream);
    CUcontext context;
    OP_REQUIRES_OK_ASYNC(ctx, Check(Cuda().cuStreamGetCtx_(cu_stream, &context),
                                    "cuStreamGetCtx"), done);
    ScopedContext scope(context);
    OP_REQUIRES_OK_ASYNC(ctx, scope.status(), done);

    Variables vars;
    OP_REQUIRES_OK_ASYNC(ctx, vars.Resolve(ctx), done);
    const TfjitGpuExecutable* exe = &kFallbackMarker;
    if (vars.uninitialized() >= 0) {   // no signature without a value: TF decides
      OP_REQUIRES_ASYNC(ctx, fallback_ != nullptr,
                        absl::FailedPreconditionError(absl::StrCat(
                            "tfjit cluster ", cluster_, ": resource variable input ",
                            vars.uninitialized(), " is uninitialized")),
                        done);
    } else {
      std::vector<std::string> constants;
      OP_REQUIRES_OK_ASYNC(ctx, ReadConstants(ctx, cu_stream, &constants), done);
      OP_REQUIRES_OK_ASYNC(ctx, Lookup(ctx, vars, constants, context, &exe), done);
    }
    if (exe == &kFallbackMarker) {
      vars.Unlock();   // the fallback reads the variables itself
      fallback_->Run(ctx, cluster_, std::move(done));
      return;
    }
    const LoadedModule* module = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, LoadModule(*exe, context, &module), done);
    auto launch = std::make_shared<Launch>();
    OP_REQUIRES_OK_ASYNC(ctx, Enqueue(ctx, vars, *exe, *module, cu_stream, launch.get()), done);
    if (exe->host.num_updates > 0) {   // swap values in only after every step succeeded
      OP_REQUIRES_OK_ASYNC(ctx, Check(Cuda().cuStreamSynchronize_(cu_stream),
                                      "cuStreamSynchronize"), done);
      OP_REQUIRES_OK_ASYNC(ctx, Finish(*exe, *launch, vars), done);
      done();
      return;
    }
    vars.Unlock();   // TF's stream orders the reads before any later write
    const DeviceBase::AcceleratorDeviceInfo* info =
        ctx->device()->tensorflow_accelerator_device_info();
    OP_REQUIRES_ASYNC(ctx, info != nullptr && info->event_mgr != nullptr,
                      absl::InternalError(absl::StrCat("tfjit cluster ", cluster_,
                                                       ": the GPU device has no EventMgr")),
                      done);
    info->event_mgr->ThenExecute(stream, [this, ctx, exe, launch, done = std::move(done)] {
      Variables none;
      ctx->SetStatus(Finish(*exe, *launch, none));
      done();
    });
  }

 private:
  // What a launch keeps until its status is read: the pinned host memory the
  // status is copied into, and the variable updates (swapped in by Finish).
  struct Launch {
    Tensor host;                               // pinned: [status | buffer table]
    absl::InlinedVector<Tensor, 4> updates;
    absl::InlinedVector<bool, 4> in_place;
  };

  // The bytes of each constant argument ("" for the other inputs), on the host.
  absl::Status ReadConstants(OpKernelContext* ctx, CUstream stream,
                             std::vector<std::string>* out) {
    out->assign(ctx->num_inputs(), std::string());
    bool waited = false;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      if (!is_constant_[i]) continue;
      const absl::string_view data = ctx->input(i).tensor_data();
      if (ctx->input_memory_type(i) == HOST_MEMORY || data.empty()) {
        out->at(i).assign(data.data(), data.size());
        continue;
      }
      out->at(i).resize(data.size());
      TF_RETURN_IF_ERROR(Check(Cuda().cuMemcpyDtoHAsync_(
          &out->at(i)[0], reinterpret_cast<CUdeviceptr>(data.data()), data.size(), stream),
          "cuMemcpyDtoHAsync (a constant argument)"));
      waited = true;
    }
    if (waited) {
      TF_RETURN_IF_ERROR(Check(Cuda().cuStreamSynchronize_(stream), "cuStreamSynchronize"));
    }
    return absl::OkStatus();
  }

  absl::Status Lookup(OpKernelContext* ctx, const Variables& vars,
                      const std::vector<std::string>& constants, CUcontext context,
                      const TfjitGpuExecutable** exe) {
    CUdevice device;
    int major = 0, minor = 0;
    const Driver& cu = Cuda();
    TF_RETURN_IF_ERROR(Check(cu.cuCtxGetDevice_(&device), "cuCtxGetDevice"));
    TF_RETURN_IF_ERROR(Check(cu.cuDeviceGetAttribute_(
        &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cuDeviceGetAttribute"));
    TF_RETURN_IF_ERROR(Check(cu.cuDeviceGetAttribute_(
        &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cuDeviceGetAttribute"));
    const int32_t arch = major * 10 + minor;
    // cluster, NUL, arch, then per input: dtype, rank, dims, and a constant's bytes
    std::string key = cluster_;
    key.push_back('\0');
    auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(arch);
    absl::InlinedVector<int32_t, 8> dtypes, ranks;
    absl::InlinedVector<int64_t, 16> dims;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const TensorShape& shape = vars.value(ctx, i).shape();
      dtypes.push_back(vars.signature_dtype(ctx, i));
      ranks.push_back(shape.dims());
      put(dtypes.back());
      put(shape.dims());
      for (int d = 0; d < shape.dims(); ++d) {
        dims.push_back(shape.dim_size(d));
        put(shape.dim_size(d));
      }
      if (is_constant_[i]) {
        put(static_cast<int64_t>(constants[i].size()));
        key += constants[i];
      }
    }
    ExecutableCache& cache = Executables();
    {
      absl::MutexLock l(&cache.mu);
      auto it = cache.map.find(key);
      if (it != cache.map.end()) {
        *exe = it->second;
        return absl::OkStatus();
      }
    }
    TfjitGpuCompileCallback callback = g_callback.load(std::memory_order_acquire);
    if (callback == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tfjit's GPU compiler is not registered: import tfjit first (cluster ", cluster_, ")"));
    }
    const auto& attrs = def().attr();
    auto def_it = attrs.find("cluster_def");
    const std::string empty;
    const std::string& cluster_def = def_it == attrs.end() ? empty : def_it->second.s();
    absl::InlinedVector<const void*, 8> values(ctx->num_inputs(), nullptr);
    absl::InlinedVector<int64_t, 8> value_bytes(ctx->num_inputs(), 0);
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      if (!is_constant_[i]) continue;
      values[i] = constants[i].data();
      value_bytes[i] = static_cast<int64_t>(constants[i].size());
    }
    char error[kErrorLen] = {0};
    const TfjitGpuExecutable* result = nullptr;
    const int32_t rc = callback(cluster_.c_str(), cluster_def.data(),
                                static_cast<int64_t>(cluster_def.size()), ctx->num_inputs(),
                                dtypes.data(), ranks.data(), dims.data(), values.data(),
                                value_bytes.data(), executions_.load(std::memory_order_relaxed),
                                fallback_ ? 1 : 0, arch, &result, error, kErrorLen);
    error[kErrorLen - 1] = '\0';
    if (fallback_ && (rc == kCallbackFallbackOnce || rc == kCallbackFallbackAlways)) {
      *exe = &kFallbackMarker;
      if (rc == kCallbackFallbackOnce) return absl::OkStatus();
      result = &kFallbackMarker;
    } else if (rc != 0) {
      if (error[0] == '\0') return Invalid("tfjit failed to compile cluster ", cluster_);
      return absl::InvalidArgumentError(error);
    } else if (result == nullptr) {
      return absl::InternalError(absl::StrCat(
          "tfjit GPU compile callback returned no executable for cluster ", cluster_));
    } else {
      TF_RETURN_IF_ERROR(Validate(ctx, *result, arch));
    }
    absl::MutexLock l(&cache.mu);
    *exe = cache.map.emplace(key, result).first->second;   // first insert wins
    return absl::OkStatus();
  }

  // The executable must agree with this node's inputs and Tout, and with the device.
  absl::Status Validate(OpKernelContext* ctx, const TfjitGpuExecutable& gpu, int32_t arch) {
    const TfjitExecutable& exe = gpu.host;
    if (gpu.arch > arch || gpu.image == nullptr || exe.num_steps != 0) {
      return Invalid("tfjit GPU executable for cluster ", cluster_, " targets sm_", gpu.arch,
                     "; this GPU is sm_", arch);
    }
    return ValidateExecutable(ctx, cluster_, exe);
  }

  // Allocates, copies the buffer table in and enqueues every step and the status
  // read-back on `stream`; nothing here waits for the GPU.
  absl::Status Enqueue(OpKernelContext* ctx, const Variables& vars, const TfjitGpuExecutable& gpu,
                       const LoadedModule& module, CUstream stream, Launch* launch) {
    const TfjitExecutable& exe = gpu.host;
    const int n_in = exe.num_inputs, n_out = exe.num_outputs, n_tmp = exe.num_temps;
    const int64_t table_words = n_in + n_out + n_tmp + 2;
    const int64_t table_at = sizeof(TfjitStatus);            // [status | table | arena]
    const int64_t arena_at = AlignUp(table_at + table_words * 8);
    const int64_t host_bytes = table_at + table_words * 8;
    AllocatorAttributes pinned;
    pinned.set_on_host(true);
    pinned.set_gpu_compatible(true);
    TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT8, TensorShape({host_bytes}), &launch->host,
                                          pinned));
    Tensor scratch;   // freed at return: TF's allocator orders its reuse on this stream
    TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT8, TensorShape({arena_at + exe.arena_bytes}),
                                          &scratch));
    const uint64_t device = reinterpret_cast<uint64_t>(Data(scratch));
    if (device % kTfjitAlign != 0) {
      return absl::InternalError("tfjit: the GPU scratch buffer is not kTfjitAlign-byte aligned");
    }
    char* host = static_cast<char*>(Data(launch->host));
    std::memset(host, 0, table_at);                          // the status starts at 0
    uint64_t* bufs = reinterpret_cast<uint64_t*>(host + table_at);
    for (int i = 0; i < n_in; ++i) {
      bufs[i] = reinterpret_cast<uint64_t>(Data(vars.value(ctx, i)));
      // kernels take a thread's elements in aligned 16-byte accesses (codegen/lanes.py),
      // which fault on a tensor that starts inside another's buffer
      if (bufs[i] % kTfjitAlign != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tfjit cluster ", cluster_, ": input ", i, " is not ", kTfjitAlign,
            "-byte aligned on the GPU (a view into another tensor's buffer)"));
      }
    }
    launch->updates.resize(exe.num_updates);
    launch->in_place.assign(exe.num_updates, false);
    absl::InlinedVector<void*, 8> outputs(n_out, nullptr);
    TF_RETURN_IF_ERROR(tfjit::SetOutputs(ctx, vars, cluster_, exe, outputs.data(),
                                         &launch->updates, &launch->in_place,
                                         /*bounded=*/nullptr));   // Where: refused on the GPU
    for (int o = 0; o < n_out; ++o) bufs[n_in + o] = reinterpret_cast<uint64_t>(outputs[o]);
    for (int t = 0; t < n_tmp; ++t) bufs[n_in + n_out + t] = device + arena_at + exe.temp_offsets[t];
    bufs[n_in + n_out + n_tmp] = device;                     // status
    bufs[n_in + n_out + n_tmp + 1] = 0;                      // no RuntimeContext on the GPU
    const Driver& cu = Cuda();
    TF_RETURN_IF_ERROR(Check(cu.cuMemcpyHtoDAsync_(device, host, host_bytes, stream),
                             "cuMemcpyHtoDAsync"));
    CUdeviceptr table = device + table_at;
    for (int s = 0; s < gpu.num_steps; ++s) {
      int64_t rows = gpu.steps[s].rows;
      if (rows <= 0) continue;
      const int64_t block = module.blocks[s];
      const int64_t per_sm = std::max<int32_t>(gpu.steps[s].max_blocks_per_sm, 1);
      const int64_t grid =
          std::max<int64_t>(1, std::min((rows + block - 1) / block, module.sms * per_sm));
      void* params[] = {&table, &rows};
      TF_RETURN_IF_ERROR(Check(cu.cuLaunchKernel_(module.functions[s],
                                                  static_cast<unsigned>(grid), 1, 1,
                                                  static_cast<unsigned>(block), 1, 1, 0, stream,
                                                  params, nullptr),
                               "cuLaunchKernel"));
    }
    return Check(cu.cuMemcpyDtoHAsync_(host, device, sizeof(TfjitStatus), stream),
                 "cuMemcpyDtoHAsync (the status)");
  }

  // After the stream passed the launch: its status as the op's, and the variable
  // updates swapped in when every step succeeded (`vars` locked if there are any).
  absl::Status Finish(const TfjitGpuExecutable& gpu, const Launch& launch,
                      const Variables& vars) {
    const TfjitExecutable& exe = gpu.host;
    TfjitStatus status;
    std::memcpy(&status, launch.host.tensor_data().data(), sizeof(status));
    if (status.code == 0) {
      for (int u = 0; u < exe.num_updates; ++u) {
        Var* var = vars.var(exe.update_input[u]);
        if (!launch.in_place[u]) *var->tensor() = launch.updates[u];
        tfjit::CountUpdate(launch.in_place[u]);
        var->is_initialized = true;
      }
      return absl::OkStatus();
    }
    if (status.code < 0 || status.code > exe.num_messages) {
      return Invalid("tfjit kernel reported unknown error code ", status.code,
                     " (in tfjit cluster ", cluster_, ")");
    }
    return Invalid(ErrorText(exe.messages[status.code - 1], status), " (in tfjit cluster ",
                   cluster_, ")");
  }

  std::string cluster_;
  std::unique_ptr<tfjit::FallbackRunner> fallback_;   // null: no fallback function
  std::vector<bool> is_constant_;   // per input: a constant argument (attr constant_args)
  std::atomic<int64_t> executions_{0};
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfjitLaunch").Device(DEVICE_GPU).Label(kTfjitGpuLabel),
                        TfjitLaunchGpuOp);

}  // namespace tensorflow

#define TFJIT_EXPORT extern "C" __attribute__((visibility("default")))

TFJIT_EXPORT void TfjitGpuAbiLayout(int64_t* out) { TfjitGpuAbiLayoutOf(out); }

TFJIT_EXPORT void TfjitSetGpuCompileCallback(TfjitGpuCompileCallback cb) {
  tensorflow::g_callback.store(cb, std::memory_order_release);
}

TFJIT_EXPORT void TfjitGpuClearCache() {
  tensorflow::ExecutableCache& exes = tensorflow::Executables();
  absl::MutexLock l(&exes.mu);
  exes.map.clear();
  tensorflow::tfjit::ModuleCache& modules = tensorflow::tfjit::Modules();
  absl::MutexLock m(&modules.mu);
  const tensorflow::tfjit::Driver& cu = tensorflow::tfjit::Cuda();
  for (auto& [key, loaded] : modules.map) {   // unloaded in their own context
    CUcontext popped;
    if (cu.status.ok() && cu.cuCtxPushCurrent_(key.second) == CUDA_SUCCESS) {
      cu.cuModuleUnload_(loaded.module);
      cu.cuCtxPopCurrent_(&popped);
    }
  }
  modules.map.clear();
}

#endif  // GOOGLE_CUDA
