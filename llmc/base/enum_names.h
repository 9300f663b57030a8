// The names of an enum's values, one table per enum beside the enum, so that the options that parse them
// (llmc/train/options.cpp), the logs that print them and the error messages that list them agree.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace llmc {

template <class Enum>
struct EnumName {
  Enum value;
  const char* name;
};

// The value's name ("?" for a value the table lacks).
template <class Enum, size_t N>
const char* name_of(Enum value, const EnumName<Enum> (&table)[N]) {
  for (const EnumName<Enum>& entry : table)
    if (entry.value == value) return entry.name;
  return "?";
}

// The value named `name`, or nothing.
template <class Enum, size_t N>
std::optional<Enum> value_named(const std::string& name, const EnumName<Enum> (&table)[N]) {
  for (const EnumName<Enum>& entry : table)
    if (name == entry.name) return entry.value;
  return std::nullopt;
}

// "a, b or c": the names, as an error message lists them.
template <class Enum, size_t N>
std::string names_listed(const EnumName<Enum> (&table)[N]) {
  std::string listed;
  for (size_t i = 0; i < N; i++) listed += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(table[i].name);
  return listed;
}

}  // namespace llmc
