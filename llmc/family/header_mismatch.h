// The text of a model file's shape error: which header fields differ from the ones the model was built with.
// Shared by the families' model-file readers (llmc/model/*/*_model_file.cpp).
#pragma once

#include <string>

namespace llmc {

// Collects "name is 12 (expected 8)" for each checked field whose value in the file is not the wanted one; text()
// is "" when every field agrees, else the fields in the order checked, joined by ", ".
class HeaderMismatch {
 public:
  void check(const char* name, long long in_file, long long wanted) {
    if (in_file == wanted) return;
    if (!text_.empty()) text_ += ", ";
    text_ += std::string(name) + " is " + std::to_string(in_file) + " (expected " + std::to_string(wanted) + ")";
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace llmc
