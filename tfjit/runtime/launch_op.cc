// TfjitLaunch: a TensorFlow op whose CPU kernel runs machine code produced by
// tfjit's compiler. Built on first use against the installed TensorFlow by
// tfjit/runtime/build.py; loaded by tfjit/runtime/launch.py.
//
// ABI shared with tfjit's code generator and Python runtime: abi.h (structs and
// constants, checked at load by runtime/abi.py).  What the kernels do with it:
//
//     (the temps are ranges of one arena, at temp_offsets; temps whose
//     lifetimes are disjoint may share bytes)
//     status points to a TfjitStatus (one cache line): code, 0 at the start of each
//     launch. On an error a kernel stores k > 0 in code (messages[k-1] describes
//     it) and may return early; any thread may store it. A kernel that reports
//     values with its error (a gather's bad index) sets code by compare-and-swap
//     from 0 and, when it won, writes them to detail[]; "{i}" in the message
//     (i < 7) reads as detail[i] in decimal. device is a tfjit::RuntimeContext
//     (runtime.h: this launch's OpKernelContext), passed to the runtime library
//     (tf_kernels.cc) by kernels that call it; a library call that fails leaves
//     TF's status there, and the op reports it after the kernel's message.
//     A kernel is called on disjoint [row_begin, row_end) ranges of [0, rows),
//     possibly concurrently from several threads.
//
//   Resource variables: an input of dtype DT_RESOURCE is a variable. The op
//     looks it up, locks every variable input (in address order, as TF's
//     training ops do) for the whole run, passes the variable's value buffer to
//     the kernels, and signs it as (value dtype + 100, value dims): TF's _REF
//     encoding. The executable's last num_updates outputs are new values for the
//     variables at update_input[u]. Where update_in_place[u] says the kernels
//     may (the old value is dead once the writing kernel read it) and no one
//     else holds the variable's tensor, the kernels write the new value over
//     the old one, as TF's training ops do; otherwise into a fresh buffer that
//     becomes the variable's value once every kernel succeeded (a reader
//     holding the old value keeps it). An error in a later kernel can then
//     leave an in-place variable partly updated, as an error in TF's own
//     sequence of training ops would.
//
//   Data-dependent shapes (Where, lower/where.py): an output with output_rows[o] = c
//     is written by the kernels into a temporary of its bound (output_dims), and its
//     row count into output c (an int64 scalar, one of the last num_counts outputs,
//     which are not the node's); once every kernel succeeded, the op allocates the
//     node's output with that many rows and copies them (launch_outputs.h).
//
//   TfjitStep, TfjitExecutable: abi.h. Executables are owned by Python
//     and read-only here. Steps run in order, each completing before the next
//     starts; cost_per_row (estimated CPU cycles per row) decides whether a
//     step runs inline or sharded. Temps are allocated per launch, 64-byte aligned.
//
//   Constant arguments (attr constant_args): inputs whose values the compiled code
//     was specialised to (graph/const_args.py: Reshape's shape, reduction axes, ...
//     fed at run time). Their bytes are part of the signature, after their dims, so
//     each distinct value has its own executable; they are host tensors (CPU).
//
//   int32_t TfjitCompileCallback(cluster, cluster_def, cluster_def_len,
//       num_inputs, dtypes, ranks, dims (concatenated), values, value_bytes,
//       executions, can_fall_back, out, error, error_len);
//     values[i]/value_bytes[i]: the data of constant argument i (NULL/0 for the
//     other inputs), valid during the call.
//     Called on a cache miss; returns 0 and sets *out, or nonzero and writes a
//     NUL-terminated message into error: 1 = error, 2 = run the fallback this
//     time (ask again next time), 3 = run the fallback for this signature from
//     now on. executions counts this node's runs so far; can_fall_back says
//     whether the node has a fallback function (auto mode). Called WITHOUT any
//     lock held here (the callback takes the GIL; holding a lock across it
//     could deadlock).
//
//   Fallback: a node clustered by auto mode carries its original subgraph as a
//   function (attr `fallback`, one entry); the op runs it through the function
//   library runtime, asynchronously, exactly as TF's own call ops do.
//   extern "C" void TfjitSetCompileCallback(TfjitCompileCallback cb);
//   extern "C" void TfjitClearCache();  // must not race with running launches
//   extern "C" void TfjitGetStats(int64_t* hits, int64_t* misses);
//
//   Kernel profile (tfjit.kernel_profile, api/kernel_profile.py): while on, each step's
//   wall time is added up per executable and step (a concurrent group counts as its
//   first step). TfjitSetKernelProfile(on) clears the table when it turns it on;
//   TfjitKernelProfile(out, capacity) writes up to capacity rows of 4 int64s
//   (executable address, step, nanoseconds, runs) and returns the number of rows.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "abi.h"
#include "arena.h"
#include "launch_common.h"
#include "launch_outputs.h"
#include "runtime.h"
#include "variables.h"

