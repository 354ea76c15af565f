// Lossy UTF-8 decoding must replace ill-formed bytes exactly like Rust's from_utf8_lossy (the
// Unicode "maximal subpart" practice) so our decode equals Hugging Face's; the expectations are
// the examples of the Unicode Standard, ch. 3.9 (table 3-8 and neighbours).
#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace dllm {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

std::string lossy(std::string_view bytes) {
  std::string out;
  utf8::append_lossy(bytes, out);
  return out;
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(lossy("plain ascii"), "plain ascii");
  EXPECT_EQ(lossy("\xE4\xBD\xA0\xE5\xA5\xBD"), "\xE4\xBD\xA0\xE5\xA5\xBD");
  // Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a, FFFD, FFFD, FFFD, b, FFFD, c, FFFD x2,
  // d
  EXPECT_EQ(lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(lossy("\xF0\x9F\x98"), R);                  // truncated 4-byte sequence: one
  EXPECT_EQ(lossy("\xE0\x80\x80"), R + R + R);          // overlong: every byte
  EXPECT_EQ(lossy("\xED\xA0\x80"), R + R + R);          // surrogate: every byte
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(lossy("\xC0\xAF"), R + R);
  EXPECT_EQ(lossy("x\xF0\x9F\x98\x80y\xFF"), "x\xF0\x9F\x98\x80y" + R);
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail_length(""), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length("a\xF0"), 1u);
  EXPECT_EQ(utf8::incomplete_tail_length("a\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::incomplete_tail_length("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail_length("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length("a\xE0\x80"), 0u);  // can never complete
  EXPECT_EQ(utf8::incomplete_tail_length("a\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length("\xE4\xBD\xA0\xE5"), 1u);
}

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(utf8::find_invalid("ok \xE4\xBD\xA0"), std::string::npos);
  EXPECT_EQ(utf8::find_invalid("ok \xE4\xBD"), 3u);
  EXPECT_EQ(utf8::find_invalid(std::string_view("a\0b", 3)), std::string::npos);
  EXPECT_EQ(utf8::find_invalid("\xED\xB0\x80"), 0u);
}

}  // namespace
}  // namespace dllm
