"""The header of an AOT object: plain C entry points plus a tfcompile-style C++ class.

The C part (usable from C and C++) declares the driver's entry points and
``#define``s each buffer's size; the C++ part (``__cplusplus`` only) is a class
in the requested namespace in the spirit of tfcompile's
``XlaCompiledCpuFunction``: it owns 64-byte aligned argument, result and temp
buffers, exposes them untyped (``arg_data(i)``) and typed by position and by
config name (``arg0_data()``, ``arg_x_data()``, ``arg_x(i, j)``), and ``Run()``
calls the object's ``run_with_temps`` (no allocation per run).
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt

_C_TYPE = {"f32": "float", "f64": "double", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t",
           "i64": "int64_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t",
           "u64": "uint64_t", "pred": "bool",
           # half types are exposed as their raw IEEE/bfloat16 bits
           "f16": "uint16_t", "bf16": "uint16_t"}
_TF_NAME = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
            "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
            "u16": "uint16", "u32": "uint32", "u64": "uint64", "pred": "bool"}


# C++20's keywords and alternative tokens: no namespace or class may be named so.
CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected
    public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq""".split())


def split_class(cpp_class: str) -> tuple:
    """``"a::b::Name"`` -> (["a", "b"], "Name"), validating each part as tfcompile does:
    an identifier, not a C++ keyword, not reserved to the implementation (``__x``,
    ``_X``)."""
    from tfjit.aot.config import AotError, _IDENT
    parts = cpp_class.split("::")
    if parts and parts[0] == "":
        parts = parts[1:]         # a leading "::" names the global namespace
    if not parts or any(not _IDENT.match(p) for p in parts):
        raise AotError(f"--cpp_class={cpp_class!r} is not a C++ class name like ns::Name")
    for p in parts:
        if p in CPP_KEYWORDS:
            raise AotError(f"--cpp_class={cpp_class!r}: {p!r} is a C++ keyword")
        if "__" in p or (p[0] == "_" and len(p) > 1 and p[1].isupper()):
            raise AotError(f"--cpp_class={cpp_class!r}: {p!r} is reserved in C++ "
                           "(a double underscore, or an underscore and a capital)")
    return parts[:-1], parts[-1]


def _nbytes(t) -> int:
    return math.prod(t.shape) * t.dtype.itemsize


def _shape_text(t) -> str:
    return f"{_TF_NAME[t.dtype.name]}[{', '.join(str(d) for d in t.shape)}]"


def _accessors(kind: str, index: int, t, array: str) -> list:
    """Typed accessors for one buffer, by position and by name."""
    ctype = _C_TYPE[t.dtype.name]
    dims = [f"size_t d{k}" for k in range(len(t.shape))]
    offset = "0"
    for k, d in enumerate(t.shape):
        offset = f"d{k}" if offset == "0" else f"({offset}) * {d} + d{k}"
    out = []
    for name in dict.fromkeys([f"{kind}{index}", f"{kind}_{t.name}"]):
        out += [
            f"  // {kind} {index} '{t.name}' ({t.tensor}): {_shape_text(t)}",
            f"  {ctype}* {name}_data() {{ return static_cast<{ctype}*>({array}[{index}]); }}",
            f"  const {ctype}* {name}_data() const {{ return static_cast<const {ctype}*>({array}[{index}]); }}",
            f"  {ctype}& {name}({', '.join(dims)}) {{ return {name}_data()[{offset}]; }}",
            f"  const {ctype}& {name}({', '.join(dims)}) const {{ return {name}_data()[{offset}]; }}",
        ]
    return out


def _table(name: str, ctype: str, rows: list) -> str:
    values = ", ".join(rows) if rows else "0"
    return f"static const {ctype} {name}[] = {{{values}}};"


