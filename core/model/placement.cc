#include "core/model/placement.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"
#include "core/model/graph_rewrite.h"

namespace replicad {
namespace {

bool Matches(const std::string& pattern, const std::string& name) {
  if (pattern.find_first_of("*?") == std::string::npos) return absl::StartsWith(name, pattern);
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string RuleText(const PlacementRule& rule) {
  return absl::StrCat("'", rule.pattern, "->", rule.context, "'");
}

// A part while nodes are being assigned: its nodes, the parts it reads from,
// and every part it waits on, directly or not.
struct Forming {
  std::string context;
  std::vector<int> nodes;
  std::set<int> after;
  std::set<int> ancestors;
};

// Whether a node reading from `reads` may join `part`: only if the part
// already waits on each of them. A part's waits are fixed by its first
// node, so a part never waits on one made after it (no cycle, and the
// creation order runs), and a node that would make a part wait on a branch
// it did not wait on before starts a new part instead, so that the two
// branches still run side by side.
bool MayJoin(const Forming& part, int index, const std::set<int>& reads) {
  for (int r : reads) {
    if (r != index && part.ancestors.count(r) == 0) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<PlacementRule>> ParsePlacement(absl::string_view text,
                                                          absl::string_view field) {
  std::vector<PlacementRule> rules;
  for (absl::string_view piece : absl::StrSplit(text, ';')) {
    piece = absl::StripAsciiWhitespace(piece);
    if (piece.empty()) continue;
    const size_t arrow = piece.find("->");
    if (arrow == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": rule '", ClientText(piece),
                                                     "' has no '->', expected PATTERN->CONTEXT"));
    }
    PlacementRule rule{std::string(absl::StripAsciiWhitespace(piece.substr(0, arrow))),
                       std::string(absl::StripAsciiWhitespace(piece.substr(arrow + 2)))};
    if (rule.pattern.empty() || rule.context.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": rule '", ClientText(piece),
                       "' needs both a node-name pattern and a context, "
                       "expected PATTERN->CONTEXT such as '/layer1/*->dev0'"));
    }
    rules.push_back(std::move(rule));
  }
  if (rules.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected rules PATTERN->CONTEXT separated by ';', received '",
                     ClientText(text), "'"));
  }
  return rules;
}

namespace {

// Each node's context: the first rule that matches its name, else its first
// computed input's, else the first rule's. InvalidArgument for a rule that
// matches nothing; Unimplemented for a guarded node.
absl::StatusOr<std::vector<std::string>> ContextsOfNodes(const Graph& graph,
                                                         const std::vector<PlacementRule>& rules) {
  std::vector<std::string> context_of(graph.nodes.size());
  std::vector<bool> rule_used(rules.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    for (size_t r = 0; r < rules.size() && context_of[n].empty(); ++r) {
      if (Matches(rules[r].pattern, node.name)) {
        context_of[n] = rules[r].context;
        rule_used[r] = true;
      }
    }
  }
  FollowInputs(graph, rules[0].context, &context_of);
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!rule_used[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement rule ", RuleText(rules[r]), " matches no node of the model"));
    }
  }
  return context_of;
}

// Nodes into parts, in order: a node joins its context's latest part where
// MayJoin allows, or starts a new one. Sets `part_of` per node.
std::vector<Forming> FormParts(const Graph& graph, const std::vector<std::string>& context_of,
                               const std::vector<int>& producer, std::vector<int>* part_of) {
  std::vector<Forming> parts;
  std::map<std::string, int> latest;
  part_of->assign(graph.nodes.size(), -1);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    std::set<int> reads;
    for (int v : graph.nodes[n].inputs) {
      if (v >= 0 && producer[v] >= 0) reads.insert((*part_of)[producer[v]]);
    }
    auto found = latest.find(context_of[n]);
    int part = found != latest.end() ? found->second : -1;
    if (part < 0 || !MayJoin(parts[part], part, reads)) {
      part = static_cast<int>(parts.size());
      Forming made{context_of[n], {}, reads, reads};
      for (int r : reads)
        made.ancestors.insert(parts[r].ancestors.begin(), parts[r].ancestors.end());
      parts.push_back(std::move(made));
      latest[context_of[n]] = part;
    }
    (*part_of)[n] = part;
    parts[part].nodes.push_back(static_cast<int>(n));
  }
  // A Shape (or Size) read by another part is copied into it: its value
  // follows from its input's type, which a plan knows, so the reader's plan
  // folds it; handed over, it would be a value the reader's plan cannot know
  // (its Reshape would wait on the request's values).
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    Forming& reader = parts[(*part_of)[n]];
    for (int v : graph.nodes[n].inputs) {
      const int q = v >= 0 ? producer[v] : -1;
      if (q < 0 || (*part_of)[q] == (*part_of)[n]) continue;
      const std::string& op = graph.nodes[q].op_type;
      if (op != "Shape" && op != "Size") continue;
      if (std::find(reader.nodes.begin(), reader.nodes.end(), q) != reader.nodes.end()) continue;
      reader.nodes.push_back(q);
      const int in = graph.nodes[q].inputs.empty() ? -1 : graph.nodes[q].inputs[0];
      if (in >= 0 && producer[in] >= 0 && (*part_of)[producer[in]] != (*part_of)[n]) {
        reader.after.insert((*part_of)[producer[in]]);
      }
    }
  }
  for (Forming& part : parts) std::sort(part.nodes.begin(), part.nodes.end());
  return parts;
}

