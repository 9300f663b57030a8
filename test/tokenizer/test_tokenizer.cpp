// Unit tests of the GPT-2 tokenizer against independent figures: ids and token counts published in
// ../shared/data/README.md (tiktoken's and nanoGPT's), the two vocabulary formats against each
// other, decode(encode(x)) == x, multi-threaded == single-threaded, and the invalid-input errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "llmc/tokenizer/parallel_encode.h"
#include "llmc/tokenizer/tokenizer.h"
#include "test/support/test_helpers.h"

namespace {

const std::string kSharedDir = LLMC_SHARED_DIR;
const std::string kVocabDir = kSharedDir + "/data/gpt2";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Loaded once per test binary: both formats (loading takes a fraction of a second).
const llmc::Gpt2Tokenizer& tiktoken_format() {
  static const llmc::Gpt2Tokenizer tokenizer(llmc::load_bpe_vocab_tiktoken(kVocabDir + "/r50k_base.tiktoken"));
  return tokenizer;
}
const llmc::Gpt2Tokenizer& encoder_json_format() {
  static const llmc::Gpt2Tokenizer tokenizer(
      llmc::load_bpe_vocab_encoder_json(kVocabDir + "/encoder.json", kVocabDir + "/vocab.bpe"));
  return tokenizer;
}

std::vector<int32_t> encode(const llmc::Gpt2Tokenizer& tokenizer, const std::string& text) {
  llmc::EncodeContext context(tokenizer);
  return tokenizer.encode(context, text);
}

const std::vector<std::string>& unicode_samples() {
  static const std::vector<std::string> samples = {
      "naïve café, Straße; Ελληνικά Кириллица العربية हिन्दी",
      "日本語のテキスト、中文文本。한국어 텍스트",
      "emoji 😀 👍🏽 👨‍👩‍👧‍👦 and digits ٣٤٥ १२३ ½",
      "spaces   \t\t\n\n  \u00a0\u2009\u3000 end   ",
      "it's IT'S they're 'll 'd",
      std::string(5000, '!') + std::string(3000, ' ') + "x",
  };
  return samples;
}

TEST(Tokenizer, KnownIdsFromSharedReadme) {
  for (const llmc::Gpt2Tokenizer* tokenizer : {&tiktoken_format(), &encoder_json_format()}) {
    EXPECT_EQ(encode(*tokenizer, "Hello, the world!"), (std::vector<int32_t>{15496, 11, 262, 995, 0}));
    EXPECT_EQ(encode(*tokenizer, "hello world"), (std::vector<int32_t>{31373, 995}));
    EXPECT_EQ(encode(*tokenizer, " the"), (std::vector<int32_t>{262}));
    EXPECT_TRUE(encode(*tokenizer, "").empty());
  }
}

TEST(Tokenizer, TinyShakespearePublishedCounts) {
  const std::string text = read_file(kSharedDir + "/data/text/tinyshakespeare.txt");
  const std::vector<int32_t> ids = encode(tiktoken_format(), text);
  EXPECT_EQ(ids.size(), 338025u);
  const std::vector<int32_t> first(ids.begin(), ids.begin() + 10);
  EXPECT_EQ(first, (std::vector<int32_t>{5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11}));
  // nanoGPT's 90/10 split is by characters; the file is ASCII, so characters are bytes.
  for (char c : text) ASSERT_EQ(static_cast<unsigned char>(c) & 0x80, 0) << "expected ASCII text";
  const size_t split = static_cast<size_t>(static_cast<double>(text.size()) * 0.9);
  EXPECT_EQ(encode(tiktoken_format(), text.substr(0, split)).size(), 301966u);
  EXPECT_EQ(encode(tiktoken_format(), text.substr(split)).size(), 36059u);
}

TEST(Tokenizer, KjvPublishedCount) {
  const std::string text = read_file(kSharedDir + "/data/text/kjv.txt");
  EXPECT_EQ(encode(tiktoken_format(), text).size(), 1141844u);
}

TEST(Tokenizer, BothVocabularyFormatsAgree) {
  std::vector<std::string> texts = unicode_samples();
  texts.push_back(read_file(kSharedDir + "/data/text/tinyshakespeare.txt"));
  texts.push_back(read_file(kSharedDir + "/data/text/kjv.txt"));
  for (const std::string& text : texts) {
    EXPECT_EQ(encode(tiktoken_format(), text), encode(encoder_json_format(), text)) << text.substr(0, 60);
  }
}

TEST(Tokenizer, DecodeInvertsEncode) {
  std::vector<std::string> texts = unicode_samples();
  texts.push_back(read_file(kSharedDir + "/data/text/tinyshakespeare.txt"));
  for (const std::string& text : texts) {
    EXPECT_EQ(tiktoken_format().decode(encode(tiktoken_format(), text)), text) << text.substr(0, 60);
  }
  EXPECT_EQ(tiktoken_format().decode(std::vector<int32_t>{50256}), "<|endoftext|>");
  // Special-token text is ordinary text when encoding: it never becomes 50256.
  const std::vector<int32_t> ids = encode(tiktoken_format(), "<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 50256), 0);
  EXPECT_THROW(tiktoken_format().decode(std::vector<int32_t>{50257}), std::out_of_range);
  EXPECT_THROW(tiktoken_format().decode(std::vector<int32_t>{-1}), std::out_of_range);
}

TEST(Tokenizer, LongPiecesAreExactAndNotQuadratic) {
  // A 1 MB run of '!' is one regex piece (heap merge path). tiktoken encodes runs of '!' as
  // 8-byte tokens (checked at 70,000 bytes in test_tokenizer_tiktoken.py), so 2^20 bytes must be
  // 2^17 copies of the token for "!!!!!!!!". (A quadratic merge would not finish in the test's time.)
  const std::string punctuation(1 << 20, '!');
  const std::vector<int32_t> eight = encode(tiktoken_format(), "!!!!!!!!");
  ASSERT_EQ(eight.size(), 1u);
  EXPECT_EQ(encode(tiktoken_format(), punctuation), std::vector<int32_t>(1 << 17, eight[0]));
  // A 1 MB run of spaces before a word needs the lookahead to backtrack (the grown JIT stack).
  // GPT-2 has no multi-space token, so it is one 220 per space and then " x".
  const std::string spaces = std::string(1 << 20, ' ') + "x";
  std::vector<int32_t> expected((1 << 20) - 1, 220);
  const std::vector<int32_t> space_x = encode(tiktoken_format(), " x");
  expected.insert(expected.end(), space_x.begin(), space_x.end());
  EXPECT_EQ(encode(tiktoken_format(), spaces), expected);
}

TEST(Tokenizer, ParallelEncodeEqualsSerial) {
  const std::string text = read_file(kSharedDir + "/data/text/kjv.txt");
  const std::vector<int32_t> serial = encode(tiktoken_format(), text);
  const std::vector<size_t> bounds = llmc::safe_chunk_boundaries(text, 4096);
  ASSERT_GT(bounds.size(), 100u) << "kjv.txt should offer many safe cuts";
  for (size_t target : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    EXPECT_EQ(llmc::encode_parallel(tiktoken_format(), text, 4, target), serial) << "chunk target " << target;
  }
  // Several threads sharing one tokenizer, each with its own context, on the same text.
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] { results[t] = encode(tiktoken_format(), text); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result, serial);
}

TEST(Tokenizer, SafeCutRule) {
  const std::string text = "ab\ncd  \nef\n\ngh.\nij";
  EXPECT_TRUE(llmc::is_safe_cut(text, 3));    // "b\n|c"
  EXPECT_FALSE(llmc::is_safe_cut(text, 8));   // " \n|e": the '\n' could join the spaces before it
  EXPECT_FALSE(llmc::is_safe_cut(text, 12));  // "\n\n|g"
  EXPECT_TRUE(llmc::is_safe_cut(text, 16));   // ".\n|i"
  EXPECT_FALSE(llmc::is_safe_cut(text, 2));   // not after a newline
}

struct InvalidCase {
  std::string text;
  size_t offset;  // by construction: the position of the bad sequence in `text`
};

TEST(Tokenizer, InvalidUtf8ReportsFirstBadByte) {
  const std::vector<InvalidCase> cases = {
      {"abc\xff", 3},                   // never-valid byte
      {"ok \x80 then", 3},              // continuation without a lead
      {"x\xC0\x80", 1},                 // overlong NUL
      {"xy\xE0\x80\x80", 2},            // overlong 3-byte
      {"\xED\xA0\x80", 0},              // UTF-16 surrogate U+D800
      {"ab\xF4\x90\x80\x80", 2},        // above U+10FFFF
      {"cut \xE2\x82", 4},              // truncated at end of text
      {"\xC3\xA9\xF0\x9F\x98\x80z\xC3", 7},  // valid é and 😀, then a truncated sequence
  };
  for (const InvalidCase& c : cases) {
    EXPECT_EQ(llmc::first_invalid_utf8_byte(c.text), c.offset);
    llmc::EncodeContext context(tiktoken_format());
    std::vector<int32_t> out;
    try {
      tiktoken_format().encode(context, c.text, out);
      ADD_FAILURE() << "no error for invalid UTF-8";
    } catch (const llmc::InvalidUtf8Error& e) {
      EXPECT_EQ(e.byte_offset(), c.offset);
      EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(c.offset)), std::string::npos);
    }
    EXPECT_TRUE(out.empty());
  }
  // Valid edge cases: U+10FFFF, U+E000 (after the surrogates), U+FFFF.
  EXPECT_EQ(llmc::first_invalid_utf8_byte("\xF4\x8F\xBF\xBF \xEE\x80\x80 \xEF\xBF\xBF"), llmc::kValidUtf8);
}

class VocabularyFiles : public llmc::test::TempDirTest {
 protected:
  VocabularyFiles() : TempDirTest("llmc_test_vocabulary") {}
};

TEST_F(VocabularyFiles, ErrorsNameTheFile) {
  const std::filesystem::path dir = this->dir();
  const std::string bad = (dir / "r50k_base.tiktoken").string();
  {
    std::ofstream out(bad);
    out << "IQ== 0\nnot-base64! 1\n";
  }
  try {
    llmc::load_bpe_vocab_dir(dir.string());
    ADD_FAILURE() << "malformed vocabulary accepted";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(bad), std::string::npos) << message;
    EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  }
  std::filesystem::remove_all(dir);
  try {
    llmc::load_bpe_vocab_dir(dir.string());
    ADD_FAILURE() << "missing directory accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
}

}  // namespace
