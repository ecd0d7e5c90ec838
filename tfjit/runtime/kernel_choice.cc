// tfjit's runtime library: which of TF's CPU kernels (default or oneDNN, or the
// default one run in parts side by side) a kMeasured library call runs, chosen by
// timing each over the first calls of each (op, attributes, shapes), as TF autotunes
// cuDNN's algorithms; and the listing of the choices made so far
// (launch.kernel_choices() in Python reads it). tf_kernels.cc runs the calls; this
// file only decides between its kernels.

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

// A measured choice: the family that ran fastest, and each family's best time (µs;
// -1: it refused the call; kNotMeasured: not a candidate).
struct Choice {
  int32_t family;
  double micros[kFamilies];
};

constexpr double kNever = 1e300;          // a best time before any timed run
constexpr double kNotMeasured = -2;
constexpr int32_t kCandidates[] = {kDefault, kOneDnn, kSplit};

// A choice still being measured: which families compete (kSplit only for calls that
// can run in parts), each one's runs so far (its first, which pays for oneDNN's
// primitive creation and cold caches, is not timed), best time, and whether it is out
// (refused the call, or clearly slower than another).
struct Trial {
  bool candidate[kFamilies] = {true, true, false, false};
  int runs[kFamilies] = {0, 0, 0, 0};
  double micros[kFamilies] = {kNever, kNever, kNever, kNever};
  bool out[kFamilies] = {false, false, false, false};
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

// Timed runs of each family before the choice is made, at most; a family whose best
// timed run is more than `kClear` times another's is out early (noise on a busy
// machine is well under that).
constexpr int kRounds = 3;
constexpr double kClear = 1.5;

bool Competes(const Trial& trial, int32_t f) { return trial.candidate[f] && !trial.out[f]; }

// The competing family with the best timed run so far (or the only one left), or -1.
int32_t Best(const Trial& trial) {
  int32_t best = -1, left = 0, last = -1;
  for (int32_t f : kCandidates) {
    if (!Competes(trial, f)) continue;
    ++left, last = f;
    if (trial.runs[f] > 1 && (best < 0 || trial.micros[f] < trial.micros[best])) best = f;
  }
  return left == 1 ? last : best;
}

// Whether `trial` has seen enough to choose: one family left, or every one left has
// `kRounds` timed runs.
bool Decided(const Trial& trial) {
  int left = 0;
  bool all_timed = true;
  for (int32_t f : kCandidates) {
    if (!Competes(trial, f)) continue;
    ++left;
    all_timed = all_timed && trial.runs[f] - 1 >= kRounds;
  }
  return left <= 1 || all_timed;
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
// one kernel, taking default, oneDNN and (where the call divides into parts) split
// in turn, the first run of each untimed, until each has `kRounds` timed runs or
// all but one are out early; later calls look the choice up. (Split is a candidate
// because TF's default kernel does not always use a second core: kernel_parts.cc.)
// Every call thus runs its op once, as an unmeasured one does: measuring
// both kernels inside the first call made an MLP train step's first run ~12 steps
// long (up to 8 runs of each dot), most of its first call. The price is that the
// first few calls of a shape may run the slower kernel, and their results may differ
// in rounding from the later calls'. When TF is asked for deterministic ops the
// default kernel always runs (no choice that could differ between runs or processes).
int32_t MeasuredFamily(const KernelSpec& spec, absl::Span<Tensor> inputs, bool can_split,
                       bool with_onednn, Measurement* m) {
  m->timed = false;
  if (OpDeterminismRequired()) return kDefault;
  // A call that can run in parts and one that cannot (in a concurrent group's task,
  // on one thread) are different choices: their kernels' times differ too.
  std::string key = absl::StrCat(ChoiceKey(spec, inputs), can_split ? " in parts" : "",
                                 with_onednn ? "" : " without oneDNN");
  absl::MutexLock l(&choices_mu);
  auto it = Choices().find(key);
  if (it != Choices().end()) return it->second.family;
  Trial& trial = Trials()[key];
  trial.candidate[kSplit] = can_split;
  trial.candidate[kOneDnn] = with_onednn;
  int32_t family = -1;   // the competing family that has run least (the first on ties)
  for (int32_t f : kCandidates) {
    if (Competes(trial, f) && (family < 0 || trial.runs[f] < trial.runs[family])) family = f;
  }
  ++trial.runs[family];
  m->timed = trial.runs[family] > 1;
  m->key = std::move(key);
  return family;
}

void RecordMeasurement(const Measurement& m, int32_t family, bool ok, double micros) {
  absl::MutexLock l(&choices_mu);
  if (Choices().contains(m.key)) return;
  if (!ok && family == kDefault) return;   // the call's own error (bad input): no verdict
  Trial& trial = Trials()[m.key];
  if (!ok) {                               // oneDNN refusing the call (or a part failing)
    trial.out[family] = true;
    trial.micros[family] = -1;
  } else if (m.timed) {
    trial.micros[family] = std::min(trial.micros[family], micros);
  } else {
    return;
  }
  const int32_t best = Best(trial);
  for (int32_t f : kCandidates) {
    if (best >= 0 && f != best && Competes(trial, f) && trial.runs[f] > 1 &&
        trial.micros[f] > kClear * trial.micros[best]) {
      trial.out[f] = true;
    }
  }
  if (!Decided(trial)) return;
  Choice choice{Best(trial), {}};
  for (int32_t f = 0; f < kFamilies; ++f) {
    choice.micros[f] = trial.candidate[f] ? trial.micros[f] : kNotMeasured;
  }
  Choose(m.key, choice);
}

}  // namespace tfjit
}  // namespace tensorflow

namespace {
const char* FamilyName(int32_t family) {
  return family == tensorflow::tfjit::kOneDnn ? "oneDNN"
         : family == tensorflow::tfjit::kSplit ? "split"
                                                : "default";
}
}  // namespace

// The measured choices so far, one per line: "key\tfamily\tdefault µs\toneDNN µs\tsplit
// µs" (-1: that family refused the call; "-": it was not a candidate). Writes at most
// `size` bytes (NUL-terminated) and returns the length the whole text needs.
TFJIT_EXPORT int64_t tfjit_rt_kernel_choices(char* buffer, int64_t size) {
  using tensorflow::tfjit::Choices;
  std::string text;
  {
    absl::MutexLock l(&tensorflow::tfjit::choices_mu);
    for (const auto& [key, c] : Choices()) {
      using tensorflow::tfjit::kNotMeasured;
      absl::StrAppend(&text, key, "\t", FamilyName(c.family));
      for (int32_t f : tensorflow::tfjit::kCandidates) {
        if (c.micros[f] == kNotMeasured) {
          absl::StrAppend(&text, "\t-");
        } else {
          absl::StrAppend(&text, "\t", c.micros[f]);
        }
      }
      absl::StrAppend(&text, "\n");
    }
  }
  if (size > 0) {
    const int64_t n = std::min<int64_t>(size - 1, text.size());
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return static_cast<int64_t>(text.size());
}
