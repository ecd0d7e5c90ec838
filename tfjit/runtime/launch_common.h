// What the CPU and GPU kernels of TfjitLaunch share (launch_op.cc,
// launch_op_gpu.cc): error texts and the fallback to the node's original subgraph.
#ifndef TFJIT_RUNTIME_LAUNCH_COMMON_H_
#define TFJIT_RUNTIME_LAUNCH_COMMON_H_

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "abi.h"

namespace tensorflow {
namespace tfjit {

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

inline std::string TypeName(int32_t dtype) {
  return DataTypeString(static_cast<DataType>(dtype));
}

// A kernel's message with each "{i}" replaced by status.detail[i].
inline std::string ErrorText(const char* message, const TfjitStatus& status) {
  std::string out;
  for (const char* p = message; *p; ++p) {
    if (p[0] == '{' && p[1] >= '0' && p[1] <= '6' && p[2] == '}') {
      absl::StrAppend(&out, status.detail[p[1] - '0']);
      p += 2;
    } else {
      out.push_back(*p);
    }
  }
  return out;
}

inline void* Data(const Tensor& t) { return const_cast<char*>(t.tensor_data().data()); }

// Runs a node's original subgraph (a function in the graph's library), as TF's
// CallOp does; the instantiated handle is kept per library runtime.
class FallbackRunner {
 public:
  explicit FallbackRunner(NameAttrList fn) : fn_(std::move(fn)) {}

  void Run(OpKernelContext* ctx, const std::string& cluster, AsyncOpKernel::DoneCallback done) {
    FunctionLibraryRuntime* lib = ctx->function_library();
    OP_REQUIRES_ASYNC(ctx, lib != nullptr,
                      absl::InternalError(absl::StrCat("tfjit cluster ", cluster,
                                                       ": no function library for the fallback")),
                      done);
    FunctionLibraryRuntime::Handle handle;
    {
      absl::MutexLock l(&mu_);
      auto it = handles_.find(lib);
      if (it == handles_.end()) {
        OP_REQUIRES_OK_ASYNC(ctx, lib->Instantiate(fn_.name(), AttrSlice(&fn_.attr()), &handle),
                             done);
        handles_.emplace(lib, handle);
      } else {
        handle = it->second;
      }
    }
    FunctionLibraryRuntime::Options opts;
    opts.rendezvous = ctx->rendezvous();
    opts.cancellation_manager = ctx->cancellation_manager();
    opts.step_container = ctx->step_container();
    opts.stats_collector = ctx->stats_collector();
    opts.runner = ctx->runner();
    opts.run_all_kernels_inline = ctx->run_all_kernels_inline();
    opts.collective_executor = ctx->collective_executor();
    std::vector<Tensor> args;
    args.reserve(ctx->num_inputs());
    for (int i = 0; i < ctx->num_inputs(); ++i) args.push_back(ctx->input(i));
    auto* rets = new std::vector<Tensor>;
    lib->Run(opts, handle, args, rets,
             [ctx, rets, cluster, done = std::move(done)](const absl::Status& status) {
               if (!status.ok()) {
                 ctx->SetStatus(status);
               } else if (static_cast<int>(rets->size()) != ctx->num_outputs()) {
                 ctx->SetStatus(Invalid("tfjit cluster ", cluster, ": fallback returned ",
                                        rets->size(), " values for ", ctx->num_outputs(),
                                        " outputs"));
               } else {
                 for (int o = 0; o < ctx->num_outputs(); ++o) ctx->set_output(o, (*rets)[o]);
               }
               delete rets;
               done();
             });
  }

