// The reference tape's general ops (see reference_tape_ops.h).
#include "test/reference/reference_tape_ops.h"

#include <cmath>
#include <string>

#include "llmc/base/bf16_bits.h"

namespace ref {

namespace {

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

size_t at(int r, int c, int cols) {
  return static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(c);
}

// out = f(x) elementwise; dx += dout f'(x) (derivative takes x).
template <class F, class Derivative>
NodeId elementwise(Tape& t, NodeId x, F f, Derivative derivative) {
  std::vector<double> out(t.value(x).size());
  for (size_t i = 0; i < out.size(); i++) out[i] = f(t.value(x)[i]);
  return t.push(std::move(out), t.rows(x), t.cols(x), [x, derivative](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dx = tape.grad(x);
    for (size_t i = 0; i < dx.size(); i++) dx[i] += dout[i] * derivative(tape.value(x)[i]);
  });
}

}  // namespace

NodeId flat_slice(Tape& t, NodeId x, size_t offset, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  require(offset + n <= t.value(x).size(), "flat_slice", "outside the node");
  const auto begin = t.value(x).begin() + static_cast<std::ptrdiff_t>(offset);
  return t.push(std::vector<double>(begin, begin + static_cast<std::ptrdiff_t>(n)), rows, cols,
                [x, offset](Tape& tape, NodeId self) {
                  const std::vector<double>& dout = tape.grad(self);
                  std::vector<double>& dx = tape.grad(x);
                  for (size_t i = 0; i < dout.size(); i++) dx[offset + i] += dout[i];
                });
}

NodeId columns(Tape& t, NodeId x, int begin, int count) {
  const int rows = t.rows(x), cols = t.cols(x);
  require(begin >= 0 && count > 0 && begin + count <= cols, "columns", "outside the node");
  std::vector<double> out(static_cast<size_t>(rows) * count);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < count; c++) out[at(r, c, count)] = t.value(x)[at(r, begin + c, cols)];
  return t.push(std::move(out), rows, count, [x, begin, count, rows, cols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dx = tape.grad(x);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < count; c++) dx[at(r, begin + c, cols)] += dout[at(r, c, count)];
  });
}

NodeId concat_columns(Tape& t, NodeId a, NodeId b) {
  const int rows = t.rows(a), ca = t.cols(a), cb = t.cols(b), cols = ca + cb;
  require(t.rows(b) == rows, "concat_columns", "different row counts");
  std::vector<double> out(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < ca; c++) out[at(r, c, cols)] = t.value(a)[at(r, c, ca)];
    for (int c = 0; c < cb; c++) out[at(r, ca + c, cols)] = t.value(b)[at(r, c, cb)];
  }
  return t.push(std::move(out), rows, cols, [a, b, rows, ca, cb, cols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& da = tape.grad(a);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < ca; c++) da[at(r, c, ca)] += dout[at(r, c, cols)];
    std::vector<double>& db = tape.grad(b);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cb; c++) db[at(r, c, cb)] += dout[at(r, ca + c, cols)];
  });
}

NodeId linear(Tape& t, NodeId x, NodeId w) {
  const int n = t.rows(x), k = t.cols(x), m = t.rows(w);
  require(t.cols(w) == k, "linear", "x has " + std::to_string(k) + " columns, w " + std::to_string(t.cols(w)));
  std::vector<double> out(static_cast<size_t>(n) * m, 0.0);
  const std::vector<double>&xv = t.value(x), &wv = t.value(w);
  for (int r = 0; r < n; r++)
    for (int j = 0; j < m; j++) {
      double sum = 0.0;
      for (int i = 0; i < k; i++) sum += xv[at(r, i, k)] * wv[at(j, i, k)];
      out[at(r, j, m)] = sum;
    }
  return t.push(std::move(out), n, m, [x, w, n, k, m](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    const std::vector<double>&xv = tape.value(x), &wv = tape.value(w);
    std::vector<double>& dx = tape.grad(x);
    for (int r = 0; r < n; r++)
      for (int j = 0; j < m; j++)
        for (int i = 0; i < k; i++) dx[at(r, i, k)] += dout[at(r, j, m)] * wv[at(j, i, k)];
    std::vector<double>& dw = tape.grad(w);
    for (int r = 0; r < n; r++)
      for (int j = 0; j < m; j++)
        for (int i = 0; i < k; i++) dw[at(j, i, k)] += dout[at(r, j, m)] * xv[at(r, i, k)];
  });
}

