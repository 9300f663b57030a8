// CommandLine over CLI11 (see command_line.h): the one translation unit of the benchmarks and probes that
// compiles CLI11.
#include "llmc/base/command_line.h"

#include <CLI/CLI.hpp>

namespace llmc {

CommandLine::CommandLine(const std::string& about) : app_(std::make_unique<CLI::App>(about)) {}
CommandLine::~CommandLine() = default;

void CommandLine::option(const std::string& names, int& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str();
}
void CommandLine::option(const std::string& names, uint32_t& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str();
}
void CommandLine::option(const std::string& names, uint64_t& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str();
}
void CommandLine::option(const std::string& names, float& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str();
}
void CommandLine::option(const std::string& names, double& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str();
}
void CommandLine::option(const std::string& names, std::string& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str();
}
void CommandLine::positive(const std::string& names, int& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str()->check(CLI::PositiveNumber);
}
void CommandLine::positive(const std::string& names, long long& value, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str()->check(CLI::PositiveNumber);
}
void CommandLine::in_range(const std::string& names, int& value, int lowest, int highest, const std::string& help) {
  app_->add_option(names, value, help)->capture_default_str()->check(CLI::Range(lowest, highest));
}
void CommandLine::required(const std::string& names, std::string& value, const std::string& help) {
  app_->add_option(names, value, help)->required();
}
void CommandLine::flag(const std::string& names, bool& value, const std::string& help) {
  app_->add_flag(names, value, help);
}

int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  return -1;
}

int CommandLine::parse(int argc, char** argv) { return parse_command_line(*app_, argc, argv); }

}  // namespace llmc
