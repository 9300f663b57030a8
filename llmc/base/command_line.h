// A program's command line over CLI11 without its header: CLI11 2.1 is header-only and costs 8-17 s of compile
// time in every translation unit that includes it (nvcc parses it too), so the benchmarks and probes, built for
// the emulation and for the GPU alike, declare their options here and CLI11 is compiled once (command_line.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace llmc {

// Parses argv with `app`: -1 to go on; else the exit status after --help (0) or the error was printed. For
// programs whose options are defined on a CLI::App elsewhere (train_gpt2, generate_gpt2).
int parse_command_line(CLI::App& app, int argc, char** argv);

class CommandLine {
 public:
  explicit CommandLine(const std::string& about);  // --help's first line
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // `names` as CLI11 takes them ("-b,--batch"); --help shows each option's default.
  void option(const std::string& names, int& value, const std::string& help);
  void option(const std::string& names, uint32_t& value, const std::string& help);
  void option(const std::string& names, uint64_t& value, const std::string& help);
  void option(const std::string& names, float& value, const std::string& help);
  void option(const std::string& names, double& value, const std::string& help);
  void option(const std::string& names, std::string& value, const std::string& help);
  void positive(const std::string& names, int& value, const std::string& help);  // refuses values below 1
  void positive(const std::string& names, long long& value, const std::string& help);
  void in_range(const std::string& names, int& value, int lowest, int highest, const std::string& help);
  void required(const std::string& names, std::string& value, const std::string& help);  // no default
  void flag(const std::string& names, bool& value, const std::string& help);  // "--run,!--no-run" negates too

  // -1 to go on; else the exit status after --help (0) or the error (CLI11's message) was printed.
  int parse(int argc, char** argv);

 private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace llmc