NodeId matmul(Tape& t, NodeId x, NodeId w) {
  const int n = t.rows(x), k = t.cols(x), m = t.cols(w);
  require(t.rows(w) == k, "matmul",
          "x has " + std::to_string(k) + " columns, w " + std::to_string(t.rows(w)) + " rows");
  std::vector<double> out(static_cast<size_t>(n) * m, 0.0);
  const std::vector<double>&xv = t.value(x), &wv = t.value(w);
  for (int r = 0; r < n; r++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < m; j++) out[at(r, j, m)] += xv[at(r, i, k)] * wv[at(i, j, m)];
  return t.push(std::move(out), n, m, [x, w, n, k, m](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    const std::vector<double>&xv = tape.value(x), &wv = tape.value(w);
    std::vector<double>& dx = tape.grad(x);
    for (int r = 0; r < n; r++)
      for (int i = 0; i < k; i++)
        for (int j = 0; j < m; j++) dx[at(r, i, k)] += dout[at(r, j, m)] * wv[at(i, j, m)];
    std::vector<double>& dw = tape.grad(w);
    for (int r = 0; r < n; r++)
      for (int i = 0; i < k; i++)
        for (int j = 0; j < m; j++) dw[at(i, j, m)] += dout[at(r, j, m)] * xv[at(r, i, k)];
  });
}

NodeId add(Tape& t, NodeId a, NodeId b) {
  require(t.rows(a) == t.rows(b) && t.cols(a) == t.cols(b), "add", "different shapes");
  std::vector<double> out(t.value(a));
  for (size_t i = 0; i < out.size(); i++) out[i] += t.value(b)[i];
  return t.push(std::move(out), t.rows(a), t.cols(a), [a, b](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    for (NodeId input : {a, b}) {
      std::vector<double>& d = tape.grad(input);
      for (size_t i = 0; i < d.size(); i++) d[i] += dout[i];
    }
  });
}

NodeId add_row(Tape& t, NodeId x, NodeId b) {
  const int rows = t.rows(x), cols = t.cols(x);
  require(t.value(b).size() >= static_cast<size_t>(cols), "add_row", "the row vector is shorter than a row");
  std::vector<double> out(t.value(x));
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) out[at(r, c, cols)] += t.value(b)[static_cast<size_t>(c)];
  return t.push(std::move(out), rows, cols, [x, b, rows, cols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dx = tape.grad(x);
    for (size_t i = 0; i < dx.size(); i++) dx[i] += dout[i];
    std::vector<double>& db = tape.grad(b);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) db[static_cast<size_t>(c)] += dout[at(r, c, cols)];
  });
}

NodeId scale(Tape& t, NodeId x, NodeId s, int index) {
  require(index >= 0 && static_cast<size_t>(index) < t.value(s).size(), "scale", "index outside the scalar node");
  const double factor = t.value(s)[static_cast<size_t>(index)];
  std::vector<double> out(t.value(x));
  for (double& v : out) v *= factor;
  return t.push(std::move(out), t.rows(x), t.cols(x), [x, s, index](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    const double factor = tape.value(s)[static_cast<size_t>(index)];
    std::vector<double>& dx = tape.grad(x);
    double ds = 0.0;
    for (size_t i = 0; i < dx.size(); i++) {
      dx[i] += dout[i] * factor;
      ds += dout[i] * tape.value(x)[i];
    }
    tape.grad(s)[static_cast<size_t>(index)] += ds;
  });
}

NodeId bf16_copy(Tape& t, NodeId x) {
  const auto to_bf16 = [](double v) {
    return static_cast<double>(llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(static_cast<float>(v))));
  };
  return elementwise(t, x, to_bf16, [](double) { return 1.0; });
}

NodeId scale_const(Tape& t, NodeId x, double c) {
  return elementwise(
      t, x, [c](double v) { return c * v; }, [c](double) { return c; });
}

NodeId mul_gate(Tape& t, NodeId x, NodeId g, int column, int group) {
  const int rows = t.rows(x), cols = t.cols(x), gcols = t.cols(g);
  require(t.rows(g) == rows && group > 0 && cols % group == 0, "mul_gate", "shapes do not fit");
  require(column >= 0 && column + cols / group <= gcols, "mul_gate", "gate columns outside the gate node");
  std::vector<double> out(t.value(x));
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) out[at(r, c, cols)] *= t.value(g)[at(r, column + c / group, gcols)];
  return t.push(std::move(out), rows, cols, [x, g, column, group, rows, cols, gcols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dx = tape.grad(x);
    std::vector<double>& dg = tape.grad(g);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) {
        const size_t i = at(r, c, cols), j = at(r, column + c / group, gcols);
        dx[i] += dout[i] * tape.value(g)[j];
        dg[j] += dout[i] * tape.value(x)[i];
      }
  });
}

