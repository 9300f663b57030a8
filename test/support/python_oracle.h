// Runs a Python (numpy) oracle from a C++ test: inputs go to a fresh temporary directory as float64 .npy
// files plus config.json, the script writes its outputs there as .npy files, the test reads them back.
// The interpreter and the source tree come from the build (LLMC_PYTHON_EXECUTABLE, LLMC_SOURCE_DIR).
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

#if !defined(LLMC_PYTHON_EXECUTABLE) || !defined(LLMC_SOURCE_DIR)
#error "python_oracle.h needs LLMC_PYTHON_EXECUTABLE and LLMC_SOURCE_DIR (set by cmake/optim.cmake)"
#endif

namespace llmc_test {

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
  const uint16_t header_length = (uint16_t)header.size();
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&header_length), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), (std::streamsize)(values.size() * sizeof(double)));
  if (!out) throw std::runtime_error("write_npy: cannot write " + path);
}

// Reads what numpy's np.save writes for a float64 C-order array (format 1.0); anything else throws.
inline NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  uint16_t header_length = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY\x01", 7) != 0 ||
      !in.read(reinterpret_cast<char*>(&header_length), 2))
    throw std::runtime_error("read_npy: " + path + " is not a .npy file (format 1.0)");
  std::string header(header_length, '\0');
  in.read(header.data(), header_length);
  if (header.find("'<f8'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error("read_npy: " + path + " is not a C-order float64 array: " + header);
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
  if (!in.read(reinterpret_cast<char*>(array.values.data()), (std::streamsize)(count * sizeof(double))))
    throw std::runtime_error("read_npy: " + path + " is shorter than its shape says");
  return array;
}

// One oracle call: put() the inputs, set the config JSON, run(), then get() the outputs.
class PythonOracle {
 public:
  explicit PythonOracle(std::string script) : script_(std::string(LLMC_SOURCE_DIR) + "/" + std::move(script)) {
    std::string base = (std::filesystem::temp_directory_path() / "llmc_oracle_XXXXXX").string();
    if (::mkdtemp(base.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + base);
    dir_ = base;
  }
  ~PythonOracle() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  PythonOracle(const PythonOracle&) = delete;
  PythonOracle& operator=(const PythonOracle&) = delete;

  void put(const std::string& name, const std::vector<size_t>& shape, const std::vector<double>& values) {
    write_npy(path(name + ".npy"), shape, values);
  }
  void config(const std::string& json) {
    std::ofstream out(path("config.json"));
    out << json;
  }
  // Runs `python script mode dir`; a failure (e.g. numpy missing) fails the test with the exit status.
  void run(const std::string& mode) {
    const std::string command = std::string("\"") + LLMC_PYTHON_EXECUTABLE + "\" \"" + script_ + "\" " + mode +
                                " \"" + dir_.string() + "\"";
    const int status = std::system(command.c_str());
    if (status != 0) throw std::runtime_error("oracle failed (status " + std::to_string(status) + "): " + command);
  }
  std::vector<double> get(const std::string& name) const { return read_npy(path(name + ".npy")).values; }

 private:
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  std::string script_;
  std::filesystem::path dir_;
};

}  // namespace llmc_test
