// A reverse-mode tape of double-precision matrices, on which the reference models are written as their
// forward reads; each op records how to send its output's gradient back to its inputs, and backward() runs
// those in reverse. Ops on the tape: reference_tape_ops.h (linear algebra, elementwise, gathers) and
// reference_tape_attention.h (attention and its #89 variants).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ref {

using NodeId = int;

class Tape {
 public:
  using Backward = std::function<void(Tape&, NodeId self)>;

  // A matrix of rows x cols (row-major) that gradients stop at: a parameter or an input.
  NodeId leaf(std::vector<double> value, int rows, int cols) { return push(std::move(value), rows, cols, nullptr); }
  // The output of an op; `backward(tape, self)` adds grad(self) into its inputs' grads.
  NodeId push(std::vector<double> value, int rows, int cols, Backward backward) {
    if (value.size() != static_cast<size_t>(rows) * static_cast<size_t>(cols))
      throw std::invalid_argument("Tape: " + std::to_string(value.size()) + " values for a " + std::to_string(rows) +
                                  " x " + std::to_string(cols) + " node");
    nodes_.push_back(Node{std::move(value), {}, rows, cols, std::move(backward)});
    return static_cast<NodeId>(nodes_.size() - 1);
  }

  const std::vector<double>& value(NodeId id) const { return nodes_.at(static_cast<size_t>(id)).value; }
  int rows(NodeId id) const { return nodes_.at(static_cast<size_t>(id)).rows; }
  int cols(NodeId id) const { return nodes_.at(static_cast<size_t>(id)).cols; }
  // The gradient of the node seeded by backward(); zeros until something adds to it.
  std::vector<double>& grad(NodeId id) {
    Node& node = nodes_.at(static_cast<size_t>(id));
    if (node.grad.empty()) node.grad.assign(node.value.size(), 0.0);
    return node.grad;
  }

  // d(scalar)/d(every node): seeds 1 at the 1 x 1 node `scalar`, then runs the ops' backward in reverse.
  void backward(NodeId scalar) {
    if (value(scalar).size() != 1) throw std::invalid_argument("Tape::backward: the seed is not a 1 x 1 node");
    grad(scalar)[0] += 1.0;
    for (NodeId id = scalar; id >= 0; id--)
      if (nodes_[static_cast<size_t>(id)].backward && !nodes_[static_cast<size_t>(id)].grad.empty())
        nodes_[static_cast<size_t>(id)].backward(*this, id);
  }

 private:
  struct Node {
    std::vector<double> value, grad;
    int rows = 0, cols = 0;
    Backward backward;
  };
  std::vector<Node> nodes_;
};

}  // namespace ref
