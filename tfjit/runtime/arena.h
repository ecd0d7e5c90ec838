// Memory of TfjitLaunch (launch_op.cc): huge-page advice for fresh buffers, and
// the temp arenas, kept between launches.
//
// All temps of a launch live in one arena (passes/buffers.py packs them by
// lifetime). Allocating it fresh for every launch costs twice: its pages are
// faulted in again each time (a malloc'd block this large is mmap'd and unmapped
// per launch), and under TF's BFC allocator (TF's CPU allocator when oneDNN is
// on) a block freed between launches fragments the pool, so the next launch
// takes a second block: the Keras CNN step's peak RSS grew 50 MB at its second
// step. So an arena goes back here when its launch ends, for the next launch of
// the same executable; a concurrent launch that finds none idle allocates its
// own, and at most kIdlePerExecutable are kept.
#ifndef TFJIT_RUNTIME_ARENA_H_
#define TFJIT_RUNTIME_ARENA_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow {
namespace tfjit {

// Fresh buffers at least this large get MADV_HUGEPAGE (THP is madvise-only here, and a
// fresh 32 MiB output faulted in 4 KiB pages costs as much as the kernel writing it).
constexpr size_t kHugePageAdviceBytes = size_t{2} << 20;

inline void AdviseHugePages(void* data, size_t bytes) {
  if (data == nullptr || bytes < kHugePageAdviceBytes) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(page - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice only
  }
}

class ArenaCache {
 public:
  static constexpr size_t kIdlePerExecutable = 2;

  // An idle arena of `exe` holding at least `bytes`, or an empty Tensor (0 bytes).
  Tensor Take(const void* exe, int64_t bytes) {
    absl::MutexLock l(&mu_);
    auto it = idle_.find(exe);
    if (it == idle_.end()) return Tensor();
    std::vector<Tensor>& free = it->second;
    for (size_t k = 0; k < free.size(); ++k) {
      if (free[k].TotalBytes() >= static_cast<size_t>(bytes)) {
        Tensor arena = std::move(free[k]);
        free.erase(free.begin() + k);
        return arena;
      }
    }
    return Tensor();
  }

  void Give(const void* exe, Tensor arena) {
    absl::MutexLock l(&mu_);
    std::vector<Tensor>& free = idle_[exe];
    if (free.size() < kIdlePerExecutable) free.push_back(std::move(arena));
  }

  void Clear() {
    absl::MutexLock l(&mu_);
    idle_.clear();
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<const void*, std::vector<Tensor>> idle_ ABSL_GUARDED_BY(mu_);
};

inline ArenaCache& Arenas() {
  static ArenaCache* cache = new ArenaCache;
  return *cache;
}

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_ARENA_H_
