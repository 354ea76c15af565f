// What the video tests check in a build without FFmpeg (-DDLLM_VIDEO=OFF, the GPU bundle's):
// there every video is refused with one clear error, "<source>: this dllm was built without video
// support (-DDLLM_VIDEO=OFF; ...)" (src/vision/video_decode_unavailable.cpp). Such a build cannot
// compare decoded frames, so each video test checks instead that the path it exercises (the CLI,
// the server, the library) refuses its video with that error: a skip would pass a build that
// crashes on a video, accepts it without its frames, or hides the reason from the user.
//
//   if (!video_decoding_available()) {
//     EXPECT_TRUE(test::refuses_video([&] { read_video_file(path, 4); }, path.string()));
//     return;
//   }
#pragma once

#include <gtest/gtest.h>

#include <concepts>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "support/test_paths.h"
#include "vision/video_decode.h"

namespace dllm::test {

// `message` is that refusal of the video named `source` (its file, or a server's content part).
::testing::AssertionResult is_video_refusal(const std::string& message, const std::string& source);

// The CLI refused it: a failed exit, the refusal in its output.
::testing::AssertionResult refuses_video(const CommandResult& cli, const std::string& source);

// The server refused it: a 400 whose error names the content part `part` and gives the refusal.
::testing::AssertionResult refuses_video(int http_status, const nlohmann::json& body,
                                         const std::string& part);

// The library refused it: `call` throws a dllm::Error that is the refusal.
template <std::invocable Call>
::testing::AssertionResult refuses_video(Call&& call, const std::string& source) {
  try {
    call();
  } catch (const Error& e) {
    return is_video_refusal(e.what(), source);
  }
  return ::testing::AssertionFailure() << source << " was accepted without video support";
}

}  // namespace dllm::test
