// The ABI between tfjit's code generator, its Python runtime (runtime/abi.py, which
// mirrors these structs with ctypes) and the op library (launch_op.cc).  Change a
// struct or constant here and in abi.py together, and bump kTfjitAbiVersion: at load,
// abi.py compares TfjitAbiLayout's answer with its own and refuses a library that
// differs, instead of reading its structs at the wrong offsets.
#ifndef TFJIT_RUNTIME_ABI_H_
#define TFJIT_RUNTIME_ABI_H_

#include <cstddef>
#include <cstdint>

extern "C" {
constexpr int32_t kTfjitAbiVersion = 3;
constexpr int64_t kTfjitAlign = 64;   // every buffer a kernel gets: its loads assume it

//   typedef void (*TfjitKernelFn)(void** bufs, int64_t row_begin, int64_t row_end);
//     bufs = [input_0..input_{n_in-1}, output_0..output_{n_out-1},
//             temp_0..temp_{n_temp-1}, status, device]
typedef void (*TfjitKernelFn)(void** bufs, int64_t row_begin, int64_t row_end);

// fn over [0, rows).  Concurrent groups (passes/concurrency.py): on a group's first
// step, `group` is its number of steps (> 1; 0 elsewhere), and within a group `task`
// is, on a task's first step, that task's number of steps (0 elsewhere). The steps of
// a task run in order on one thread; a group's tasks share no memory.
struct TfjitStep {
  TfjitKernelFn fn; int64_t rows; int64_t cost_per_row; int32_t group; int32_t task;
};

// code, 0 at the start of each launch; k > 0 reports messages[k-1], whose "{i}"
// (i < 7) read as detail[i]
struct alignas(64) TfjitStatus { int32_t code; int32_t unused; int64_t detail[7]; };
static_assert(sizeof(TfjitStatus) == 64, "TfjitStatus is one cache line");

struct TfjitExecutable {
  int32_t num_inputs;  const int32_t* input_dtypes;  // TF DataType enum values
  int32_t num_outputs; const int32_t* output_dtypes; const int32_t* output_ranks;
  const int64_t* output_dims;      // all output dims concatenated
  const int32_t* output_source;    // per output: -1 = computed, k >= 0: output IS input k
  const int32_t* output_forward;   // per output: -1, or input whose buffer it may reuse
  int32_t num_temps;   const int64_t* temp_bytes;
  int32_t num_steps;   const TfjitStep* steps;
  int32_t num_messages; const char* const* messages;  // status k -> messages[k-1]
  int32_t num_updates; const int32_t* update_input;   // trailing outputs -> variable inputs
  const int32_t* update_in_place;                      // per update: may overwrite the old value
  const int64_t* temp_offsets;     // per temp: its kTfjitAlign-aligned offset in one arena
  int64_t arena_bytes;             // the arena's size (temps with disjoint lifetimes overlap)
  // Data-dependent shapes (Where): the last num_counts outputs are int64 scalars the
  // kernels write, not node outputs; output o with output_rows[o] = c >= 0 is written
  // into a buffer of its bound (output_dims) and handed to TF as its first count rows,
  // count being output c's value.  -1: a static shape.
  int32_t num_counts; const int32_t* output_rows;
};

// What this library was built with: [version, alignment, sizeof(TfjitStatus),
// offsetof(TfjitStatus, detail), sizeof(TfjitStep), sizeof(TfjitExecutable),
// offsetof(TfjitExecutable, output_rows)].
inline void TfjitAbiLayoutOf(int64_t* out) {
  out[0] = kTfjitAbiVersion;
  out[1] = kTfjitAlign;
  out[2] = sizeof(TfjitStatus);
  out[3] = offsetof(TfjitStatus, detail);
  out[4] = sizeof(TfjitStep);
  out[5] = sizeof(TfjitExecutable);
  out[6] = offsetof(TfjitExecutable, output_rows);
}
}

#endif  // TFJIT_RUNTIME_ABI_H_
