// tfjit's runtime library: which of TF's two CPU kernels (default or oneDNN) a
// kMeasured library call runs, chosen by timing both over the first calls of each
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

// A choice still being measured: each family's runs so far (its first, which pays
// for oneDNN's primitive creation and cold caches, is not timed) and best time.
struct Trial {
  int runs[2] = {0, 0};
  double micros[2] = {1e300, 1e300};
};

absl::Mutex choices_mu(absl::kConstInit);
absl::flat_hash_map<std::string, Choice>& Choices() {
  static auto* choices = new absl::flat_hash_map<std::string, Choice>;
  return *choices;
}
absl::flat_hash_map<std::string, Trial>& Trials() {
  static auto* trials = new absl::flat_hash_map<std::string, Trial>;
  return *trials;
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

// Timed runs of each family before the choice is made, at most; a pair of timed runs
// where one family is more than `kClear` times faster decides early (noise on a busy
// machine is well under that).
constexpr int kRounds = 3;
constexpr double kClear = 1.5;

// Whether `trial` has seen enough to choose.
bool Decided(const Trial& trial) {
  const int timed0 = trial.runs[0] - 1, timed1 = trial.runs[1] - 1;
  if (timed0 < 1 || timed1 < 1) return false;
  if (timed0 >= kRounds && timed1 >= kRounds) return true;
  return trial.micros[0] > kClear * trial.micros[1] || trial.micros[1] > kClear * trial.micros[0];
}

void Choose(const std::string& key, Choice choice) {
  Trials().erase(key);
  Choices().try_emplace(key, choice);   // a racing thread's choice may be in first
}
}  // namespace

// Which of TF's two kernels is faster depends on the CPU (oneDNN's convolutions won
// every shape measured on AVX-512 machines, Eigen's won half of them on AVX2 ones),
// so it is measured where the code runs, as TF autotunes cuDNN's algorithms. The
// measuring is spread over the calls of an (op, attributes, shapes): each call runs
// one kernel, alternating default and oneDNN, the first run of each untimed, until
// each has `kRounds` timed runs or one pair decides early; later calls look the
// choice up. Every call thus runs its op once, as an unmeasured one does: measuring
// both kernels inside the first call made an MLP train step's first run ~12 steps
// long (up to 8 runs of each dot), most of its first call. The price is that the
// first few calls of a shape may run the slower kernel, and their results may differ
// in rounding from the later calls'. When TF is asked for deterministic ops the
// default kernel always runs (no choice that could differ between runs or processes).
int32_t MeasuredFamily(const KernelSpec& spec, absl::Span<Tensor> inputs, Measurement* m) {
  m->timed = false;
  if (OpDeterminismRequired()) return kDefault;
  std::string key = ChoiceKey(spec, inputs);
  absl::MutexLock l(&choices_mu);
  auto it = Choices().find(key);
  if (it != Choices().end()) return it->second.family;
  Trial& trial = Trials()[key];
  const int32_t family = trial.runs[kOneDnn] < trial.runs[kDefault] ? kOneDnn : kDefault;
  ++trial.runs[family];
  m->timed = trial.runs[family] > 1;
  m->key = std::move(key);
  return family;
}

void RecordMeasurement(const Measurement& m, int32_t family, bool ok, double micros) {
  absl::MutexLock l(&choices_mu);
  if (Choices().contains(m.key)) return;
  if (!ok && family == kDefault) return;   // the call's own error (bad input): no verdict
  if (!ok) {                               // oneDNN refusing the call decides for the default
    Choose(m.key, Choice{kDefault, {Trials()[m.key].micros[kDefault], -1}});
    return;
  }
  if (!m.timed) return;
  Trial& trial = Trials()[m.key];
  trial.micros[family] = std::min(trial.micros[family], micros);
  if (!Decided(trial)) return;
  Choose(m.key, Choice{trial.micros[kOneDnn] < trial.micros[kDefault] ? kOneDnn : kDefault,
                       {trial.micros[0], trial.micros[1]}});
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
