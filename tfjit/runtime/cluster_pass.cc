// TfjitClusterPass: auto-clustering of every graph TensorFlow executes.
//
// Registered where XLA's MarkForCompilationPass runs (POST_REWRITE_FOR_EXEC,
// after placement), so it sees Session graphs and every tf.function body
// alike. The pass itself decides nothing: it hands the graph, as a GraphDef
// annotated with each node's output dtypes, to tfjit's Python clustering
// (tfjit/api/autojit.py) through a callback, and installs the rewritten graph
// that comes back. Without a callback, or when the callback declines, the
// graph is left untouched. A callback error never fails the run: the graph
// runs unclustered and the error is logged (auto mode never breaks a program).
//
// ABI with tfjit/runtime/launch.py:
//   int32_t TfjitPassCallback(graph_def, len, is_function_graph, jit_level,
//                             function_name, result_ctx, error, error_len);
//     returns 0 (leave the graph as it is), 1 (rewritten: the callback handed
//     the new GraphDef to TfjitPassResult(result_ctx, data, len)), or < 0
//     (error message in error). jit_level is the session's
//     OptimizerOptions.global_jit_level (-1 when there are no session options).
//     function_name is the NUL-terminated name of the function the graph was
//     instantiated from ("" for a Session graph).
//   extern "C" void TfjitSetPassCallback(TfjitPassCallback cb);
//   extern "C" void TfjitPassResult(void* result_ctx, const char* data, int64_t len);

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/public/session_options.h"

extern "C" {
typedef int32_t (*TfjitPassCallback)(const char* graph_def, int64_t len, int32_t is_function_graph,
                                     int32_t jit_level, const char* function_name,
                                     void* result_ctx, char* error, int32_t error_len);
}

namespace tensorflow {
namespace {

constexpr int kPassErrorLen = 4096;
// Attribute carrying each node's output dtypes to the Python side; the
// rewritten graph never contains it.
constexpr char kOutputTypesAttr[] = "_tfjit_output_types";

std::atomic<TfjitPassCallback> g_pass_callback{nullptr};

class TfjitClusterPass : public GraphOptimizationPass {
 public:
  absl::Status Run(const GraphOptimizationPassOptions& options) override {
    TfjitPassCallback callback = g_pass_callback.load(std::memory_order_acquire);
    if (callback == nullptr || options.graph == nullptr || *options.graph == nullptr) {
      return absl::OkStatus();
    }
    Graph* graph = options.graph->get();
    GraphDef graph_def;
    graph->ToGraphDef(&graph_def);
    graph_def.clear_library();
    AddReachableFunctions(options.flib_def, &graph->flib_def(), &graph_def);
    std::unordered_map<std::string, NodeDef*> by_name;
    for (NodeDef& nd : *graph_def.mutable_node()) by_name[nd.name()] = &nd;
    for (const Node* n : graph->op_nodes()) {
      auto it = by_name.find(n->name());
      if (it == by_name.end()) continue;
      AttrValue types;
      for (DataType t : n->output_types()) types.mutable_list()->add_type(t);
      (*it->second->mutable_attr())[kOutputTypesAttr] = types;
    }
    const std::string serialized = graph_def.SerializeAsString();
    int32_t jit_level = -1;
    if (options.session_options != nullptr) {
      jit_level = options.session_options->config.graph_options().optimizer_options()
                      .global_jit_level();
    }
    const std::string function_name =
        options.function_def != nullptr ? options.function_def->signature().name() : "";
    std::string result;
    char error[kPassErrorLen] = {0};
    const int32_t rc = callback(serialized.data(), static_cast<int64_t>(serialized.size()),
                                options.is_function_graph ? 1 : 0, jit_level,
                                function_name.c_str(), &result, error, kPassErrorLen);
    error[kPassErrorLen - 1] = '\0';
    if (rc == 0) return absl::OkStatus();
    if (rc < 0) {
      LOG(WARNING) << "tfjit: auto-clustering left this graph to TensorFlow: " << error;
      return absl::OkStatus();
    }
    absl::Status status = Install(options, graph, result);
    if (!status.ok()) {
      LOG(WARNING) << "tfjit: could not install the clustered graph; running it unclustered: "
                   << status.message();
    }
    return absl::OkStatus();
  }

