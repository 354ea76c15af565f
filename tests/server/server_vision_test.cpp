// `dllm serve` with a vision-language model: OpenAI image_url content parts and vLLM's video_url
// parts (base64 data: URLs, file:// under --allowed-local-media-path) give the same tokens as
// `dllm generate --image / --video` on the same file, and every refused image or video is a 400
// naming the content part. The model is the
// SDAR-VL test fixture's weights with the byte-level chat tokenizer of
// tests/fixtures/tokenizers/byte-vl (tools/make_byte_vl_tokenizer.py).
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "server/server_process.h"
#include "support/test_paths.h"
#include "support/video_refusal.h"

namespace dllm {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::ServerProcess;

// The fixture's checkpoint with a tokenizer and chat template, assembled in a temp directory.
fs::path chat_vision_model() {
  static const fs::path dir = [] {
    const fs::path d = test::temp_dir("vision-chat-model");
    for (const auto& e : fs::directory_iterator(test::model_fixture("sdar-vl-tiny")))
      if (e.is_regular_file()) fs::create_symlink(e.path(), d / e.path().filename());
    const fs::path tok = test::fixtures_dir() / "tokenizers/byte-vl";
    fs::copy_file(tok / "tokenizer.json", d / "tokenizer.json");
    fs::copy_file(tok / "tokenizer_config.json", d / "tokenizer_config.json");
    return d;
  }();
  return dir;
}

fs::path image(const std::string& name) {
  return test::model_fixture("sdar-vl-tiny") / "images" / name;
}

// The file as a data: URL, base64 by coreutils (an encoder independent of the server's decoder).
std::string data_url(const fs::path& file, const std::string& media_type) {
  const auto r = test::run_command("base64 -w0 '" + file.string() + "'");
  EXPECT_EQ(r.status, 0) << r.output;
  return "data:" + media_type + ";base64," + r.output;
}

struct Reply {
  int status = 0;
  Json body;
};

Reply post_chat(int port, const Json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response";
    return {};
  }
  return {r->status, Json::parse(r->body, nullptr, false)};
}

constexpr int kMaxTokens = 8;

Json image_chat(const std::vector<std::string>& urls, const std::string& text) {
  Json parts = Json::array();
  for (const std::string& u : urls)
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", u}}}});
  parts.push_back({{"type", "text"}, {"text", text}});
  return {{"messages", {{{"role", "user"}, {"content", parts}}}},
          {"max_tokens", kMaxTokens},
          {"remasking", "low_confidence_static"},
          {"return_token_ids", true}};
}

// `dllm generate --chat --image` on the same model and files: {"ids", "stats"}.
Json generate_with_images(const std::vector<fs::path>& images, const std::string& text,
                          std::string args = {}) {
  for (const fs::path& f : images) args += " --image '" + f.string() + "'";
  const auto r = test::run_command(
      test::dllm_binary() + " generate -m " + chat_vision_model().string() +
      " --device cpu --chat -p '" + text + "'" + args + " --max-tokens " +
      std::to_string(kMaxTokens) + " --remasking low_confidence_static --format json 2>/dev/null");
  EXPECT_EQ(r.status, 0) << r.output;
  return Json::parse(r.output.substr(std::min(r.output.find('{'), r.output.size())), nullptr,
                     false);
}

// `media_tokens`: what the media expand to at least (729 per image crop, 196 per video frame).
void expect_same_as_cli(const Reply& served, const Json& cli, int media_tokens = 729) {
  ASSERT_EQ(served.status, 200) << served.body;
  ASSERT_TRUE(cli.is_object());
  EXPECT_EQ(served.body["choices"][0]["token_ids"], cli["ids"]) << served.body;
  EXPECT_FALSE(cli["ids"].empty());
  // Usage counts the prompt with its placeholders expanded to the items' features.
  EXPECT_EQ(served.body["usage"]["prompt_tokens"], cli["stats"]["prompt_tokens"]);
  EXPECT_GT(cli["stats"]["prompt_tokens"].get<int>(), media_tokens);
}

TEST(ServeVision, Base64PngAndJpegGiveTheIdsOfGenerate) {
  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu"});
  ASSERT_TRUE(server.started());
  expect_same_as_cli(post_chat(server.port(), image_chat({data_url(image("wide.png"), "image/png")},
                                                         "What is this?")),
                     generate_with_images({image("wide.png")}, "What is this?"));
  expect_same_as_cli(
      post_chat(server.port(), image_chat({data_url(image("tall.jpg"), "image/jpeg")}, "Hi")),
      generate_with_images({image("tall.jpg")}, "Hi"));
  // Two images in one message, in order.
  expect_same_as_cli(
      post_chat(server.port(), image_chat({data_url(image("square.png"), "image/png"),
                                           data_url(image("gray.png"), "image/png")},
                                          "Compare")),
      generate_with_images({image("square.png"), image("gray.png")}, "Compare"));
}