 private:
  const NameAttrList fn_;
  absl::Mutex mu_;
  std::unordered_map<FunctionLibraryRuntime*, FunctionLibraryRuntime::Handle> handles_
      ABSL_GUARDED_BY(mu_);
};

// The attrs both TfjitLaunch kernels read at construction: the cluster's name, its
// fallback function (at most one), and which inputs are constant arguments.
inline absl::Status ReadLaunchAttrs(OpKernelConstruction* ctx, std::string* cluster,
                                    std::unique_ptr<FallbackRunner>* fallback_runner,
                                    std::vector<bool>* is_constant) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("cluster", cluster));
  std::vector<NameAttrList> fallback;
  TF_RETURN_IF_ERROR(ctx->GetAttr("fallback", &fallback));
  if (fallback.size() > 1) {
    return Invalid("TfjitLaunch: at most one fallback function, got ", fallback.size());
  }
  if (!fallback.empty()) *fallback_runner = std::make_unique<FallbackRunner>(fallback[0]);
  std::vector<int64_t> constant_args;
  TF_RETURN_IF_ERROR(ctx->GetAttr("constant_args", &constant_args));
  is_constant->assign(ctx->num_inputs(), false);
  for (int64_t i : constant_args) {
    if (i < 0 || i >= ctx->num_inputs() || ctx->input_type(i) == DT_RESOURCE) {
      return Invalid("TfjitLaunch ", *cluster, ": constant argument ", i,
                     " is not a tensor input (", ctx->num_inputs(), " inputs)");
    }
    (*is_constant)[i] = true;
  }
  return absl::OkStatus();
}

// The executable must agree with the node's inputs and Tout (both kernels check it
// before the first run of a signature).
// The outputs that are the node's (before the variable updates and the row counts).
inline int NodeOutputs(const TfjitExecutable& exe) {
  return exe.num_outputs - exe.num_updates - exe.num_counts;
}

inline absl::Status ValidateExecutable(OpKernelContext* ctx, const std::string& cluster,
                                       const TfjitExecutable& exe) {
  const int node_outputs = NodeOutputs(exe);
  if (exe.num_inputs != ctx->num_inputs() || node_outputs != ctx->num_outputs() ||
      exe.num_updates < 0 || exe.num_counts < 0) {
    return Invalid(
        "tfjit executable for cluster ", cluster, " has ", exe.num_inputs, " inputs and ",
        node_outputs, " outputs; the TfjitLaunch node has ", ctx->num_inputs(), " and ",
        ctx->num_outputs());
  }
  for (int u = 0; u < exe.num_updates; ++u) {
    const int32_t i = exe.update_input[u];
    if (i < 0 || i >= exe.num_inputs || ctx->input_dtype(i) != DT_RESOURCE) {
      return Invalid("tfjit executable for cluster ", cluster, ": update ", u,
                     " does not name a resource variable input");
    }
  }
  for (int i = 0; i < exe.num_inputs; ++i) {
    if (exe.input_dtypes[i] != ctx->input_dtype(i)) {
      return Invalid("tfjit executable for cluster ", cluster, ": input ", i, " is ",
                     TypeName(exe.input_dtypes[i]), ", the node's input is ",
                     TypeName(ctx->input_dtype(i)));
    }
  }
  for (int o = 0; o < exe.num_outputs; ++o) {
    if (o < node_outputs && exe.output_dtypes[o] != ctx->expected_output_dtype(o)) {
      return Invalid("tfjit executable for cluster ", cluster, ": output ", o, " is ",
                     TypeName(exe.output_dtypes[o]), ", Tout has ",
                     TypeName(ctx->expected_output_dtype(o)));
    }
    const int32_t src = exe.output_source[o], fwd = exe.output_forward[o];
    if (src >= exe.num_inputs || fwd >= exe.num_inputs || exe.output_ranks[o] < 0 ||
        (fwd >= 0 && ctx->input_dtype(fwd) == DT_RESOURCE)) {
      return Invalid("tfjit executable for cluster ", cluster, ": output ", o,
                     " has a bad rank or input index");
    }
    const int32_t rows = exe.output_rows[o];
    const bool is_count = o >= exe.num_outputs - exe.num_counts;
    if ((rows >= 0 && (o >= node_outputs || rows < exe.num_outputs - exe.num_counts ||
                       rows >= exe.num_outputs || exe.output_ranks[o] < 1 || src >= 0 ||
                       fwd >= 0)) ||
        rows < -1 ||
        (is_count && (exe.output_dtypes[o] != DT_INT64 || exe.output_ranks[o] != 0 || src >= 0))) {
      return Invalid("tfjit executable for cluster ", cluster, ": output ", o,
                     " has a bad row count");
    }
  }
  return absl::OkStatus();
}

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_LAUNCH_COMMON_H_
