// Splitting one kernel step over the launch's thread pool (RunSplit), for the
// launch op's top-level steps (runtime/launch_op.cc RunStep) and for
// tfjit_rt_parallel_for; and running a concurrent group's tasks at once, one per
// thread (RunGroup, passes/concurrency.py), for the launch op and, through
// tfjit_rt_run_group, for the groups of a loop body.
//
// The drivers that tfjit generates for control flow (codegen/control.py) run a
// loop body's kernels themselves, inside one step of the launch; for a step
// with enough work (rows * cost_per_row >= kInlineCost, decided when the driver
// is generated) they call tfjit_rt_parallel_for instead of the kernel, so a large
// loop body is split exactly as a top-level step is.
//
//   runtime: bufs[device_slot], the launch's tfjit::RuntimeContext (runtime.h),
//            whose OpKernelContext has the intra-op pool (null: run inline)
//   fn:     the kernel, TfjitKernelFn; called on disjoint [begin, end) of [0, rows)

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "runtime.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tensorflow {
namespace tfjit {
namespace {

// A step of fewer estimated cycles runs on the calling thread (codegen/control.py's
// INLINE_COST is the same bound for loop bodies). A split step's blocks: at least
// kBlockCost cycles each (a claim costs an atomic add; the pieces are small enough
// for a late helper to share the work), and at most kBlocksPerThread per thread.
constexpr int64_t kInlineCost = 50000;
constexpr int64_t kBlockCost = 20000;
constexpr int64_t kBlocksPerThread = 4;

// What a split step's threads share. Held by a shared_ptr: a helper that the pool
// starts only after the step is over still reads `next`, finds no block left and
// returns without touching the step's buffers.
struct Split {
  TfjitKernelFn fn;
  void** bufs;
  int64_t rows, blocks;
  std::atomic<int64_t> next{0};   // the next block to claim
  std::atomic<int64_t> done{0};   // blocks run
  Eigen::ThreadPoolInterface* pool = nullptr;
  int caller_cpu = -1;            // where the caller was when it woke the helpers
  std::atomic<bool> respawned{false};