TEST(ServeVision, StreamedChoicesCarryTheImage) {
  // n = 2 greedy choices, streamed: each gets the image (the same ids as generate), and usage
  // counts the expanded prompt once.
  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu"});
  ASSERT_TRUE(server.started());
  Json body = image_chat({data_url(image("square.png"), "image/png")}, "Describe");
  body["n"] = 2;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(120);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::vector<int32_t>> ids(2);
  Json usage;
  for (size_t at = 0, end; (end = r->body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string event = r->body.substr(at + 6, end - at - 6);  // after "data: "
    if (event == "[DONE]") break;
    const Json e = Json::parse(event);
    if (e.contains("usage") && !e["usage"].is_null()) usage = e["usage"];
    for (const Json& ch : e["choices"])
      if (ch.contains("token_ids"))
        for (int32_t id : ch["token_ids"]) ids[ch["index"].get<size_t>()].push_back(id);
  }
  const Json cli = generate_with_images({image("square.png")}, "Describe");
  EXPECT_EQ(Json(ids[0]), cli["ids"]);
  EXPECT_EQ(Json(ids[1]), cli["ids"]);
  EXPECT_EQ(usage["prompt_tokens"], cli["stats"]["prompt_tokens"]) << usage;
}

TEST(ServeVision, FileUrlsOnlyUnderTheAllowedDirectory) {
  const fs::path dir = image("wide.png").parent_path();
  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu",
                        "--allowed-local-media-path", dir.string()});
  ASSERT_TRUE(server.started());
  expect_same_as_cli(post_chat(server.port(), image_chat({"file://" + image("wide.png").string()},
                                                         "What is this?")),
                     generate_with_images({image("wide.png")}, "What is this?"));
  const fs::path outside = test::model_fixture("sdar-vl-tiny") / "gray.base.png";
  const Reply r = post_chat(server.port(), image_chat({"file://" + outside.string()}, "x"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "messages[0].content[0]") << r.body;
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("outside the allowed directory"),
            std::string::npos)
      << r.body;
  const Reply dots =
      post_chat(server.port(), image_chat({"file://" + dir.string() + "/../gray.base.png"}, "x"));
  EXPECT_EQ(dots.status, 400) << dots.body;
}

TEST(ServeVision, RefusedImagesNameTheContentPart) {
  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu",
                        "--max-images-per-request", "2", "--max-image-mib", "0.01"});
  ASSERT_TRUE(server.started());
  const int port = server.port();
  auto expect_400 = [&](const Json& body, const std::string& param, const std::string& words) {
    const Reply r = post_chat(port, body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.body["error"]["param"], param) << r.body;
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(words), std::string::npos)
        << r.body;
  };
  const std::string png = data_url(image("square.png"), "image/png");  // 8 KB: under the limit
  expect_400(image_chat({png, png, png}, "x"), "messages[0].content[2]",
             "accepted are 1 to 2 images per request (--max-images-per-request)");
  expect_400(image_chat({data_url(image("tall.jpg"), "image/jpeg")}, "x"), "messages[0].content[0]",
             "bytes; accepted are 1 to 10485 bytes (--max-image-mib");
  expect_400(image_chat({"https://example.com/cat.png"}, "x"), "messages[0].content[0]",
             "fetches nothing from the network");
  expect_400(image_chat({"file:///etc/passwd"}, "x"), "messages[0].content[0]",
             "--allowed-local-media-path");
  expect_400(image_chat({"data:image/png;base64,iVBOR*w0KGgo="}, "x"), "messages[0].content[0]",
             "invalid base64 data");
  expect_400(image_chat({"data:text/plain;base64,aGk="}, "x"), "messages[0].content[0]",
             "an image/... type");
  // Decoded by the engine: truncated, or not an image at all, at content index 1.
  const size_t data_at = png.find(',') + 1;  // half the image's bytes, whole base64 quanta
  const std::string truncated = png.substr(0, data_at + (png.size() - data_at) / 2 / 4 * 4);
  expect_400(image_chat({png, truncated}, "x"), "messages[0].content[1]", "cannot decode PNG");
  expect_400(image_chat({png, "data:image/png;base64,aGVsbG8gd29ybGQ="}, "x"),
             "messages[0].content[1]", "not a JPEG, PNG or WebP image");
  // The server is unharmed.
  EXPECT_EQ(post_chat(port, image_chat({png}, "x")).status, 200);
}

