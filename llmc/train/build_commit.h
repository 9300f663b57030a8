// The git commit the binaries were built from ("-dirty" with uncommitted changes, "unknown" outside a
// git checkout), for the log header. Defined in a file CMake generates at configure time
// (cmake/build_commit.cpp.in), rewritten only when the commit changes, so that a new commit recompiles
// that one file and not every source that reports it.
#pragma once

namespace llmc {

const char* build_commit();

}  // namespace llmc
