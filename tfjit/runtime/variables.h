// Resource-variable inputs of a TfjitLaunch (see launch_op.cc's ABI notes).
// Included by launch_op.cc and launch_op_gpu.cc.
#ifndef TFJIT_RUNTIME_VARIABLES_H_
#define TFJIT_RUNTIME_VARIABLES_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace tensorflow {
namespace tfjit {

constexpr int32_t kVariableDtypeOffset = 100;   // TF's DT_*_REF numbering

// Variable updates so far: written in place, or into a fresh buffer swapped in
// (TfjitGetUpdateStats; tests read it, since an address can be recycled).
inline std::atomic<int64_t> g_updates[2] = {0, 0};
inline void CountUpdate(bool in_place) {
  g_updates[in_place ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
}

// The resource-variable inputs of one launch, looked up and locked for its
// duration (in increasing mutex address order, as TF's own training ops).
class Variables {
 public:
  absl::Status Resolve(OpKernelContext* ctx) {
    vars_.resize(ctx->num_inputs());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      if (ctx->input_dtype(i) != DT_RESOURCE) continue;
      absl::Status found = LookupResource(ctx, HandleFromInput(ctx, i), &vars_[i]);
      if (absl::IsNotFound(found)) {
        // Not created yet: a TF1 initializer's AssignVariableOp creates it (in the
        // fallback, which TF runs as it would have); reading it is TF's error there.
        uninitialized_ = i;
        vars_[i].reset();
        continue;
      }
      TF_RETURN_IF_ERROR(found);
      locked_.push_back(vars_[i]->mu());
    }
    std::sort(locked_.begin(), locked_.end());
    locked_.erase(std::unique(locked_.begin(), locked_.end()), locked_.end());
    if (static_cast<int>(locked_.size()) != NumVars()) {
      return absl::InvalidArgumentError(
          "tfjit: the same resource variable is passed to a TfjitLaunch twice");
    }
    for (mutex* mu : locked_) mu->lock();
    for (int i = 0; i < ctx->num_inputs() && uninitialized_ < 0; ++i) {
      if (vars_[i] && !vars_[i]->is_initialized) uninitialized_ = i;
    }
    return absl::OkStatus();
  }
  ~Variables() { Unlock(); }
  void Unlock() {
    for (auto it = locked_.rbegin(); it != locked_.rend(); ++it) (*it)->unlock();
    locked_.clear();
  }
  Var* var(int i) const { return i < static_cast<int>(vars_.size()) ? vars_[i].get() : nullptr; }
  int uninitialized() const { return uninitialized_; }

  // The tensor the kernels read for input i: the variable's value or the input.
  const Tensor& value(OpKernelContext* ctx, int i) const {
    Var* v = var(i);
    return v != nullptr ? *v->tensor() : ctx->input(i);
  }
  int32_t signature_dtype(OpKernelContext* ctx, int i) const {
    Var* v = var(i);
    return v != nullptr ? v->tensor()->dtype() + kVariableDtypeOffset : ctx->input_dtype(i);
  }

 private:
  int NumVars() const {
    int n = 0;
    for (const auto& v : vars_) n += v ? 1 : 0;
    return n;
  }
  std::vector<core::RefCountPtr<Var>> vars_;
  std::vector<mutex*> locked_;
  int uninitialized_ = -1;
};

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_VARIABLES_H_