fs::path video() {
  return test::model_fixture("sdar-vl-tiny") / "video.mkv";
}

// A chat message with one video_url part (frames from media_io_kwargs when `frames` > 0).
Json video_chat(const std::string& url, const std::string& text, int frames = 0) {
  Json body = image_chat({}, text);
  Json& parts = body["messages"][0]["content"];
  parts.insert(parts.begin(), Json{{"type", "video_url"}, {"video_url", {{"url", url}}}});
  if (frames > 0) body["media_io_kwargs"] = {{"video", {{"num_frames", frames}}}};
  return body;
}

Json generate_with_video(const fs::path& file, const std::string& text, int frames) {
  return generate_with_images(
      {}, text, " --video '" + file.string() + "' --frames " + std::to_string(frames));
}

TEST(ServeVision, VideoUrlGivesTheIdsOfGenerate) {
  // The fixture's video has 10 frames: 4 sampled per request, 3 by the server's default, and
  // all 10 when 32 are asked for.
  const fs::path dir = video().parent_path();
  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu", "--media-io-kwargs",
                        R"({"video": {"num_frames": 3}})", "--allowed-local-media-path",
                        dir.string()});
  ASSERT_TRUE(server.started());
  const std::string mkv = data_url(video(), "video/x-matroska");
  if (!video_decoding_available()) {  // refused by either URL, naming the part
    for (const std::string& url : {mkv, "file://" + video().string()}) {
      const Reply r = post_chat(server.port(), video_chat(url, "What happens?", 4));
      EXPECT_TRUE(test::refuses_video(r.status, r.body, "messages[0].content[0]"));
    }
    return;
  }
  expect_same_as_cli(post_chat(server.port(), video_chat(mkv, "What happens?", 4)),
                     generate_with_video(video(), "What happens?", 4));
  expect_same_as_cli(post_chat(server.port(), video_chat(mkv, "And now?")),
                     generate_with_video(video(), "And now?", 3), 3 * 196);
  expect_same_as_cli(
      post_chat(server.port(), video_chat("file://" + video().string(), "All of it", 32)),
      generate_with_video(video(), "All of it", 32));
  // An image and a video in one message: the image's part first, as generate writes them.
  Json both = video_chat(mkv, "Both", 4);
  both["messages"][0]["content"].insert(
      both["messages"][0]["content"].begin(),
      Json{{"type", "image_url"},
           {"image_url", {{"url", data_url(image("tall.jpg"), "image/jpeg")}}}});
  expect_same_as_cli(post_chat(server.port(), both),
                     generate_with_images({image("tall.jpg")}, "Both",
                                          " --video '" + video().string() + "' --frames 4"));
}

TEST(ServeVision, RefusedVideosNameTheContentPart) {
  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu",
                        "--max-videos-per-request", "1", "--max-video-mib", "0.02"});
  ASSERT_TRUE(server.started());
  const int port = server.port();
  auto expect_400 = [&](const Json& body, const std::string& param, const std::string& words) {
    const Reply r = post_chat(port, body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.body["error"]["param"], param) << r.body;
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(words), std::string::npos)
        << r.body;
  };
  const std::string mkv = data_url(video(), "video/x-matroska");  // 24 KB: over 0.02 MiB
  expect_400(video_chat(mkv, "x"), "messages[0].content[0]",
             "bytes; accepted are 1 to 20971 bytes (--max-video-mib");
  // Decoded by the engine: not a video at all, or a truncated one. Without video support the
  // engine refuses it unread; the limits above and below hold in either build.
  if (video_decoding_available()) {
    expect_400(video_chat("data:video/mp4;base64,aGVsbG8gd29ybGQ=", "x"), "messages[0].content[0]",
               "messages[0].content[0]: cannot open video");
  } else {
    const Reply r = post_chat(port, video_chat("data:video/mp4;base64,aGVsbG8gd29ybGQ=", "x"));
    EXPECT_TRUE(test::refuses_video(r.status, r.body, "messages[0].content[0]"));
  }
  Json two = video_chat("data:video/mp4;base64,aGk=", "x");
  two["messages"][0]["content"].push_back(two["messages"][0]["content"][0]);
  expect_400(two, "messages[0].content[2]", "accepted are 1 to 1 videos per request");
  expect_400(video_chat("data:video/mp4;base64,aGk=", "x", 2000),
             "media_io_kwargs.video.num_frames", "must be an integer in [1, 1024]");
  // The server is unharmed.
  const std::string png = data_url(image("square.png"), "image/png");
  EXPECT_EQ(post_chat(port, image_chat({png}, "x")).status, 200);
}