  // Claims and runs blocks until none is left.
  void Work() {
    for (int64_t b = next.fetch_add(1, std::memory_order_relaxed); b < blocks;
         b = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(bufs, rows * b / blocks, rows * (b + 1) / blocks);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

// A helper's task. The kernel may place a woken helper on the caller's core, where it
// preempts the caller while the other core idles, and the step then runs on one core
// (seen on a 2-core VM with perf sched: after a single-threaded 4 ms op, a softmax step
// took 4.5-4.9 ms instead of 2.5 in 24-43% of calls, the other core idle for 5 ms).
// A helper that finds itself on the caller's core with blocks left therefore wakes one
// more helper, once per step, which the kernel places on a free core. Waking one more
// for every step instead cost DenseNet121 predict (~370 small steps) 35 -> 40 ms.
void Help(const std::shared_ptr<Split>& split) {
#ifdef __linux__
  if (split->caller_cpu >= 0 && sched_getcpu() == split->caller_cpu &&
      split->next.load(std::memory_order_relaxed) < split->blocks &&
      !split->respawned.exchange(true, std::memory_order_relaxed)) {
    split->pool->Schedule([split] { split->Work(); });
  }
#endif
  split->Work();
}

// Waits, spinning and then yielding, until `done` reaches `count`.
void Join(const std::atomic<int64_t>& done, int64_t count) {
  for (int spins = 0; done.load(std::memory_order_acquire) < count; ++spins) {
    if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();   // a spin-wait hint; elsewhere the loop spins bare
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace

// Why not TF's Shard or Eigen's parallelFor: on 2 cores a DenseNet121 predict step
// (~370 launch steps, each sharded in turn) spent 12% of its samples in the kernel
// (futex waits, context switches) and 9% in the pool's work stealing: the calling
// thread and every worker that a step wakes contend for the two cores, and the
// caller sleeps on a barrier until the last block is done. Here the caller takes
// blocks too, from one counter shared with helpers from the pool, so a helper that
// starts late finds the work done and the caller never waits on a helper that has
// not started; it waits (spinning, then yielding) only for blocks a helper is
// running, at most one block's time.
void RunSplit(const DeviceBase::CpuWorkerThreads* workers, TfjitKernelFn fn, void** bufs,
              int64_t rows, int64_t cost_per_row) {
  if (rows <= 0) return;
  const int64_t cost = std::max<int64_t>(cost_per_row, 1);
  if (workers == nullptr || rows == 1 || rows < kInlineCost / cost) {
    fn(bufs, 0, rows);
    return;
  }
  Eigen::ThreadPoolInterface* pool = workers->workers->AsEigenThreadPool();
  const int64_t blocks = std::max<int64_t>(
      1, std::min({rows, rows / std::max<int64_t>(kBlockCost / cost, 1),
                   kBlocksPerThread * (workers->num_threads + 1)}));
  auto split = std::make_shared<Split>();
  split->fn = fn;
  split->bufs = bufs;
  split->rows = rows;
  split->blocks = blocks;
  split->pool = pool;
#ifdef __linux__
  split->caller_cpu = sched_getcpu();
#endif
  // The caller is a thread too: with one helper fewer than the pool's threads the
  // step takes as many threads as the pool has (on 2 cores a third only contends;
  // see Help for the one exception).
  const int64_t helpers = std::min<int64_t>(pool->NumThreads() - 1, blocks - 1);
  for (int64_t h = 0; h < helpers; ++h) pool->Schedule([split] { Help(split); });
  split->Work();
  Join(split->done, blocks);
}

namespace {

// What a concurrent group's threads share (a shared_ptr, as Split). Each task gets its
// own copy of the pointer array, whose status and runtime slots point at the task's
// own status block and runtime context: two tasks that fail at once do not mix their
// messages, and RunGroup reports the first failing task in step order.
struct Group {
  const TfjitStep* steps;
  std::vector<int> starts;        // each task's first step
  int64_t num_bufs;
  std::vector<void*> bufs;        // num_bufs per task
  std::vector<TfjitStatus> status;
  std::vector<RuntimeContext> runtime;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  void Work() {
    const int64_t tasks = static_cast<int64_t>(starts.size());
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tasks;
         t = next.fetch_add(1, std::memory_order_relaxed)) {
      // TF's library kernels (Eigen's device, Shard) use this thread alone: the other
      // threads run the group's other tasks. (oneDNN's kernels take one thread anyway
      // on a pool thread.)
      ScopedPerThreadMaxParallelism one_thread(1);
      void** b = bufs.data() + t * num_bufs;
      const int first = starts[t];
      for (int s = first; s < first + steps[first].task && status[t].code == 0; ++s) {
        if (steps[s].rows > 0) steps[s].fn(b, 0, steps[s].rows);
      }
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

}  // namespace

std::atomic<int64_t> g_groups[2] = {0, 0};   // groups run concurrently, one step at a time

void RunGroup(const DeviceBase::CpuWorkerThreads* workers, const TfjitStep* steps,
              void** bufs, int64_t num_bufs, TfjitStatus* status, RuntimeContext* runtime) {
  int64_t tasks = 0;
  for (int s = 0; s < steps[0].group; ++s) tasks += steps[s].task > 0;
  // Concurrently only where every thread of the pool gets a task. With more threads
  // than tasks, the idle ones would have been put to use by splitting each step over
  // them all, which bigger kernels on bigger machines gain from (a 2-core machine,
  // where this was measured, runs every group of two or more tasks concurrently).
  if (workers == nullptr || workers->num_threads < 2 || tasks < workers->num_threads) {
    g_groups[1].fetch_add(1, std::memory_order_relaxed);
    for (int s = 0; s < steps[0].group && status->code == 0; ++s) {
      RunSplit(workers, steps[s].fn, bufs, steps[s].rows, steps[s].cost_per_row);
    }
    return;
  }
  g_groups[0].fetch_add(1, std::memory_order_relaxed);
  auto group = std::make_shared<Group>();
  group->steps = steps;
  for (int s = 0; s < steps[0].group; s += std::max(steps[s].task, 1)) {
    if (steps[s].task > 0) group->starts.push_back(s);
  }
  group->num_bufs = num_bufs;
  group->bufs.resize(tasks * num_bufs);
  group->status.resize(tasks);
  group->runtime.resize(tasks);
  for (int64_t t = 0; t < tasks; ++t) {
    void** b = group->bufs.data() + t * num_bufs;
    std::copy(bufs, bufs + num_bufs, b);
    group->status[t] = TfjitStatus{};
    group->runtime[t].ctx = runtime->ctx;
    b[num_bufs - 2] = &group->status[t];
    b[num_bufs - 1] = &group->runtime[t];
  }
  Eigen::ThreadPoolInterface* pool = workers->workers->AsEigenThreadPool();
  const int64_t helpers = std::min<int64_t>(pool->NumThreads() - 1, tasks - 1);
  for (int64_t h = 0; h < helpers; ++h) pool->Schedule([group] { group->Work(); });
  group->Work();
  Join(group->done, tasks);
  for (int64_t t = 0; t < tasks; ++t) {
    if (group->status[t].code != 0) {
      *status = group->status[t];
      runtime->error = group->runtime[t].error;
      return;
    }
  }
}

}  // namespace tfjit
}  // namespace tensorflow

extern "C" {
__attribute__((visibility("default"))) void TfjitGetGroupStats(int64_t* concurrent,
                                                               int64_t* one_at_a_time) {
  *concurrent = tensorflow::tfjit::g_groups[0].load(std::memory_order_relaxed);
  *one_at_a_time = tensorflow::tfjit::g_groups[1].load(std::memory_order_relaxed);
}

// A concurrent group of a loop body (codegen/control.py): `steps` are the group's steps
// (steps[0].group of them, marked as a top-level group's), `bufs` the launch's
// pointer array of `num_bufs` slots, the last two the status block and the runtime
// context, as RunGroup gives each task its own.
__attribute__((visibility("default"))) void tfjit_rt_run_group(void* runtime, const TfjitStep* steps,
                                                               void** bufs, int64_t num_bufs) {
  auto* context = static_cast<tensorflow::tfjit::RuntimeContext*>(runtime);
  auto* status = static_cast<TfjitStatus*>(bufs[num_bufs - 2]);
  if (context == nullptr || context->ctx == nullptr) {     // no pool: one step at a time
    for (int s = 0; s < steps[0].group && status->code == 0; ++s) {
      if (steps[s].rows > 0) steps[s].fn(bufs, 0, steps[s].rows);
    }
    return;
  }
  tensorflow::tfjit::RunGroup(context->ctx->device()->tensorflow_cpu_worker_threads(), steps,
                              bufs, num_bufs, status, context);
}

__attribute__((visibility("default"))) void tfjit_rt_parallel_for(void* runtime, TfjitKernelFn fn,
                                                                  void** bufs, int64_t rows,
                                                                  int64_t cost_per_row) {
  auto* context = static_cast<tensorflow::tfjit::RuntimeContext*>(runtime);
  tensorflow::tfjit::RunSplit(context == nullptr || context->ctx == nullptr
                                  ? nullptr
                                  : context->ctx->device()->tensorflow_cpu_worker_threads(),
                              fn, bufs, rows, cost_per_row);
}
}
