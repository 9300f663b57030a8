// Runs a Python (numpy) oracle from a C++ test: inputs go to a fresh directory inside the test's temporary
// directory (OracleTest, a TempDirTest) as float64 .npy files plus config.json, the script writes its
// outputs there as .npy files, the test reads them back. The interpreter and the source tree come from the
// build (LLMC_PYTHON_EXECUTABLE, LLMC_SOURCE_DIR).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/file_io.h"
#include "test/support/test_helpers.h"

#if !defined(LLMC_PYTHON_EXECUTABLE) || !defined(LLMC_SOURCE_DIR)
#error "python_oracle.h needs LLMC_PYTHON_EXECUTABLE and LLMC_SOURCE_DIR (set by cmake/optim.cmake)"
#endif

namespace llmc::test {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<double> values;
};

// A little-endian float64, C-order .npy file (format 1.0).
inline void write_npy(const std::string& path, const std::vector<size_t>& shape, const std::vector<double>& values) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (";
  for (size_t dim : shape) header += std::to_string(dim) + ", ";
  header += "), }";
  const size_t unpadded = 10 + header.size() + 1;  // magic+version+length, header, newline
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  const uint16_t header_length = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&header_length), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(double)));
  if (!out) throw llmc::FileError(path, "cannot write the .npy file");
}

// Reads what numpy's np.save writes for a float64 C-order array (format 1.0); anything else throws.
inline NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  uint16_t header_length = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY\x01", 7) != 0 ||
      !in.read(reinterpret_cast<char*>(&header_length), 2))
    throw llmc::FileError(path, "not a .npy file (format 1.0)");
  std::string header(header_length, '\0');
  in.read(header.data(), header_length);
  if (header.find("'<f8'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    throw llmc::FileError(path, "not a C-order float64 array: " + header);
  NpyArray array;
  const size_t open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  std::stringstream dims(header.substr(open + 1, close - open - 1));
  std::string dim;
  size_t count = 1;
  while (std::getline(dims, dim, ','))
    if (dim.find_first_not_of(' ') != std::string::npos) {
      array.shape.push_back(std::stoul(dim));
      count *= array.shape.back();
    }
  array.values.resize(count);
  if (!in.read(reinterpret_cast<char*>(array.values.data()), static_cast<std::streamsize>(count * sizeof(double))))
    throw llmc::FileError(path, "shorter than its shape says");
  return array;
}

// One oracle call in a fresh sub-directory of `parent`: put() the inputs, set the config JSON, run(),
// then get() the outputs.
class PythonOracle {
 public:
  PythonOracle(const std::string& parent, const std::string& script)
      : script_(std::string(LLMC_SOURCE_DIR) + "/" + script) {
    int index = 0;
    while (std::filesystem::exists(std::filesystem::path(parent) / ("oracle_" + std::to_string(index)))) index++;
    dir_ = std::filesystem::path(parent) / ("oracle_" + std::to_string(index));
    std::filesystem::create_directory(dir_);
  }

  void put(const std::string& name, const std::vector<size_t>& shape, const std::vector<double>& values) const {
    write_npy(path(name + ".npy"), shape, values);
  }
  void config(const std::string& json) const {
    std::ofstream out(path("config.json"));
    out << json;
    if (!out) throw llmc::FileError(path("config.json"), "cannot write the oracle's configuration");
  }
  // Runs `python script mode dir`; a failure (e.g. numpy missing) throws with the exit status.
  void run(const std::string& mode) const {
    const std::string command =
        std::string("\"") + LLMC_PYTHON_EXECUTABLE + "\" \"" + script_ + "\" " + mode + " \"" + dir_.string() + "\"";
    const int status = std::system(command.c_str());
    if (status != 0) throw std::runtime_error("oracle failed (status " + std::to_string(status) + "): " + command);
  }
  std::vector<double> get(const std::string& name) const { return read_npy(path(name + ".npy")).values; }

 private:
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  std::string script_;
  std::filesystem::path dir_;
};

// Tests that call test/optim/optim_reference.py: oracle() gives a fresh call's directory in the test's own
// temporary directory (removed after the test).
class OracleTest : public TempDirTest {
 public:
  PythonOracle oracle() const { return PythonOracle(dir(), "test/optim/optim_reference.py"); }

 protected:
  OracleTest() : TempDirTest("llmc_oracle") {}
};

}  // namespace llmc::test