Reply post_tokenize(int port, const Json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  auto r = c.Post("/tokenize", body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response";
    return {};
  }
  return {r->status, Json::parse(r->body, nullptr, false)};
}

TEST(ServeVision, TokenizeCountsTheExpandedPlaceholders) {
  // /tokenize of a chat with an image and a video returns the tokens the model sees (as vLLM's
  // does): each placeholder expanded to its item's feature count, which the independent Python
  // reference (tools/reference_sdar_vl.py) gives for the fixture's wide image and its video at
  // 4 frames; the count is what the chat completion reports as its prompt's usage.
  const Json ref = read_json_file(test::model_fixture("sdar-vl-tiny") / "reference.json");
  const Json& wide = ref["cases"][0];
  ASSERT_EQ(wide["images"], Json::array({"wide"}));
  const int64_t image_id = 300, video_id = 301;  // <|image_pad|>, <|video_pad|>
  const auto wide_ids = wide["ids"].get<std::vector<int32_t>>();
  const auto wide_tokens = std::count(wide_ids.begin(), wide_ids.end(), image_id);
  const int64_t video_tokens = ref["video"]["tokens"].get<int64_t>();
  ASSERT_EQ(ref["video"]["sampled"], 4);

  ServerProcess server({"-m", chat_vision_model().string(), "--device", "cpu"});
  ASSERT_TRUE(server.started());
  Json body = video_chat(data_url(video(), "video/x-matroska"), "Both", 4);
  body["messages"][0]["content"].insert(
      body["messages"][0]["content"].begin(),
      Json{{"type", "image_url"},
           {"image_url", {{"url", data_url(image("wide.png"), "image/png")}}}});
  const Reply tok = post_tokenize(server.port(), {{"messages", body["messages"]},
                                                  {"media_io_kwargs", body["media_io_kwargs"]}});
  if (!video_decoding_available()) {  // the video, after the image, is content[1]
    EXPECT_TRUE(test::refuses_video(tok.status, tok.body, "messages[0].content[1]"));
    const Reply chat = post_chat(server.port(), body);
    EXPECT_TRUE(test::refuses_video(chat.status, chat.body, "messages[0].content[1]"));
    return;
  }
  ASSERT_EQ(tok.status, 200) << tok.body;
  const auto ids = tok.body["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), image_id), wide_tokens);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), video_id), video_tokens);
  EXPECT_EQ(tok.body["count"], ids.size());
  // The text around them is the template's: the same ids as the text-only chat with one
  // placeholder each.
  std::vector<int32_t> collapsed;
  for (size_t i = 0; i < ids.size(); ++i)
    if (!(i > 0 && ids[i] == ids[i - 1] && (ids[i] == image_id || ids[i] == video_id)))
      collapsed.push_back(ids[i]);
  const Json text_only = {{"prompt",
                           "<|im_start|>user\n<|image_pad|><|video_pad|>Both<|im_end|>\n"
                           "<|im_start|>assistant\n"}};
  const Reply plain = post_tokenize(server.port(), text_only);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(Json(collapsed), plain.body["tokens"]);
  const Reply chat = post_chat(server.port(), body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.body["usage"]["prompt_tokens"], ids.size());
  // add_generation_prompt false drops the assistant's header only.
  Json no_gen = {{"messages", body["messages"]},
                 {"media_io_kwargs", body["media_io_kwargs"]},
                 {"add_generation_prompt", false}};
  const Reply tok2 = post_tokenize(server.port(), no_gen);
  ASSERT_EQ(tok2.status, 200) << tok2.body;
  EXPECT_LT(tok2.body["count"].get<size_t>(), ids.size());
  // A bad image is a 400 naming its part.
  Json bad = {
      {"messages", image_chat({"data:image/png;base64,aGVsbG8gd29ybGQ="}, "x")["messages"]}};
  const Reply r = post_tokenize(server.port(), bad);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "messages[0].content[0]") << r.body;
}

TEST(ServeVision, TextOnlyModelRefusesImages) {
  ServerProcess server({"--device", "cpu"});  // the embedded tiny-block
  ASSERT_TRUE(server.started());
  const Reply r = post_chat(
      server.port(), image_chat({data_url(image("square.png"), "image/png")}, "What is this?"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "messages[0].content[0]") << r.body;
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("not a vision-language model"),
            std::string::npos)
      << r.body;
}

}  // namespace
}  // namespace dllm
