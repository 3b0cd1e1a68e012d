#ifndef REPLICAD_CORE_MODEL_IF_BRANCHES_H_
#define REPLICAD_CORE_MODEL_IF_BRANCHES_H_

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// The attributes that carry a node's guards (Node::guards) from this pass to
// the graph's conversion: the condition values' names, and per condition the
// branch (1: then, 0: else) the node belongs to.
inline constexpr char kGuardConditions[] = "replicad.guard_conditions";
inline constexpr char kGuardBranches[] = "replicad.guard_branches";

// An If holds its two branches as subgraphs; the engine's graph is flat. So
// every If of `graph` (nested ones first) is flattened in place:
//   - the nodes of both branches move into the graph just before the If,
//     each guarded by the If's condition (kGuardConditions/kGuardBranches;
//     a nested If's nodes carry both guards), the values they compute
//     renamed "<if node>/then/<name>" (or /else/) so the branches' names can
//     never meet each other's or the graph's;
//   - the If keeps its condition as input 0 and takes the then-branch's
//     outputs, then the else-branch's, as inputs 1..2n (n: its outputs).
// A plan runs a guarded node only where its conditions hold, and the If
// passes the taken branch's outputs on (see execution_plan.h). Branch
// initializers are refused (InvalidArgument naming the If): exporters write
// Constants there.
absl::Status FlattenIfBranches(onnx::GraphProto* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_IF_BRANCHES_H_
