// GoogleTest main for the multi-rank communication tests, run as `mpirun -np N binary` (or alone, as
// one rank). Every rank runs every test in the same order, so collectives match across ranks; rank 0
// prints the usual report, other ranks print only their failures, prefixed with their rank. On the
// nvcc target with no usable GPU every test is reported as skipped ("skipped: no GPU"), as in
// test/support/gpu_test.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "llmc/dist/comm.h"
#include "test/dist/comm_test_context.h"
#include "test/support/gpu_test.h"

namespace llmc::test {

namespace {
// Owned by main; the tests reach it through comm_context().
CommContext* the_context = nullptr;

// Reports failed assertions of a non-zero rank (its default printer is removed to keep output readable).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: FAILED at %s:%d\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};
}  // namespace

CommContext& comm_context() { return *the_context; }

}  // namespace llmc::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<llmc::CommContext> context;
  try {
    if (llmc::test::gpu_available()) context = std::make_unique<llmc::CommContext>();
  } catch (const std::exception& error) {
    llmc::abort_all_ranks(std::string("cannot set up communication: ") + error.what());
  }
  llmc::test::the_context = context.get();
  if (context != nullptr && context->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new llmc::test::RankFailurePrinter(context->rank()));
  }
  ::testing::AddGlobalTestEnvironment(new llmc::test::RequireGpuEnvironment());
  int status = 0;
  try {
    status = RUN_ALL_TESTS();
  } catch (const std::exception& error) {
    // A rank that leaves early would leave the others blocked in a collective.
    llmc::abort_all_ranks(std::string("uncaught exception in a test: ") + error.what());
  }
  context.reset();  // finalizes MPI: every rank gets here after the same collectives
  return status;
}