extern "C" {
// The layout this library was built with (abi.h), which runtime/abi.py checks at load.
void TfjitAbiLayout(int64_t* out) { TfjitAbiLayoutOf(out); }

typedef int32_t (*TfjitCompileCallback)(
    const char* cluster, const char* cluster_def, int64_t cluster_def_len,
    int32_t num_inputs, const int32_t* dtypes, const int32_t* ranks,
    const int64_t* dims, const void* const* values, const int64_t* value_bytes,
    int64_t executions, int32_t can_fall_back,
    const TfjitExecutable** out, char* error, int32_t error_len);
}

namespace tensorflow {
namespace {

using tfjit::Variables;

using tfjit::Data;
using tfjit::ErrorText;
using tfjit::Invalid;
using tfjit::TypeName;
using tfjit::ValidateExecutable;

constexpr int kErrorLen = 4096;

std::atomic<TfjitCompileCallback> g_callback{nullptr};
std::atomic<int64_t> g_hits{0};
std::atomic<int64_t> g_misses{0};
// Bumped by TfjitClearCache so per-kernel remembered executables expire.
std::atomic<uint64_t> g_generation{1};
// Cached in place of an executable: this signature runs the fallback function.
const TfjitExecutable kFallbackMarker{};
constexpr int32_t kCallbackFallbackOnce = 2;
constexpr int32_t kCallbackFallbackAlways = 3;

struct GlobalCache {
  absl::Mutex mu;
  std::unordered_map<std::string, const TfjitExecutable*> map ABSL_GUARDED_BY(mu);
};
GlobalCache& Cache() {
  static GlobalCache* cache = new GlobalCache;
  return *cache;
}

std::atomic<bool> g_profile{false};
struct StepTimes {
  std::vector<int64_t> ns, runs;
};
struct KernelProfile {
  absl::Mutex mu;
  std::unordered_map<const TfjitExecutable*, StepTimes> steps ABSL_GUARDED_BY(mu);
};
KernelProfile& Profile() {
  static KernelProfile* profile = new KernelProfile;
  return *profile;
}

void RecordStep(const TfjitExecutable* exe, int step, int64_t ns) {
  KernelProfile& profile = Profile();
  absl::MutexLock l(&profile.mu);
  StepTimes& times = profile.steps[exe];
  if (times.ns.empty()) {
    times.ns.assign(exe->num_steps, 0);
    times.runs.assign(exe->num_steps, 0);
  }
  times.ns[step] += ns;
  times.runs[step] += 1;
}

class TfjitLaunchOp : public AsyncOpKernel {
 public:
  explicit TfjitLaunchOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, tfjit::ReadLaunchAttrs(ctx, &cluster_, &fallback_, &is_constant_));
    has_fallback_ = fallback_ != nullptr;
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    executions_.fetch_add(1, std::memory_order_relaxed);
    Variables vars;
    OP_REQUIRES_OK_ASYNC(ctx, vars.Resolve(ctx), done);
    const TfjitExecutable* exe = &kFallbackMarker;
    if (vars.uninitialized() >= 0) {   // no signature without a value: TF decides
      OP_REQUIRES_ASYNC(ctx, has_fallback_,
                        absl::FailedPreconditionError(absl::StrCat(
                            "tfjit cluster ", cluster_, ": resource variable input ",
                            vars.uninitialized(), " is uninitialized")),
                        done);
    } else {
      OP_REQUIRES_OK_ASYNC(ctx, Lookup(ctx, vars, &exe), done);
    }
    if (exe == &kFallbackMarker) {
      vars.Unlock();   // the fallback reads the variables itself
      fallback_->Run(ctx, cluster_, std::move(done));
      return;
    }
    OP_REQUIRES_OK_ASYNC(ctx, Run(ctx, vars, *exe), done);
    vars.Unlock();
    done();
  }

