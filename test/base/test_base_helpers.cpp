// Tests of the helpers at llmc/'s top level that every module shares: the file helpers (errors name the
// file and the problem, errno's text included; directories with their parents) and parallel_for (every
// item exactly once, worker indices in range, the lowest item's error whatever the thread count).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/file_io.h"
#include "llmc/base/parallel_for.h"
#include "test/support/test_helpers.h"

namespace {

class FileHelpers : public llmc::test::TempDirTest {
 protected:
  FileHelpers() : TempDirTest("llmc_test_file_io") {}
};

TEST_F(FileHelpers, OpenFileNamesTheFileAndTheProblem) {
  const std::string missing = path("missing.bin");
  llmc::test::expect_error([&] { llmc::open_file(missing, "rb", "shard"); },
                           {missing + ": cannot open shard: file does not exist"});
  const std::string no_dir = path("no/such/dir/out.bin");
  llmc::test::expect_error([&] { llmc::open_file(no_dir, "wb", "output"); },
                           {no_dir + ": cannot create output: No such file or directory"});
  llmc::test::expect_error([&] { llmc::open_file(no_dir, "a", "log file"); },
                           {no_dir + ": cannot open log file for appending: No such file or directory"});
  { std::ofstream(path("present.txt")) << "x"; }
  const llmc::FileHandle file = llmc::open_file(path("present.txt"), "rb", "text");
  EXPECT_EQ(std::fgetc(file.get()), 'x');
}

TEST_F(FileHelpers, MakeDirectoriesCreatesParentsAndRefusesAFile) {
  llmc::make_directories(path("a/b/c"), "output directory");
  EXPECT_TRUE(std::filesystem::is_directory(path("a/b/c")));
  llmc::make_directories(path("a/b/c"), "output directory");  // existing: fine
  { std::ofstream(path("plain")) << "x"; }
  llmc::test::expect_error([&] { llmc::make_directories(path("plain"), "output directory"); },
                           {path("plain") + ": cannot create output directory"});
  EXPECT_TRUE(llmc::is_regular_file(path("plain")));
  EXPECT_FALSE(llmc::is_regular_file(path("a")));
  EXPECT_FALSE(llmc::is_regular_file(path("missing")));
}

TEST(ParallelFor, RunsEveryItemOnceOnValidWorkers) {
  for (int threads : {1, 3, 8}) {
    std::vector<std::atomic<int>> runs(100);
    std::atomic<bool> bad_worker{false};
    llmc::parallel_for(runs.size(), threads, [&](int worker, size_t item) {
      if (worker < 0 || worker >= threads) bad_worker = true;
      runs[item]++;
    });
    for (size_t i = 0; i < runs.size(); i++) EXPECT_EQ(runs[i], 1) << "item " << i << ", threads " << threads;
    EXPECT_FALSE(bad_worker) << "threads " << threads;
  }
  llmc::parallel_for(0, 4, [](int, size_t) { ADD_FAILURE() << "no items, yet the body ran"; });
}

TEST(ParallelFor, RethrowsTheLowestFailingItemForAnyThreadCount) {
  for (int threads : {1, 2, 8}) {
    try {
      llmc::parallel_for(64, threads, [](int, size_t item) {
        if (item == 17 || item == 40) throw std::runtime_error("item " + std::to_string(item));
      });
      ADD_FAILURE() << "no error, threads " << threads;
    } catch (const std::runtime_error& error) {
      EXPECT_EQ(std::string(error.what()), "item 17") << "threads " << threads;
    }
  }
}

}  // namespace
