// Tests of the token shard format (llmc/data/shards.h): round trip, the on-disk layout that llm.c and
// modded-nanogpt write (built here byte by byte, independently of write_shard), every rejected-file
// case with the file named in the message, globbing, and 64-bit offset arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/data/shards.h"
#include "test/support/test_helpers.h"

namespace fs = std::filesystem;

namespace {

using llmc::test::expect_error;

class ShardTest : public llmc::test::TempDirTest {
 protected:
  ShardTest() : TempDirTest("llmc_test_shards") {}

  // A shard written the way llm.c's Python writer does: int32[256] header, then raw uint16 tokens.
  void write_raw(const std::string& file, int32_t magic, int32_t version, int32_t declared_count,
                 const std::vector<uint16_t>& tokens) const {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = declared_count;
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    ASSERT_TRUE(out.good()) << "could not write " << file;
  }
};

std::vector<uint16_t> random_tokens(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> tokens(count);
  for (auto& t : tokens) t = static_cast<uint16_t>(rng() & 0xFFFF);
  return tokens;
}

TEST_F(ShardTest, RoundTripKeepsEveryToken) {
  const auto tokens = random_tokens(12345, 1);
  const std::string file = path("round_trip.bin");
  llmc::write_shard(file, tokens);
  EXPECT_FALSE(fs::exists(file + ".tmp")) << "temp file left behind";
  const llmc::ShardInfo info = llmc::read_shard_header(file);
  EXPECT_EQ(info.path, file);
  EXPECT_EQ(info.num_tokens, 12345);
  EXPECT_EQ(llmc::read_shard_tokens(file), tokens);
  const auto middle = llmc::read_shard_token_range(file, 1000, 77);
  EXPECT_EQ(middle, std::vector<uint16_t>(tokens.begin() + 1000, tokens.begin() + 1077));
}

TEST_F(ShardTest, EmptyShardRoundTrips) {
  const std::string file = path("empty.bin");
  llmc::write_shard(file, nullptr, 0);
  EXPECT_EQ(llmc::read_shard_header(file).num_tokens, 0);
  EXPECT_TRUE(llmc::read_shard_tokens(file).empty());
}

TEST_F(ShardTest, WrittenBytesMatchTheLlmcLayout) {
  const std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 65535};
  const std::string ours = path("ours.bin");
  const std::string theirs = path("theirs.bin");
  llmc::write_shard(ours, tokens);
  write_raw(theirs, 20240520, 1, static_cast<int32_t>(tokens.size()), tokens);
  std::ifstream a(ours, std::ios::binary), b(theirs, std::ios::binary);
  const std::string bytes_ours((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string bytes_theirs((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes_ours.size(), 1024u + 2 * tokens.size());
  EXPECT_EQ(bytes_ours, bytes_theirs);
  EXPECT_EQ(llmc::read_shard_tokens(theirs), tokens);  // an externally written shard loads unchanged
}

TEST_F(ShardTest, MissingFileIsNamed) {
  const std::string file = path("nope.bin");
  expect_error([&] { llmc::read_shard_header(file); }, {file, "does not exist"});
  expect_error([&] { llmc::read_shard_tokens(file); }, {file, "does not exist"});
}

TEST_F(ShardTest, FileShorterThanHeaderIsRejected) {
  const std::string file = path("short.bin");
  std::ofstream(file, std::ios::binary) << "tiny";
  expect_error([&] { llmc::read_shard_header(file); }, {file, "shorter than the 1024-byte shard header", "4 bytes"});
}

TEST_F(ShardTest, WrongMagicIsRejected) {
  const std::string file = path("magic.bin");
  write_raw(file, 20240326, 1, 3, {1, 2, 3});  // a model checkpoint's magic
  expect_error([&] { llmc::read_shard_header(file); }, {file, "wrong magic", "20240326"});
}

TEST_F(ShardTest, WrongVersionIsRejected) {
  const std::string file = path("version.bin");
  write_raw(file, 20240520, 2, 3, {1, 2, 3});
  expect_error([&] { llmc::read_shard_header(file); }, {file, "unsupported shard version 2"});
}

TEST_F(ShardTest, HeaderClaimingMoreTokensThanTheFileHoldsIsTruncated) {
  const std::string file = path("truncated.bin");
  write_raw(file, 20240520, 1, 100, random_tokens(60, 2));
  expect_error([&] { llmc::read_shard_header(file); }, {file, "truncated", "100 tokens", "1144 bytes"});
  expect_error([&] { llmc::read_shard_tokens(file); }, {file, "truncated"});
}

TEST_F(ShardTest, TrailingBytesBeyondTheCountAreRejected) {
  const std::string file = path("long.bin");
  write_raw(file, 20240520, 1, 10, random_tokens(11, 3));
  expect_error([&] { llmc::read_shard_header(file); }, {file, "mismatch", "10 tokens"});
}

TEST_F(ShardTest, NegativeCountIsRejected) {
  const std::string file = path("negative.bin");
  write_raw(file, 20240520, 1, -5, {});
  expect_error([&] { llmc::read_shard_header(file); }, {file, "negative token count"});
}

TEST_F(ShardTest, RangeOutsideTheShardIsRejected) {
  const std::string file = path("range.bin");
  llmc::write_shard(file, random_tokens(50, 4));
  expect_error([&] { llmc::read_shard_token_range(file, 40, 11); }, {file, "outside"});
  expect_error([&] { llmc::read_shard_token_range(file, INT64_MAX, 1); }, {file, "outside"});
  expect_error([&] { llmc::read_shard_token_range(file, -1, 2); }, {file, "outside"});
}

TEST_F(ShardTest, FailedWriteNamesTheFileAndLeavesNothing) {
  const std::string file = path("no_such_dir/shard.bin");
  const auto tokens = random_tokens(10, 5);
  expect_error([&] { llmc::write_shard(file, tokens); }, {"no_such_dir/shard.bin.tmp", "cannot create"});
  EXPECT_FALSE(fs::exists(file));
  const std::string big = path("too_many.bin");
  expect_error([&] { llmc::write_shard(big, tokens.data(), llmc::kShardMaxTokens + 1); }, {big, "int32"});
  EXPECT_FALSE(fs::exists(big));
  EXPECT_FALSE(fs::exists(big + ".tmp"));
}

TEST_F(ShardTest, RenameFailureRemovesTheTempFile) {
  const std::string target = path("a_directory");
  fs::create_directory(target);
  fs::create_directory(target + "/occupied");  // rename() onto a non-empty directory fails
  expect_error([&] { llmc::write_shard(target, random_tokens(4, 6)); }, {target, "rename"});
  EXPECT_FALSE(fs::exists(target + ".tmp"));
}

TEST_F(ShardTest, GlobIsSortedAndEmptyMatchIsAnError) {
  for (const char* name : {"fineweb_train_000002.bin", "fineweb_train_000000.bin", "fineweb_train_000001.bin",
                           "fineweb_val_000000.bin"}) {
    llmc::write_shard(path(name), random_tokens(3, 7));
  }
  const auto paths = llmc::glob_shards(path("fineweb_train_*.bin"));
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0], path("fineweb_train_000000.bin"));
  EXPECT_EQ(paths[1], path("fineweb_train_000001.bin"));
  EXPECT_EQ(paths[2], path("fineweb_train_000002.bin"));
  const std::string none = path("fineweb_test_*.bin");
  expect_error([&] { llmc::glob_shards(none); }, {none, "no files match"});
  const std::string missing_dir = path("missing/*.bin");
  expect_error([&] { llmc::glob_shards(missing_dir); }, {missing_dir, "no files match"});
}

TEST(ShardOffsets, ArithmeticIsSixtyFourBit) {
  // 1.5e9 tokens sit 3e9 bytes into the data, past what an int (or a 32-bit off_t) can address.
  EXPECT_EQ(llmc::shard_token_byte_offset(1'500'000'000), int64_t{1024} + int64_t{3'000'000'000});
  EXPECT_GT(llmc::shard_token_byte_offset(llmc::kShardMaxTokens), int64_t{INT32_MAX});
  EXPECT_EQ(llmc::shard_token_byte_offset(llmc::kShardMaxTokens), int64_t{1024} + 2 * int64_t{2147483647});
  static_assert(std::is_same<decltype(llmc::shard_token_byte_offset(0)), int64_t>::value, "offsets are int64");
}

}  // namespace