 private:
  // Calls emit(v) for each input's dtype, rank and dims, and a constant
  // argument's byte count and bytes (in 8-byte words, zero-padded): the signature.
  template <typename Emit>
  void ForSignature(OpKernelContext* ctx, const Variables& vars, Emit emit) const {
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const TensorShape& shape = vars.value(ctx, i).shape();
      emit(vars.signature_dtype(ctx, i));
      emit(shape.dims());
      for (int d = 0; d < shape.dims(); ++d) emit(shape.dim_size(d));
      if (!is_constant_[i]) continue;
      const absl::string_view data = ctx->input(i).tensor_data();
      emit(static_cast<int64_t>(data.size()));
      for (size_t p = 0; p < data.size(); p += sizeof(int64_t)) {
        int64_t word = 0;
        std::memcpy(&word, data.data() + p, std::min(sizeof(int64_t), data.size() - p));
        emit(word);
      }
    }
  }

  // Fast path, no allocation: the executable this kernel used last, if the
  // signature is unchanged and no TfjitClearCache happened since.
  bool LookupLast(OpKernelContext* ctx, const Variables& vars, uint64_t generation,
                  const TfjitExecutable** exe) {
    absl::MutexLock l(&last_mu_);
    if (last_exe_ == nullptr || last_generation_ != generation) return false;
    size_t pos = 0;
    bool same = true;
    ForSignature(ctx, vars, [&](int64_t v) {
      same = same && pos < last_signature_.size() && last_signature_[pos++] == v;
    });
    if (!same || pos != last_signature_.size()) return false;
    *exe = last_exe_;
    return true;
  }

  void Remember(OpKernelContext* ctx, const Variables& vars, uint64_t generation,
                const TfjitExecutable* exe) {
    absl::MutexLock l(&last_mu_);
    last_signature_.clear();
    ForSignature(ctx, vars, [this](int64_t v) { last_signature_.push_back(v); });
    last_exe_ = exe;
    last_generation_ = generation;
  }

  absl::Status Lookup(OpKernelContext* ctx, const Variables& vars, const TfjitExecutable** exe) {
    const uint64_t generation = g_generation.load(std::memory_order_acquire);
    if (LookupLast(ctx, vars, generation, exe)) {
      g_hits.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    std::string key = cluster_;  // cluster, NUL, the signature as raw int64s
    key.push_back('\0');
    ForSignature(ctx, vars, [&key](int64_t v) {
      key.append(reinterpret_cast<const char*>(&v), sizeof(v));
    });
    GlobalCache& cache = Cache();
    const TfjitExecutable* found = nullptr;
    {
      absl::MutexLock l(&cache.mu);
      auto it = cache.map.find(key);
      if (it != cache.map.end()) found = it->second;
    }
    if (found != nullptr) {
      g_hits.fetch_add(1, std::memory_order_relaxed);
    } else {
      g_misses.fetch_add(1, std::memory_order_relaxed);
      bool remember = true;
      TF_RETURN_IF_ERROR(Compile(ctx, vars, &found, &remember));
      if (!remember) {   // fallback this time only: ask the compiler again next time
        *exe = found;
        return absl::OkStatus();
      }
      absl::MutexLock l(&cache.mu);
      found = cache.map.emplace(key, found).first->second;  // first insert wins
    }
    if (found != &kFallbackMarker) TF_RETURN_IF_ERROR(Validate(ctx, *found));
    Remember(ctx, vars, generation, found);
    *exe = found;
    return absl::OkStatus();
  }

  absl::Status Compile(OpKernelContext* ctx, const Variables& vars, const TfjitExecutable** exe,
                       bool* remember) {
    TfjitCompileCallback callback = g_callback.load(std::memory_order_acquire);
    if (callback == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tfjit runtime not initialised: import tfjit first (cluster ", cluster_, ")"));
    }
    const auto& attrs = def().attr();
    auto def_it = attrs.find("cluster_def");
    const std::string empty;
    const std::string& cluster_def = def_it == attrs.end() ? empty : def_it->second.s();
    absl::InlinedVector<int32_t, 8> dtypes, ranks;
    absl::InlinedVector<int64_t, 16> dims;
    absl::InlinedVector<const void*, 8> values(ctx->num_inputs(), nullptr);
    absl::InlinedVector<int64_t, 8> value_bytes(ctx->num_inputs(), 0);
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const TensorShape& shape = vars.value(ctx, i).shape();
      dtypes.push_back(vars.signature_dtype(ctx, i));
      ranks.push_back(shape.dims());
      for (int d = 0; d < shape.dims(); ++d) dims.push_back(shape.dim_size(d));
      if (is_constant_[i]) {
        const absl::string_view data = ctx->input(i).tensor_data();
        values[i] = data.data();
        value_bytes[i] = static_cast<int64_t>(data.size());
      }
    }
    char error[kErrorLen] = {0};
    const TfjitExecutable* result = nullptr;
    const int32_t rc = callback(cluster_.c_str(), cluster_def.data(),
                                static_cast<int64_t>(cluster_def.size()),
                                ctx->num_inputs(), dtypes.data(), ranks.data(),
                                dims.data(), values.data(), value_bytes.data(),
                                executions_.load(std::memory_order_relaxed),
                                has_fallback_ ? 1 : 0, &result, error, kErrorLen);
    error[kErrorLen - 1] = '\0';
    if (has_fallback_ && (rc == kCallbackFallbackOnce || rc == kCallbackFallbackAlways)) {
      *exe = &kFallbackMarker;
      *remember = rc == kCallbackFallbackAlways;
      return absl::OkStatus();
    }
    if (rc != 0) {
      if (error[0] == '\0') return Invalid("tfjit failed to compile cluster ", cluster_);
      return absl::InvalidArgumentError(error);
    }
    if (result == nullptr) {
      return absl::InternalError(
          absl::StrCat("tfjit compile callback returned no executable for cluster ", cluster_));
    }
    *exe = result;
    return absl::OkStatus();
  }

  absl::Status Validate(OpKernelContext* ctx, const TfjitExecutable& exe) {
    return ValidateExecutable(ctx, cluster_, exe);
  }

  absl::Status Run(OpKernelContext* ctx, const Variables& vars, const TfjitExecutable& exe) {
    const int n_in = exe.num_inputs, n_out = exe.num_outputs, n_tmp = exe.num_temps;
    absl::InlinedVector<void*, 16> bufs(n_in + n_out + n_tmp + 2, nullptr);
    for (int i = 0; i < n_in; ++i) bufs[i] = Data(vars.value(ctx, i));
    absl::InlinedVector<Tensor, 4> updates(exe.num_updates);
    absl::InlinedVector<bool, 4> in_place(exe.num_updates, false);
    absl::InlinedVector<Tensor, 4> bounded;   // data-dependent shapes and their row counts
    TF_RETURN_IF_ERROR(tfjit::SetOutputs(ctx, vars, cluster_, exe, bufs.data() + n_in, &updates,
                                         &in_place, &bounded, tfjit::AdviseHugePages));
    Tensor arena;      // back to the cache when this launch ends (arena.h)
    if (n_tmp > 0) {
      arena = tfjit::Arenas().Take(&exe, exe.arena_bytes);
      if (arena.TotalBytes() == 0) {     // none idle (a default Tensor counts as initialised)
        TensorShape shape;
        TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape(
            {std::max<int64_t>(exe.arena_bytes, 1)}, &shape));
        TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT8, shape, &arena));
      }
      char* base = static_cast<char*>(Data(arena));
      if (reinterpret_cast<uintptr_t>(base) % kTfjitAlign != 0) {
        return absl::InternalError("tfjit: temp arena is not kTfjitAlign-byte aligned");
      }
      for (int t = 0; t < n_tmp; ++t) bufs[n_in + n_out + t] = base + exe.temp_offsets[t];
      tfjit::AdviseHugePages(base, exe.arena_bytes);
    }
    TfjitStatus status{};
    tfjit::RuntimeContext runtime;
    runtime.ctx = ctx;
    bufs[n_in + n_out + n_tmp] = &status;
    bufs.back() = &runtime;
    const DeviceBase::CpuWorkerThreads* workers = ctx->device()->tensorflow_cpu_worker_threads();
    const bool profile = g_profile.load(std::memory_order_relaxed);
    for (int s = 0; s < exe.num_steps && status.code == 0;) {
      const int first = s;
      const auto start = profile ? std::chrono::steady_clock::now()
                                 : std::chrono::steady_clock::time_point();
      if (exe.steps[s].group > 1) {     // tasks that share no memory (passes/concurrency.py)
        tfjit::RunGroup(workers, exe.steps + s, bufs.data(), bufs.size(), &status, &runtime);
        s += exe.steps[s].group;
      } else {
        RunStep(ctx, exe.steps[s], bufs.data());
        ++s;
      }
      if (profile) {
        RecordStep(&exe, first, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - start).count());
      }
    }
    if (arena.TotalBytes() > 0) tfjit::Arenas().Give(&exe, std::move(arena));
    if (status.code == 0) {
      for (int u = 0; u < exe.num_updates; ++u) {
        Var* var = vars.var(exe.update_input[u]);
        if (!in_place[u]) *var->tensor() = updates[u];
        tfjit::CountUpdate(in_place[u]);
        var->is_initialized = true;
      }
      return tfjit::SetBoundedOutputs(ctx, cluster_, exe, &bounded);
    }
    if (status.code < 0 || status.code > exe.num_messages) {
      return Invalid("tfjit kernel reported unknown error code ", status.code,
                     " (in tfjit cluster ", cluster_, ")");
    }
    const std::string text = ErrorText(exe.messages[status.code - 1], status);
    if (!runtime.error.ok()) {   // TF's kernel failed in a library call: keep its code
      return absl::Status(runtime.error.code(),
                          absl::StrCat(text, ": ", runtime.error.message(), " (in tfjit cluster ",
                                       cluster_, ")"));
    }
    return Invalid(text, " (in tfjit cluster ", cluster_, ")");
  }

  static void RunStep(OpKernelContext* ctx, const TfjitStep& step, void** bufs) {
    tfjit::RunSplit(ctx->device()->tensorflow_cpu_worker_threads(), step.fn, bufs, step.rows,
                    step.cost_per_row);
  }

  std::string cluster_;
  std::unique_ptr<tfjit::FallbackRunner> fallback_;   // null: no fallback function
  bool has_fallback_ = false;
  std::vector<bool> is_constant_;   // per input: a constant argument (attr constant_args)
  std::atomic<int64_t> executions_{0};
  absl::Mutex last_mu_;
  absl::InlinedVector<int64_t, 16> last_signature_ ABSL_GUARDED_BY(last_mu_);
  const TfjitExecutable* last_exe_ ABSL_GUARDED_BY(last_mu_) = nullptr;
  uint64_t last_generation_ ABSL_GUARDED_BY(last_mu_) = 0;
};

}  // namespace