NodeId mul_constant(Tape& t, NodeId x, const std::vector<double>& m) {
  require(m.size() == t.value(x).size(), "mul_constant", "different sizes");
  std::vector<double> out(t.value(x));
  for (size_t i = 0; i < out.size(); i++) out[i] *= m[i];
  return t.push(std::move(out), t.rows(x), t.cols(x), [x, m](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dx = tape.grad(x);
    for (size_t i = 0; i < dx.size(); i++) dx[i] += dout[i] * m[i];
  });
}

NodeId rms_norm(Tape& t, NodeId x, int group, double eps) {
  const size_t n = t.value(x).size(), g = static_cast<size_t>(group);
  require(group > 0 && t.cols(x) % group == 0, "rms_norm", "the group does not divide the columns");
  std::vector<double> out(n), rstd(n / g);
  for (size_t s = 0; s < n / g; s++) {
    double squares = 0.0;
    for (size_t i = 0; i < g; i++) squares += t.value(x)[s * g + i] * t.value(x)[s * g + i];
    rstd[s] = 1.0 / std::sqrt(squares / static_cast<double>(g) + eps);
    for (size_t i = 0; i < g; i++) out[s * g + i] = t.value(x)[s * g + i] * rstd[s];
  }
  return t.push(std::move(out), t.rows(x), t.cols(x), [x, g, rstd](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    const std::vector<double>& y = tape.value(self);
    std::vector<double>& dx = tape.grad(x);
    for (size_t s = 0; s < rstd.size(); s++) {  // dx = rstd (dy - y mean(dy y))
      double dot = 0.0;
      for (size_t i = 0; i < g; i++) dot += dout[s * g + i] * y[s * g + i];
      dot /= static_cast<double>(g);
      for (size_t i = 0; i < g; i++) dx[s * g + i] += rstd[s] * (dout[s * g + i] - y[s * g + i] * dot);
    }
  });
}

NodeId sigmoid(Tape& t, NodeId x) {
  return elementwise(
      t, x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); },
      [](double v) {
        const double s = 1.0 / (1.0 + std::exp(-v));
        return s * (1.0 - s);
      });
}

NodeId gelu(Tape& t, NodeId x) {
  return elementwise(
      t, x, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); },
      [](double v) {
        const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
        return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * pdf;
      });
}

NodeId relu_square(Tape& t, NodeId x) {
  return elementwise(
      t, x, [](double v) { return v > 0.0 ? v * v : 0.0; }, [](double v) { return v > 0.0 ? 2.0 * v : 0.0; });
}

NodeId gather_rows(Tape& t, NodeId table, const std::vector<int>& rows) {
  const int cols = t.cols(table), table_rows = t.rows(table), n = static_cast<int>(rows.size());
  std::vector<double> out(static_cast<size_t>(n) * cols);
  for (int r = 0; r < n; r++) {
    require(rows[static_cast<size_t>(r)] >= 0 && rows[static_cast<size_t>(r)] < table_rows, "gather_rows",
            "row " + std::to_string(rows[static_cast<size_t>(r)]) + " outside the table");
    for (int c = 0; c < cols; c++) out[at(r, c, cols)] = t.value(table)[at(rows[static_cast<size_t>(r)], c, cols)];
  }
  return t.push(std::move(out), n, cols, [table, rows, cols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dtable = tape.grad(table);
    for (size_t r = 0; r < rows.size(); r++)
      for (int c = 0; c < cols; c++) dtable[at(rows[r], c, cols)] += dout[at(static_cast<int>(r), c, cols)];
  });
}

NodeId shift_rows(Tape& t, NodeId x) {
  const int rows = t.rows(x), cols = t.cols(x);
  std::vector<double> out(t.value(x).size(), 0.0);
  for (int r = 1; r < rows; r++)
    for (int c = 0; c < cols; c++) out[at(r, c, cols)] = t.value(x)[at(r - 1, c, cols)];
  return t.push(std::move(out), rows, cols, [x, rows, cols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dx = tape.grad(x);
    for (int r = 1; r < rows; r++)
      for (int c = 0; c < cols; c++) dx[at(r - 1, c, cols)] += dout[at(r, c, cols)];
  });
}

}  // namespace ref
