// The data: URL base64 decoder against RFC 4648 §10's test vectors, every byte value, and the
// malformed inputs it must refuse.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/base64.h"

namespace dllm::server {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""},         {"Zg==", "f"},     {"Zm8=", "fo"},       {"Zm9v", "foo"},
      {"Zm9vYg==", "foob"}, {"Zm9vYmE=", "fooba"}, {"Zm9vYmFy", "foobar"}};
  for (const auto& [text, bytes] : vectors) {
    EXPECT_EQ(base64_decode(text), bytes) << text;
    EXPECT_EQ(base64_decoded_size(text), std::string(bytes).size()) << text;
  }
  EXPECT_EQ(base64_decode("Zg"), "f");  // padding left out
  EXPECT_EQ(base64_decode("Zm8"), "fo");
}

TEST(Base64, EveryByteValue) {
  // 0x00..0xFF encoded by Python's base64.b64encode(bytes(range(256))).
  const std::string text =
      "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNE"
      "RUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJ"
      "iouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3O"
      "z9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w==";
  const std::string bytes = base64_decode(text);
  ASSERT_EQ(bytes.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(static_cast<uint8_t>(bytes[i]), i);
}

TEST(Base64, MalformedInputIsRefused) {
  for (const char* bad : {"Z", "Zm9vY", "Zg=", "Zg===", "=Zg=", "Zm=v", "Zm9v\n", "Zm 9v", "Zh==",
                          "Zm9=", "Zm9v-_", "\xff\xfe"})
    EXPECT_THROW(base64_decode(bad), Error) << bad;
}

}  // namespace
}  // namespace dllm::server