REGISTER_OP("TfjitLaunch")
    .Input("args: Tin")
    .Output("results: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 0")
    .Attr("cluster: string")
    .Attr("cluster_def: string = ''")
    .Attr("output_shapes: list(shape) >= 0")
    .Attr("fallback: list(func) = []")
    .Attr("constant_args: list(int) = []")
    // Stateful, as XlaLaunch is: a cluster may read and write resource variables and
    // draw random numbers.  A stateless op with only variable writes was pruned from
    // a tf.function (its update lost), and was not among the ops a loop body must
    // finish, so a tf.while_loop ran one iteration's launch before the previous one's.
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      std::vector<PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("output_shapes", &shapes));
      if (static_cast<int>(shapes.size()) != c->num_outputs()) {
        return Invalid("TfjitLaunch: output_shapes has ", shapes.size(), " entries for ",
                       c->num_outputs(), " outputs");
      }
      for (int o = 0; o < c->num_outputs(); ++o) {
        shape_inference::ShapeHandle handle;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[o], &handle));
        c->set_output(o, handle);
      }
      return absl::OkStatus();
    })
    .Doc("Runs a tfjit-compiled cluster, compiling it on the first use of a signature.");

REGISTER_KERNEL_BUILDER(Name("TfjitLaunch").Device(DEVICE_CPU), TfjitLaunchOp);

}  // namespace tensorflow

