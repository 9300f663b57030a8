// Access to the rank's CommContext for the multi-rank tests (created by comm_test_main.cpp).
#pragma once

#include "llmc/dist/comm.h"

namespace llmc::test {

CommContext& comm_context();

}  // namespace llmc::test
