#ifndef REPLICAD_CORE_MODEL_PLACEMENT_H_
#define REPLICAD_CORE_MODEL_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/graph.h"

namespace replicad {

// Model parallelism as Theano's contexts have it: the nodes of one graph
// placed on named contexts (the slots of --device-map), each part computed
// where it is placed, values crossing contexts handed over between them.

// One rule: the nodes whose names match `pattern` run on `context`. A
// pattern with '*' (any run of characters, '/' included) or '?' (one
// character) is a glob over the whole name; without either it is a prefix.
struct PlacementRule {
  std::string pattern;
  std::string context;
};

// Parses "PATTERN->CONTEXT; PATTERN->CONTEXT ..." (e.g. "/layer1/*->dev0;
// /layer3/->dev1"), spaces around each part ignored. InvalidArgument naming
// `field`, the rule and what was expected: an empty text or rule, a rule
// without "->", an empty pattern or context.
absl::StatusOr<std::vector<PlacementRule>> ParsePlacement(absl::string_view text,
                                                          absl::string_view field);

// One part of a placed graph: the nodes of one context that run together.
// `graph` holds the original's values (same indices), the part's nodes in
// their original order, the initializers they read, as inputs the original's
// inputs and other parts' values it reads, as outputs the values it computes
// that the original returns or another part reads.
struct GraphPart {
  std::string context;
  Graph graph;
  std::vector<int> after;  // Indices of the parts whose outputs it reads.
};

// A graph cut into parts, in an order in which each part comes after every
// part it reads from (run them so, or concurrently where `after` allows).
struct PlacedGraph {
  std::vector<GraphPart> parts;
  // Per node of the original graph, the part it went to.
  std::vector<int> part_of_node;
};

// Places every node of `graph` on a context of `contexts`: the first rule
// whose pattern matches its name decides; a node no rule matches runs where
// the node computing its first computed input runs (Theano: an op runs
// where its inputs live), or, reading only graph inputs and initializers,
// on the first rule's context. Parts are made in node order: a node joins
// its context's latest part when that part already waits (directly or not)
// on every part the node reads from, and starts a new part otherwise, so a
// part never waits on a later one and two branches placed apart stay free
// to run side by side. InvalidArgument naming the rule for a context not in
// `contexts` and for a pattern that matches no node; Unimplemented naming
// the node for a node guarded by an If's branch (if_branches.h), which
// placement does not cut yet.
absl::StatusOr<PlacedGraph> PlaceGraph(const Graph& graph, const std::vector<PlacementRule>& rules,
                                       const std::vector<std::string>& contexts);

// The context PlaceGraph gives each node (its rules' part), with its errors.
absl::StatusOr<std::vector<std::string>> NodeContexts(const Graph& graph,
                                                      const std::vector<PlacementRule>& rules,
                                                      const std::vector<std::string>& contexts);

// Gives each node of `graph` whose (*context_of)[n] is empty the context
// of the node computing its first computed input (already decided: nodes
// come in order), or `fallback` when it reads only graph inputs and
// initializers: Theano's rule, which NodeContexts applies to the nodes no
// rule matches. `*context_of` has one entry per node.
void FollowInputs(const Graph& graph, const std::string& fallback,
                  std::vector<std::string>* context_of);

// The parts of `graph` whose node n runs on context_of[n], formed as
// PlaceGraph forms them (what an automatic placement decides goes here).
// Unimplemented as PlaceGraph's.
absl::StatusOr<PlacedGraph> PlaceNodes(const Graph& graph,
                                       const std::vector<std::string>& context_of);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_PLACEMENT_H_
