// Attention and the 2026-07-17 record's variants of it as differentiable ops on the reference tape
// (reference_tape.h), in double: windowed document-causal softmax attention, the adjacent-pair rotary, the
// partial key offset, XSA and the DC correction (SPEEDRUN89.md section 2; docs/kernels.md). Rows hold
// `heads` heads of `head_dim` values each.
#pragma once

#include <vector>

#include "test/reference/reference_tape.h"

namespace ref {

// Per head: softmax over the keys s of the query row r's document (doc_of_row) with 0 <= r - s <= window of
// scale q_h[r] . k_h[s], times v_h[s]. q, k, v: (rows, heads head_dim).
NodeId window_attention(Tape& t, NodeId q, NodeId k, NodeId v, int heads, int head_dim,
                        const std::vector<int>& doc_of_row, int window, double scale);

// Turns the adjacent pairs (2m, 2m + 1), m < pairs, of each head: y[2m] = x[2m] c + x[2m+1] s, y[2m+1] =
// x[2m+1] c - x[2m] s with c, s = cos_table, sin_table[position[r heads + h]][m]; the other dims unchanged.
NodeId rotary_pairs(Tape& t, NodeId x, int heads, int head_dim, int pairs, const std::vector<double>& cos_table,
                    const std::vector<double>& sin_table, const std::vector<int>& position);

// Row r >= 1 takes dims [head_dim / 2, head_dim) of every head from row r - 1 (row 0 keeps its own).
NodeId key_offset(Tape& t, NodeId k, int heads, int head_dim);

// y_h -= tanh(alpha[r, column + h]) (y_h . v_h / max(|v_h|^2, 1e-8)) v_h per row and head.
NodeId xsa(Tape& t, NodeId y, NodeId v, NodeId alpha, int column, int heads, int head_dim);

// The DC correction: P_h[r, s] = softmax over 0 <= r - s < window in r's document of scale q_h[r] . k_h[s];
// A[r, s] = sum_h w1[r, h] P_h[r, s]; out_h[r] = y_h[r] + sum_s w2[r, h] A[r, s] v_h[s]. w1, w2: (rows, heads).
NodeId dc_correction(Tape& t, NodeId y, NodeId q, NodeId k, NodeId v, NodeId w1, NodeId w2, int heads, int head_dim,
                     const std::vector<int>& doc_of_row, int window, double scale);

}  // namespace ref