 private:
  // Copies into `graph_def`'s library the functions its nodes reach (If/While/Case
  // branches and bodies, calls), transitively, from the runtime's library (a
  // Session's or a function's) or the graph's own: marking clusters a While/If
  // only when its bodies compile, so without them every one stayed in TF. Only
  // the reachable ones: a Keras program's library holds hundreds of functions,
  // and this runs for every graph.
  static void AddReachableFunctions(const FunctionLibraryDefinition* runtime,
                                    const FunctionLibraryDefinition* own, GraphDef* graph_def) {
    std::vector<std::string> stack;
    auto push = [&stack](const NodeDef& nd) {
      stack.push_back(nd.op());   // a function called as an op
      for (const auto& [name, value] : nd.attr()) {
        if (value.has_func()) stack.push_back(value.func().name());
        for (const NameAttrList& f : value.list().func()) stack.push_back(f.name());
      }
    };
    for (const NodeDef& nd : graph_def->node()) push(nd);
    std::unordered_set<std::string> seen;
    while (!stack.empty()) {
      const std::string name = std::move(stack.back());
      stack.pop_back();
      if (!seen.insert(name).second) continue;
      const FunctionDef* fdef = runtime != nullptr ? runtime->Find(name) : nullptr;
      if (fdef == nullptr && own != nullptr) fdef = own->Find(name);
      if (fdef == nullptr) continue;
      *graph_def->mutable_library()->add_function() = *fdef;
      for (const NodeDef& nd : fdef->node_def()) push(nd);
    }
  }

  // Adds the fallback functions to both libraries the runtime may consult and
  // replaces the graph; the original graph is kept on any failure.
  static absl::Status Install(const GraphOptimizationPassOptions& options, Graph* graph,
                              const std::string& result) {
    GraphDef rewritten;
    if (!rewritten.ParseFromString(result)) {
      return absl::InternalError("the clustering callback returned a malformed GraphDef");
    }
    auto new_graph = std::make_unique<Graph>(graph->flib_def());
    for (const FunctionDef& fdef : rewritten.library().function()) {
      const std::string& fname = fdef.signature().name();
      if (options.flib_def != nullptr && options.flib_def->Find(fname) == nullptr) {
        TF_RETURN_IF_ERROR(options.flib_def->AddFunctionDef(fdef));
      }
      if (new_graph->flib_def().Find(fname) == nullptr) {
        FunctionDefLibrary one;
        *one.add_function() = fdef;
        TF_RETURN_IF_ERROR(new_graph->AddFunctionLibrary(one));
      }
    }
    rewritten.clear_library();
    GraphConstructorOptions opts;
    opts.allow_internal_ops = true;   // _Arg, _Retval, _Send, _Recv
    opts.expect_device_spec = true;   // placement is done: keep every node's device
    TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(opts, std::move(rewritten), new_graph.get()));
    *options.graph = std::move(new_graph);
    return absl::OkStatus();
  }
};

// Priority 5: before XLA's own auto-clustering passes in the same phase, so
// ops tfjit clusters are never offered to XLA.
REGISTER_OPTIMIZATION(OptimizationPassRegistry::POST_REWRITE_FOR_EXEC, 5, TfjitClusterPass);

}  // namespace
}  // namespace tensorflow

#define TFJIT_PASS_EXPORT extern "C" __attribute__((visibility("default")))

TFJIT_PASS_EXPORT void TfjitSetPassCallback(TfjitPassCallback cb) {
  tensorflow::g_pass_callback.store(cb, std::memory_order_release);
}

TFJIT_PASS_EXPORT void TfjitPassResult(void* result_ctx, const char* data, int64_t len) {
  static_cast<std::string*>(result_ctx)->assign(data, static_cast<size_t>(len));
}
