// Tests of the streaming UTF-8 decoder (llmc/tokenizer/utf8_stream.h): characters split across pushes
// come out whole and only once complete; invalid bytes become U+FFFD per maximal subpart, as Python's
// bytes.decode("utf-8", "replace") gives (the expected strings below were checked against it); and
// any split of a byte string gives the same text as decoding it in one piece.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "llmc/tokenizer/utf8.h"
#include "llmc/tokenizer/utf8_stream.h"

namespace {

using llmc::Utf8Stream;

const std::string kFffd = "\xEF\xBF\xBD";

std::string decode_whole(const std::string& bytes) {
  Utf8Stream stream;
  std::string text = stream.push(bytes);  // (not push() + finish(): their order would be unspecified)
  return text + stream.finish();
}

TEST(Utf8Stream, AsciiPassesStraightThrough) {
  Utf8Stream stream;
  EXPECT_EQ(stream.push("Hello, world\n"), "Hello, world\n");
  EXPECT_EQ(stream.held_back(), 0u);
  EXPECT_EQ(stream.finish(), "");
}

TEST(Utf8Stream, HoldsBackASplitCharacterUntilItIsComplete) {
  Utf8Stream stream;
  EXPECT_EQ(stream.push("caf\xC3"), "caf");
  EXPECT_EQ(stream.held_back(), 1u);
  EXPECT_EQ(stream.push("\xA9!"), "\xC3\xA9!");
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, one byte per push
  for (int i = 0; i < 3; i++) EXPECT_EQ(stream.push(emoji.substr(i, 1)), "") << "byte " << i;
  EXPECT_EQ(stream.push(emoji.substr(3, 1)), emoji);
  EXPECT_EQ(stream.finish(), "");
}

TEST(Utf8Stream, ReplacesEachMaximalInvalidSubpartOnce) {
  EXPECT_EQ(decode_whole("\x80"), kFffd);                            // lone continuation byte
  EXPECT_EQ(decode_whole("\xC0\x80"), kFffd + kFffd);                // overlong lead: nothing starts
  EXPECT_EQ(decode_whole("\xE0\x80"), kFffd + kFffd);                // E0 needs A0..BF next
  EXPECT_EQ(decode_whole("\xED\xA0\x80"), kFffd + kFffd + kFffd);    // a surrogate
  EXPECT_EQ(decode_whole("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(decode_whole("\xF5"), kFffd);
  EXPECT_EQ(decode_whole("\xE2\x82" "A"), kFffd + "A");              // valid prefix cut by a new character
}

TEST(Utf8Stream, AnIncompleteTailBecomesOneReplacementAtTheEnd) {
  Utf8Stream stream;
  EXPECT_EQ(stream.push("ok\xF0\x9F\x98"), "ok");
  EXPECT_EQ(stream.finish(), kFffd);
  EXPECT_EQ(stream.held_back(), 0u);
}

// Random bytes biased towards UTF-8 structure, cut at random points: the streamed pieces always form
// valid UTF-8 and always equal the one-piece decode. (A stream that emitted a prefix too early, or lost
// held-back bytes, would differ.)
TEST(Utf8Stream, AnySplitGivesTheSameValidText) {
  std::mt19937 rng(7);
  const unsigned char alphabet[] = {'a', ' ', 0x80, 0x9F, 0xA0, 0xBF, 0xC2, 0xC3, 0xDF, 0xE0,
                                    0xE2, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xC0, 0xFF};
  std::uniform_int_distribution<int> pick(0, sizeof(alphabet) - 1), length(0, 40), cut(0, 4);
  for (int trial = 0; trial < 2000; trial++) {
    std::string bytes;
    for (int i = length(rng); i > 0; i--) bytes += static_cast<char>(alphabet[pick(rng)]);
    const std::string whole = decode_whole(bytes);
    ASSERT_EQ(llmc::first_invalid_utf8_byte(whole), llmc::kValidUtf8) << "trial " << trial;
    Utf8Stream stream;
    std::string pieces;
    for (size_t at = 0; at < bytes.size();) {
      const size_t take = std::min<size_t>(cut(rng), bytes.size() - at);
      const std::string out = stream.push(bytes.substr(at, take));
      ASSERT_EQ(llmc::first_invalid_utf8_byte(out), llmc::kValidUtf8) << "trial " << trial;
      pieces += out;
      at += take;
    }
    pieces += stream.finish();
    ASSERT_EQ(pieces, whole) << "trial " << trial;
  }
}

}  // namespace