#define TFJIT_EXPORT extern "C" __attribute__((visibility("default")))

TFJIT_EXPORT void TfjitSetCompileCallback(TfjitCompileCallback cb) {
  tensorflow::g_callback.store(cb, std::memory_order_release);
}

TFJIT_EXPORT void TfjitClearCache() {
  tensorflow::GlobalCache& cache = tensorflow::Cache();
  absl::MutexLock l(&cache.mu);
  cache.map.clear();
  tensorflow::tfjit::Arenas().Clear();
  tensorflow::g_generation.fetch_add(1, std::memory_order_acq_rel);
  tensorflow::KernelProfile& profile = tensorflow::Profile();   // (freed executables' rows)
  absl::MutexLock p(&profile.mu);
  profile.steps.clear();
}

TFJIT_EXPORT void TfjitGetStats(int64_t* hits, int64_t* misses) {
  *hits = tensorflow::g_hits.load(std::memory_order_relaxed);
  *misses = tensorflow::g_misses.load(std::memory_order_relaxed);
}

TFJIT_EXPORT void TfjitSetKernelProfile(int32_t on) {
  if (on) {
    tensorflow::KernelProfile& profile = tensorflow::Profile();
    absl::MutexLock l(&profile.mu);
    profile.steps.clear();
  }
  tensorflow::g_profile.store(on != 0, std::memory_order_relaxed);
}

TFJIT_EXPORT int64_t TfjitKernelProfile(int64_t* out, int64_t capacity) {
  tensorflow::KernelProfile& profile = tensorflow::Profile();
  absl::MutexLock l(&profile.mu);
  int64_t rows = 0;
  for (const auto& [exe, times] : profile.steps) {
    for (size_t s = 0; s < times.ns.size(); ++s) {
      if (times.runs[s] == 0) continue;
      if (rows < capacity) {
        int64_t* row = out + 4 * rows;
        row[0] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(exe));
        row[1] = static_cast<int64_t>(s);
        row[2] = times.ns[s];
        row[3] = times.runs[s];
      }
      ++rows;
    }
  }
  return rows;
}

TFJIT_EXPORT void TfjitGetUpdateStats(int64_t* in_place, int64_t* fresh) {
  *in_place = tensorflow::tfjit::g_updates[0].load(std::memory_order_relaxed);
  *fresh = tensorflow::tfjit::g_updates[1].load(std::memory_order_relaxed);
}
