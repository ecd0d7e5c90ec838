// The output setup both TfjitLaunch kernels share (launch_op.cc, launch_op_gpu.cc):
// outputs that are inputs, variable updates in place or in fresh temporaries, and
// allocated or forwarded outputs.
#ifndef TFJIT_RUNTIME_LAUNCH_OUTPUTS_H_
#define TFJIT_RUNTIME_LAUNCH_OUTPUTS_H_

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "abi.h"
#include "arena.h"
#include "launch_common.h"
#include "variables.h"

namespace tensorflow {
namespace tfjit {

// Outputs that ARE inputs are set first: they then hold a reference to the
// input's buffer, so forward_input_or_allocate_output cannot hand it out.
// Variable updates (the outputs after the node's) go to fresh temporaries in
// `updates` (one per update), written to their variables by Run once every
// kernel succeeded.  Outputs of a data-dependent shape and the row counts (the last
// outputs) go to temporaries in `bounded` (one per output), which SetBoundedOutputs
// hands to TF after the run; a bound is a byte buffer kept between launches (arena.h:
// a fresh one would be faulted in page by page at every launch).  bufs[o] gets output o's data; fresh_output (if set) is
// called on each newly allocated output (the CPU kernel's huge-page advice).
inline absl::Status SetOutputs(OpKernelContext* ctx, const Variables& vars,
                               const std::string& cluster, const TfjitExecutable& exe,
                               void** bufs, absl::InlinedVector<Tensor, 4>* updates,
                               absl::InlinedVector<bool, 4>* in_place,
                               absl::InlinedVector<Tensor, 4>* bounded,
                               void (*fresh_output)(void* data, size_t bytes) = nullptr) {
  const int node_outputs = NodeOutputs(exe);
  const int first_count = exe.num_outputs - exe.num_counts;
  if (exe.num_counts > 0) {
    if (bounded == nullptr) {
      return Invalid("tfjit cluster ", cluster, ": this kernel does not run outputs whose "
                     "shape depends on the data");
    }
    bounded->resize(exe.num_outputs);
  }
  absl::InlinedVector<TensorShape, 4> shapes(exe.num_outputs);
  const int64_t* dims = exe.output_dims;
  for (int o = 0; o < exe.num_outputs; ++o) {
    const int rank = exe.output_ranks[o];
    absl::Status s = TensorShape::BuildTensorShape(absl::Span<const int64_t>(dims, rank),
                                                   &shapes[o]);
    dims += rank;
    if (!s.ok()) {
      return Invalid("tfjit cluster ", cluster, ": invalid shape for output ", o, ": ",
                     s.message());
    }
    const int32_t src = exe.output_source[o];
    if (src < 0) continue;
    const Tensor& input = vars.value(ctx, src);
    if (input.shape() != shapes[o]) {
      return Invalid("tfjit cluster ", cluster, ": output ", o, " is input ", src,
                     " of shape ", input.shape().DebugString(), ", expected ",
                     shapes[o].DebugString());
    }
    if (o < node_outputs) {
      ctx->set_output(o, input);
    } else {
      (*updates)[o - node_outputs] = input;
    }
    bufs[o] = Data(input);
  }
  for (int o = 0; o < exe.num_outputs; ++o) {
    if (exe.output_source[o] >= 0) continue;
    if (o >= first_count) {           // a row count
      Tensor* t = &(*bounded)[o];
      TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT64, TensorShape(), t));
      bufs[o] = Data(*t);
      continue;
    }
    if (o < node_outputs && exe.output_rows[o] >= 0) {   // the whole bound, as bytes
      const int64_t bytes = std::max<int64_t>(
          shapes[o].num_elements() * DataTypeSize(static_cast<DataType>(exe.output_dtypes[o])), 1);
      Tensor* t = &(*bounded)[o];
      *t = Arenas().Take(&exe.output_rows[o], bytes);
      if (t->TotalBytes() == 0) {
        TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT8, TensorShape({bytes}), t));
        AdviseHugePages(Data(*t), bytes);
      }
      bufs[o] = Data(*t);
      if (reinterpret_cast<uintptr_t>(bufs[o]) % kTfjitAlign != 0) {
        return absl::InternalError("tfjit: a bounded output is not kTfjitAlign-byte aligned");
      }
      continue;
    }
    if (o >= node_outputs) {
      const int u = o - node_outputs;
      Var* var = vars.var(exe.update_input[u]);
      Tensor* current = var->tensor();
      if (exe.update_in_place[u] && !var->copy_on_read_mode.load() && current->RefCountIsOne() &&
          current->shape() == shapes[o] && current->dtype() == exe.output_dtypes[o]) {
        bufs[o] = Data(*current);
        (*in_place)[u] = true;      // nothing to swap in afterwards
        continue;
      }
      Tensor update;
      TF_RETURN_IF_ERROR(ctx->allocate_temp(static_cast<DataType>(exe.output_dtypes[o]),
                                            shapes[o], &update));
      bufs[o] = Data(update);
      (*updates)[o - node_outputs] = std::move(update);
      continue;
    }
    Tensor* out = nullptr;
    int forwarded = -1;
    if (exe.output_forward[o] >= 0) {
      TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output(
          {exe.output_forward[o]}, o, shapes[o], &out, &forwarded));
    } else {
      TF_RETURN_IF_ERROR(ctx->allocate_output(o, shapes[o], &out));
    }
    bufs[o] = Data(*out);
    if (forwarded < 0 && fresh_output != nullptr) fresh_output(bufs[o], out->TotalBytes());
  }
  return absl::OkStatus();
}

// After a successful run: each output of a data-dependent shape becomes a fresh output
// holding the first `count` rows of its bound, `count` being its row-count output's
// value (checked against the bound: a count outside it is the kernel's bug, not data).
// The bound's buffer goes back to the cache for the next launch.
inline absl::Status SetBoundedOutputs(OpKernelContext* ctx, const std::string& cluster,
                                      const TfjitExecutable& exe,
                                      absl::InlinedVector<Tensor, 4>* bounded) {
  if (exe.num_counts == 0) return absl::OkStatus();
  const int64_t* dims = exe.output_dims;
  for (int o = 0; o < NodeOutputs(exe); ++o) {
    const int rank = exe.output_ranks[o];
    const int32_t c = exe.output_rows[o];
    if (c >= 0) {
      TensorShape shape;
      TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape(absl::Span<const int64_t>(dims, rank),
                                                       &shape));
      const int64_t bound = shape.dim_size(0);
      const int64_t count = (*bounded)[c].scalar<int64_t>()();
      if (count < 0 || count > bound) {
        return absl::InternalError(absl::StrCat("tfjit cluster ", cluster, ": output ", o,
                                                " has ", count, " rows, outside its bound ", bound));
      }
      const int64_t row_bytes = bound == 0 ? 0 : shape.num_elements() / bound *
          DataTypeSize(static_cast<DataType>(exe.output_dtypes[o]));
      shape.set_dim(0, count);
      Tensor* out = nullptr;
      TF_RETURN_IF_ERROR(ctx->allocate_output(o, shape, &out));
      if (count > 0 && row_bytes > 0) {
        std::memcpy(Data(*out), Data((*bounded)[o]), count * row_bytes);
      }
      Arenas().Give(&exe.output_rows[o], std::move((*bounded)[o]));
    }
    dims += rank;
  }
  return absl::OkStatus();
}

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_LAUNCH_OUTPUTS_H_
