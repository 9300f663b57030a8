// Differentiable double-precision ops on the reference tape (reference_tape.h): sub-matrices, products,
// per-row and per-column scalings, norms, activations and row gathers. Every op returns a new node; shapes
// are checked and a mismatch throws std::invalid_argument naming the op.
#pragma once

#include <vector>

#include "test/reference/reference_tape.h"

namespace ref {

// rows x cols values starting at flat element `offset` of x (a tensor inside a bigger buffer).
NodeId flat_slice(Tape& t, NodeId x, size_t offset, int rows, int cols);
// Columns [begin, begin + count) of x.
NodeId columns(Tape& t, NodeId x, int begin, int count);
// [a | b]: the columns of a, then those of b (same rows).
NodeId concat_columns(Tape& t, NodeId a, NodeId b);

// x w^T: x (n, k), w (m, k) -> (n, m).
NodeId linear(Tape& t, NodeId x, NodeId w);
// x w: x (n, k), w (k, m) -> (n, m).
NodeId matmul(Tape& t, NodeId x, NodeId w);

NodeId add(Tape& t, NodeId a, NodeId b);
// x + b[j] in every row (b: 1 x cols, or the first cols values of a longer row vector).
NodeId add_row(Tape& t, NodeId x, NodeId b);
// x * s[index] (s any node: one of its values, e.g. a scalar parameter).
NodeId scale(Tape& t, NodeId x, NodeId s, int index);
NodeId scale_const(Tape& t, NodeId x, double c);
// Each value rounded to the nearest bf16 (a record's `.bfloat16()` copy of an fp32 parameter); the cast passes
// the gradient through unchanged.
NodeId bf16_copy(Tape& t, NodeId x);
// out[r, c] = x[r, c] * g[r, column + c / group]: per-row gates, one per group of `group` columns (group = cols:
// one gate per row; group = D: one per head).
NodeId mul_gate(Tape& t, NodeId x, NodeId g, int column, int group);
// Elementwise x * m with m a constant (no gradient to m), same shape.
NodeId mul_constant(Tape& t, NodeId x, const std::vector<double>& m);

// RMSNorm without weight over each group of `group` consecutive columns: x / sqrt(mean(x^2) + eps).
NodeId rms_norm(Tape& t, NodeId x, int group, double eps);
NodeId sigmoid(Tape& t, NodeId x);
NodeId gelu(Tape& t, NodeId x);         // the exact one: x Phi(x)
NodeId relu_square(Tape& t, NodeId x);  // max(x, 0)^2

// Rows rows[i] of table (scatter-add backward).
NodeId gather_rows(Tape& t, NodeId table, const std::vector<int>& rows);
// out[r] = x[r - 1], out[0] = 0.
NodeId shift_rows(Tape& t, NodeId x);

}  // namespace ref
