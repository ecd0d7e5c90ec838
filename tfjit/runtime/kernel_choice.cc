// tfjit's runtime library: which of TF's two CPU kernels (default or oneDNN) a
// kMeasured library call runs, chosen by timing both at the first run of each
// (op, attributes, shapes), as TF autotunes cuDNN's algorithms; and the listing
// of the choices made so far (launch.kernel_choices() in Python reads it).
// tf_kernels.cc runs the calls; this file only decides between its kernels.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "linalg.h"
#include "tf_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/determinism.h"

namespace tensorflow {
namespace tfjit {
namespace {

// A measured choice: the family that ran faster, and both best times (µs).
struct Choice {
  int32_t family;
  double micros[2];
};

absl::Mutex choices_mu(absl::kConstInit);
absl::flat_hash_map<std::string, Choice>& Choices() {
  static auto* choices = new absl::flat_hash_map<std::string, Choice>;
  return *choices;
}

// What a measured choice depends on: the op, its attributes and every input's shape.
std::string ChoiceKey(const KernelSpec& spec, absl::Span<Tensor> inputs) {
  std::string key = absl::StrCat(spec.op, "/", DataTypeString(spec.dtype), "/", spec.attrs_key);
  for (const Tensor& t : inputs) {
    absl::StrAppend(&key, " ", t.dtype() == DT_INT32 && t.dims() == 1 && t.NumElements() == 4
                                   ? absl::StrCat("sizes", t.vec<int32_t>()(0), ",",
                                                  t.vec<int32_t>()(1), ",", t.vec<int32_t>()(2),
                                                  ",", t.vec<int32_t>()(3))
                                   : t.shape().DebugString());
  }
  return key;
}

// The family of a kMeasured call. Which of TF's two kernels is faster depends on
// the CPU (oneDNN's convolutions won every shape measured on AVX-512 machines,
// Eigen's won half of them on AVX2 ones), so it is measured where the code runs,
// as TF autotunes cuDNN's algorithms: the first run of a (op, attributes, shapes)
// times each kernel up to `kRounds` times, alternating, after one untimed run each,
// and keeps the faster by its best time. A round where one kernel is more than
// `kClear` times faster than the other ends the timing early: noise on a busy
// machine is well under that, and each round costs two runs of the op in the first
// call (an MLP train step's first run spent ~2x a step measuring). oneDNN's kernel
// runs last in each round (the order the choices were validated with), so where it
// wins `out` already holds its result: `*out_is_result` says so, and the caller runs
// the winner again only otherwise. Later calls look the choice up. When TF is asked
// for deterministic ops the default kernel always runs (no choice that could differ
// between processes).
}  // namespace

int32_t MeasuredFamily(OpKernelContext* ctx, const KernelSpec& spec, absl::Span<Tensor> inputs,
                       const Tensor& out, bool* out_is_result) {
  *out_is_result = false;
  if (OpDeterminismRequired()) return kDefault;
  const std::string key = ChoiceKey(spec, inputs);
  {
    absl::MutexLock l(&choices_mu);
    auto it = Choices().find(key);
    if (it != Choices().end()) return it->second.family;
  }
  constexpr int kRounds = 3;
  constexpr double kClear = 1.5;
  Choice choice{kDefault, {1e300, 1e300}};
  int32_t last = -1;   // the family whose successful run `out` holds, -1 when none
  for (int round = -1; round < kRounds; ++round) {
    if (round > 0 && (choice.micros[0] > kClear * choice.micros[1] ||
                      choice.micros[1] > kClear * choice.micros[0])) {
      break;
    }
    for (int32_t family : {kDefault, kOneDnn}) {
      const auto start = std::chrono::steady_clock::now();
      const absl::Status status = RunFamily(ctx, family, spec, inputs, out);
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      if (!status.ok()) {   // the default's failure is reported by Run's own run of it;
        if (family == kDefault) return kDefault;   // oneDNN refusing: the default decides
        choice = Choice{kDefault, {choice.micros[0], -1}};
        last = -1;          // what a failed kernel left in `out` is nobody's result
        round = kRounds;
        break;
      }
      last = family;
      if (round >= 0) choice.micros[family] = std::min(choice.micros[family], took.count());
    }
  }
  if (choice.micros[1] >= 0 && choice.micros[1] < choice.micros[0]) choice.family = kOneDnn;
  absl::MutexLock l(&choices_mu);
  const int32_t family = Choices().try_emplace(key, choice).first->second.family;   // first wins
  *out_is_result = family == last;
  return family;
}

}  // namespace tfjit
}  // namespace tensorflow

// The measured choices so far, one per line: "key\tfamily\tdefault µs\toneDNN µs"
// (oneDNN -1: it refused the call). Writes at most `size` bytes (NUL-terminated) and
// returns the length the whole text needs.
TFJIT_EXPORT int64_t tfjit_rt_kernel_choices(char* buffer, int64_t size) {
  using tensorflow::tfjit::Choices;
  std::string text;
  {
    absl::MutexLock l(&tensorflow::tfjit::choices_mu);
    for (const auto& [key, c] : Choices()) {
      absl::StrAppend(&text, key, "\t", c.family == tensorflow::tfjit::kOneDnn ? "oneDNN" : "default",
                      "\t", c.micros[0], "\t", c.micros[1], "\n");
    }
  }
  if (size > 0) {
    const int64_t n = std::min<int64_t>(size - 1, text.size());
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return static_cast<int64_t>(text.size());
}
