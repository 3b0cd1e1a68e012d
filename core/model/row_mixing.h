#ifndef REPLICAD_CORE_MODEL_ROW_MIXING_H_
#define REPLICAD_CORE_MODEL_ROW_MIXING_H_

#include <string>

#include "core/model/graph.h"

namespace replicad {

// Whether a model computes each row of its batch (dim 0 of its inputs) on
// its own: what splitting a batch over slots, cutting it into chunks and
// fusing several requests into one batch all assume. A node that works
// along dim 0 of a value carrying the request's rows (a reduction or an
// arg-max over it, a running sum, a sort, a gather that indexes rows, a
// transpose that moves dim 0 away, a slice or split of rows, ...) makes one
// row's result depend on the others: such a model must run each request
// alone and whole. Conservative on what it can judge from the graph (an axis
// counted from the back on a value of unknown rank is taken as not dim 0;
// Reshape is taken to keep the rows in dim 0, as exporters write it).
//
// The first node (in graph order) that mixes rows, as "<op> node '<name>'
// (<why>)", or "" when every row is computed on its own.
std::string RowMixingNode(const Graph& graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ROW_MIXING_H_