// The part's own graph (see GraphPart) but its outputs, which depend on what
// the other parts read (PlaceNodes sets them).
Graph PartGraph(const Graph& graph, const Forming& part) {
  Graph g;
  g.values = graph.values;
  g.opset = graph.opset;
  std::set<int> produced, inputs;
  for (int n : part.nodes) {
    const Node& node = graph.nodes[n];
    g.nodes.push_back(node);
    for (int v : node.inputs) {
      if (v < 0 || produced.count(v) != 0) continue;
      auto weight = graph.initializers.find(v);
      if (weight != graph.initializers.end()) {
        g.initializers.emplace(v, weight->second);
      } else if (inputs.insert(v).second) {
        g.inputs.push_back(v);
      }
    }
    produced.insert(node.outputs.begin(), node.outputs.end());
  }
  return g;
}

}  // namespace

absl::StatusOr<PlacedGraph> PlaceGraph(const Graph& graph, const std::vector<PlacementRule>& rules,
                                       const std::vector<std::string>& contexts) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> context_of,
                            NodeContexts(graph, rules, contexts));
  return PlaceNodes(graph, context_of);
}

absl::StatusOr<std::vector<std::string>> NodeContexts(const Graph& graph,
                                                      const std::vector<PlacementRule>& rules,
                                                      const std::vector<std::string>& contexts) {
  if (rules.empty()) return absl::InvalidArgumentError("placement: no rules");
  for (const PlacementRule& rule : rules) {
    if (std::find(contexts.begin(), contexts.end(), rule.context) == contexts.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement rule ", RuleText(rule), " names context '", rule.context,
                       "', expected one of the device map's: ", absl::StrJoin(contexts, ", ")));
    }
  }
  return ContextsOfNodes(graph, rules);
}

void FollowInputs(const Graph& graph, const std::string& fallback,
                  std::vector<std::string>* context_of) {
  const std::vector<int> producer = Producers(graph);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    std::string& context = (*context_of)[n];
    const Node& node = graph.nodes[n];
    for (size_t i = 0; i < node.inputs.size() && context.empty(); ++i) {
      const int v = node.inputs[i];
      if (v >= 0 && producer[v] >= 0) context = (*context_of)[producer[v]];
    }
    if (context.empty()) context = fallback;
  }
}

absl::StatusOr<PlacedGraph> PlaceNodes(const Graph& graph,
                                       const std::vector<std::string>& context_of) {
  if (context_of.size() != graph.nodes.size()) {
    return absl::InternalError(absl::StrCat("placement: ", context_of.size(), " contexts for ",
                                            graph.nodes.size(), " nodes"));
  }
  const std::vector<int> producer = Producers(graph);
  for (int v : graph.outputs) {
    if (producer[v] < 0) {
      return absl::UnimplementedError(
          absl::StrCat("placement: graph output '", graph.values[v].name,
                       "' is not computed by any node (an input or a weight returned as it is)"));
    }
  }
  for (const Node& node : graph.nodes) {
    if (!node.guards.empty()) {
      return absl::UnimplementedError(
          absl::StrCat("placement: node '", node.name,
                       "' runs in a branch of an If, which placement does not cut yet"));
    }
  }
  PlacedGraph placed;
  const std::vector<Forming> parts = FormParts(graph, context_of, producer, &placed.part_of_node);
  for (const Forming& part : parts) {
    placed.parts.push_back(GraphPart{part.context, PartGraph(graph, part),
                                     std::vector<int>(part.after.begin(), part.after.end())});
  }
  // A part hands over what the graph returns and what another part reads
  // that a node computes (a copied Shape's input too): its outputs.
  std::vector<bool> handed_over(graph.values.size(), false);
  for (int v : graph.outputs) handed_over[v] = true;
  for (const GraphPart& part : placed.parts) {
    for (int v : part.graph.inputs) handed_over[v] = handed_over[v] || producer[v] >= 0;
  }
  for (GraphPart& part : placed.parts) {
    for (const Node& node : part.graph.nodes) {
      for (int v : node.outputs) {
        if (v >= 0 && handed_over[v]) part.graph.outputs.push_back(v);
      }
    }
  }
  return placed;
}

}  // namespace replicad
