// TfjitRandomReserve: the counter state of one stateful random node.
//
// samples: "outputs" reserves as random_op.cc's kernels do (256 blocks per element of
// a value of the input shape); "shuffle" as RandomShuffle's (random_shuffle_op.cc,
// shuffle_common.h): n - 1 32-bit samples, rounded up to whole blocks, for a value of
// the input shape with n > 1 rows and more than one element, none otherwise.
//
// TensorFlow's stateful random kernels (RandomUniform, RandomStandardNormal,
// TruncatedNormal, RandomUniformInt: core/kernels/random_op.cc) each own a
// GuardedPhiloxRandom, initialised from the node's seed/seed2 attrs (both 0:
// random seeds, drawn once per kernel instance), and on every run reserve
// output_count * 256 Philox blocks from it and fill the output from the
// generator at the old counter. tfjit's graph rewrite (graph/random_state.py)
// splits such a node into this op, which keeps the same state and makes the
// same reservation, and a StatelessRandom*V2 node that fills the output from
// the key and counter this op hands it: TF's stateless kernels and tfjit's
// lowering of them (lower/random.py) compute exactly what the stateful kernel
// computes from that generator.
//
// The state lives in this op's kernel instance, where TF keeps the stateful
// kernel's: one per graph node per Session (the op is stateful, so a Session
// shares it across the executors of different fetch sets, by node name) or per
// instantiated function. Reservations are atomic (GuardedPhiloxRandom's lock):
// two concurrent runs never get the same counter. Eager callers that need one
// state per caller (api/function.py) set `instance`, which is part of the
// eager kernel cache's key.
//
//   key: uint64[1]   the generator's key (key lanes 0 | 1 << 32)
//   counter: uint64[2]   the 128-bit counter before the reservation, low word first

#include <cstdint>
#include <string>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tensorflow/core/util/guarded_philox_random.h"

namespace tensorflow {
namespace {

// random_op.cc's multiplier ("the same as in FillPhiloxRandomTask"): Philox blocks
// reserved per output element, whatever the distribution.
constexpr int kBlocksPerOutput = 256;

class TfjitRandomReserveOp : public OpKernel {
 public:
  explicit TfjitRandomReserveOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string samples;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("samples", &samples));
    shuffle_ = samples == "shuffle";
    OP_REQUIRES_OK(ctx, generator_.Init(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    TensorShape shape;
    OP_REQUIRES_OK(ctx, tensor::MakeShape(ctx->input(0), &shape));
    random::PhiloxRandom gen;
    if (!shuffle_) {
      gen = generator_.ReserveRandomOutputs(shape.num_elements(), kBlocksPerOutput);
    } else if (shape.dims() > 0 && shape.num_elements() > 1 && shape.dim_size(0) > 1) {
      gen = generator_.ReserveSamples32(shape.dim_size(0) - 1);
    } else {
      gen = generator_.ReserveSamples128(0);  // RandomShuffle copies such a value: no samples
    }
    Tensor* key = nullptr;
    Tensor* counter = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({1}), &key));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({2}), &counter));
    const auto& k = gen.key();
    const auto& c = gen.counter();
    key->vec<uint64>()(0) = static_cast<uint64>(k[0]) | static_cast<uint64>(k[1]) << 32;
    counter->vec<uint64>()(0) = static_cast<uint64>(c[0]) | static_cast<uint64>(c[1]) << 32;
    counter->vec<uint64>()(1) = static_cast<uint64>(c[2]) | static_cast<uint64>(c[3]) << 32;
  }

 private:
  GuardedPhiloxRandom generator_;
  bool shuffle_ = false;
};

}  // namespace

REGISTER_OP("TfjitRandomReserve")
    .Input("shape: T")
    .Output("key: uint64")
    .Output("counter: uint64")
    .Attr("T: {int32, int64}")
    .Attr("seed: int = 0")
    .Attr("seed2: int = 0")
    .Attr("samples: {'outputs', 'shuffle'} = 'outputs'")
    .Attr("instance: string = ''")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->MakeShape({1}));
      c->set_output(1, c->MakeShape({2}));
      return absl::OkStatus();
    })
    .Doc("The key and counter of a stateful random node's next run (tfjit).");

REGISTER_KERNEL_BUILDER(Name("TfjitRandomReserve").Device(DEVICE_CPU), TfjitRandomReserveOp);

}  // namespace tensorflow