def render(artifact, cpp_class: str, source: str) -> str:
    """The header text for ``artifact`` (compile.Artifact); ``source`` says what it came from."""
    namespaces, cls = split_class(cpp_class)
    p = artifact.prefix
    up = p.upper()
    feeds, fetches, layout = artifact.feeds, artifact.fetches, artifact.layout
    guard = f"TFJIT_AOT_{'_'.join(namespaces + [cls]).upper()}_H_"
    c_defines = [f"#define {up}_NUM_ARGS {len(feeds)}", f"#define {up}_NUM_RESULTS {len(fetches)}",
                 f"#define {up}_TEMP_BYTES {layout.temp_bytes}"]
    for kind, items in (("ARG", feeds), ("RESULT", fetches)):
        for k, t in enumerate(items):
            c_defines.append(f"#define {up}_{kind}{k}_BYTES {_nbytes(t)}  /* {t.name}: {_shape_text(t)} */")
    statuses = "\n".join(f" *   {k}: {m}" for k, m in enumerate(layout.messages))

    def meta(kind, items):
        dims, offsets, ranks = [], [], []
        for t in items:
            offsets.append(str(len(dims)))
            ranks.append(str(len(t.shape)))
            dims += [str(d) for d in t.shape]
        names = ", ".join(f'"{t.name}"' for t in items) or '""'
        types = ", ".join(f'"{_TF_NAME[t.dtype.name]}"' for t in items) or '""'
        sizes = ", ".join(f"{_nbytes(t)}u" for t in items) or "0u"
        return [
            f"  static const char* {kind}_name(size_t i) {{ static const char* v[] = {{{names}}}; return v[i]; }}",
            f"  static const char* {kind}_type(size_t i) {{ static const char* v[] = {{{types}}}; return v[i]; }}",
            f"  static size_t {kind}_size(size_t i) {{ static const size_t v[] = {{{sizes}}}; return v[i]; }}",
            f"  static int {kind}_rank(size_t i) {{ {_table('v', 'int', ranks)} return v[i]; }}",
            f"  static const int64_t* {kind}_shape(size_t i) {{",
            f"    {_table('dims', 'int64_t', dims)}",
            f"    {_table('offsets', 'int', offsets)}",
            f"    return dims + offsets[i];",
            f"  }}",
        ]

    typed = []
    for k, t in enumerate(feeds):
        typed += _accessors("arg", k, t, "args_")
    for k, t in enumerate(fetches):
        typed += _accessors("result", k, t, "results_")
    ns_open = "".join(f"namespace {n} {{\n" for n in namespaces)
    ns_close = "".join(f"}}  // namespace {n}\n" for n in reversed(namespaces))
    n_args, n_res = max(len(feeds), 1), max(len(fetches), 1)
    return f"""\
// Generated by tfjit-aot from {source}. Do not edit.
// Target: {artifact.target}. {artifact.num_kernels} kernel(s).
//
// Link with the object file{_runtime_words(artifact)} and -lm (the class needs C++17).
// Needs neither Python nor TensorFlow. Runs single-threaded on the calling thread, with MXCSR
// flush-to-zero/denormals-are-zero set during the call as TF's threads do. The
// entry points keep no state: distinct buffers (or class instances) may run
// concurrently on different threads. Every argument, result and temp
// buffer must be 64-byte aligned, and no two of them may overlap (the entry
// points refuse NULL or misaligned pointers with a status, see below).
// Half-precision buffers (float16, bfloat16) hold raw 16-bit patterns.
#ifndef {guard}
#define {guard}

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

{chr(10).join(c_defines)}

#ifdef __cplusplus
extern "C" {{
#endif

/* Runs the computation: args[i] points to argument i, results[j] to result j.
 * temps: {up}_TEMP_BYTES bytes, 64-byte aligned (may be NULL when that is 0).
 * Returns a status code; 0 is success. Status codes:
{statuses}
 */
int32_t {p}_run_with_temps(void** args, void** results, void* temps);
/* The same with temporaries malloc'd and freed inside the call. */
int32_t {p}_run(void** args, void** results);
/* The text of a status code (never NULL). */
const char* {p}_error_message(int32_t status);
/* {up}_TEMP_BYTES, for callers without this header's macros. */
int64_t {p}_temp_bytes(void);

#ifdef __cplusplus
}}  // extern "C"

#include <cstdlib>
#include <new>

{ns_open}
// {cls}: arguments {', '.join(f'{t.name} {_shape_text(t)}' for t in feeds) or '(none)'};
// results {', '.join(f'{t.name} {_shape_text(t)}' for t in fetches)}.
class {cls} {{
 public:
  static constexpr int kNumArgs = {len(feeds)};
  static constexpr int kNumResults = {len(fetches)};
  static constexpr size_t kTempBytes = {layout.temp_bytes};
  static constexpr size_t kAlignment = 64;

  // ARGS_RESULTS_AND_TEMPS: the object owns buffers for everything.
  // RESULTS_AND_TEMPS_ONLY: every argument must be given with set_arg_data.
  enum class AllocMode {{ ARGS_RESULTS_AND_TEMPS, RESULTS_AND_TEMPS_ONLY }};

  explicit {cls}(AllocMode mode = AllocMode::ARGS_RESULTS_AND_TEMPS) {{
    for (int i = 0; i < {n_args}; ++i) args_[i] = owned_[i] = nullptr;
    for (int i = 0; i < {n_res}; ++i) results_[i] = nullptr;
    temps_ = nullptr;
    for (int i = 0; i < kNumArgs; ++i)
      if (mode == AllocMode::ARGS_RESULTS_AND_TEMPS) args_[i] = owned_[i] = Allocate(arg_size(i));
    for (int i = 0; i < kNumResults; ++i) results_[i] = Allocate(result_size(i));
    if (kTempBytes) temps_ = Allocate(kTempBytes);
  }}
  ~{cls}() {{
    for (int i = 0; i < kNumArgs; ++i) std::free(owned_[i]);
    for (int i = 0; i < kNumResults; ++i) std::free(results_[i]);
    std::free(temps_);
  }}
  {cls}(const {cls}&) = delete;
  {cls}& operator=(const {cls}&) = delete;

  // Runs the computation on the current buffers; false on error (see error_msg()).
  bool Run() {{
    status_ = {p}_run_with_temps(args_, results_, temps_);
    return status_ == 0;
  }}
  int32_t status() const {{ return status_; }}
  const char* error_msg() const {{ return status_ == 0 ? "" : {p}_error_message(status_); }}

  void* arg_data(size_t i) {{ return args_[i]; }}
  const void* arg_data(size_t i) const {{ return args_[i]; }}
  // Uses caller memory for argument i (64-byte aligned, arg_size(i) bytes, not written).
  void set_arg_data(size_t i, const void* data) {{ args_[i] = const_cast<void*>(data); }}
  void* result_data(size_t i) {{ return results_[i]; }}
  const void* result_data(size_t i) const {{ return results_[i]; }}
  void** args() {{ return args_; }}
  void** results() {{ return results_; }}

{chr(10).join(meta("arg", feeds))}
{chr(10).join(meta("result", fetches))}

{chr(10).join(typed)}

 private:
  static void* Allocate(size_t bytes) {{
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }}

  void* args_[{n_args}];
  void* owned_[{n_args}];
  void* results_[{n_res}];
  void* temps_;
  int32_t status_ = 0;
}};
{ns_close}
#endif  // __cplusplus
#endif  // {guard}
"""


def _runtime_words(artifact) -> str:
    """The runtime library the object needs (dot, convolution: aot/runtime.py), if any."""
    if not artifact.runtime_library:
        return ""
    return (f", then {artifact.runtime_library} (its dot and convolution runtime,\n"
            f"// Eigen for {artifact.runtime_level}; written beside the object)")
