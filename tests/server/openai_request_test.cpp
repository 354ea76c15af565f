// The request parser alone (no engine): every field's type and range, errors that name the
// field, and a bounded random-body fuzz run that must never crash or throw anything but ApiError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace dllm::server {
namespace {

ParseContext context() {
  ParseContext c;
  c.served_model = "tiny-block";
  for (const std::string& n : Engine::option_names()) c.option_names.insert(n);
  c.vocab_size = 4096;
  c.context_length = 8192;
  c.max_choices = 16;
  return c;
}

ApiRequest parse(Endpoint e, const std::string& body) {
  return parse_api_request(e, Json::parse(body), context());
}

// The ApiError a body gives; fails the test when it parses.
ApiError error_of(Endpoint e, const std::string& body) {
  try {
    parse(e, body);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "", "");
}

TEST(OpenAiRequest, CompletionFieldsMapToTheRequest) {
  const ApiRequest r = parse(Endpoint::completions, R"({
      "model": "tiny-block", "prompt": "1+2=", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9,
      "top_k": -1, "seed": 7, "stop": "\n", "n": 2, "stream": true,
      "stream_options": {"include_usage": true}, "strategy": "ar", "block_length": 4,
      "threshold": 0.8, "verify-policy": "score", "unknown_field": {"x": 1},
      "presence_penalty": 0, "logprobs": null, "user": "me"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  const Request& q = r.prompts[0];
  EXPECT_EQ(q.prompt, "1+2=");
  EXPECT_EQ(q.max_tokens, 8);
  EXPECT_FLOAT_EQ(*q.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*q.top_p, 0.9f);
  EXPECT_EQ(q.top_k, 0);  // -1: off, as vLLM
  EXPECT_EQ(q.seed, 7u);
  EXPECT_EQ(q.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(q.strategy, "ar");
  EXPECT_EQ(q.options.at("block-length"), "4");
  EXPECT_EQ(q.options.at("threshold"), "0.8");
  EXPECT_EQ(q.options.at("verify-policy"), "score");
  EXPECT_EQ(q.options.count("unknown-field"), 0u);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiRequest, PromptForms) {
  EXPECT_EQ(parse(Endpoint::completions, R"({"prompt": ["a", "b"]})").prompts.size(), 2u);
  const auto ids = parse(Endpoint::completions, R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse(Endpoint::completions, R"({"prompt": [[1], [2, 3]]})").prompts.size(), 2u);
}

TEST(OpenAiRequest, ChatMessagesAndContentParts) {
  const ApiRequest r = parse(Endpoint::chat, R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "max_completion_tokens": 5, "chat_template_kwargs": {"enable_thinking": false},
      "dllm": {"stream_provisional": true}, "stream": true})");
  ASSERT_EQ(r.prompts.size(), 1u);
  const Json m = Json::parse(r.prompts[0].messages_json);
  EXPECT_EQ(m[1]["content"], "a\nb");
  EXPECT_EQ(r.prompts[0].max_tokens, 5);
  EXPECT_TRUE(r.prompts[0].trace);
  EXPECT_TRUE(r.stream_provisional);
}

TEST(OpenAiRequest, WrongValuesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "x", "max_tokens": "8"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "seed": "one"})", "seed"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "logprobs": 2})", "logprobs"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "presence_penalty": 1})", "presence_penalty"},
      {R"({"prompt": "x", "block_length": [4]})", "block_length"},
      {R"({"prompt": "x", "dllm": {"stream_provisional": true}})", "dllm.stream_provisional"},
      {R"({"prompt": [5000]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": {"a": 1}})", "prompt"},
      {R"({"max_tokens": 3})", "prompt"},
      {R"({"prompt": ["a", "b"], "n": 9})", "n"},
      {R"({"prompt": "x", "stop_token_ids": [4096]})", "stop_token_ids"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = error_of(Endpoint::completions, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " -> " << e.what();
  }
  const std::vector<std::pair<std::string, std::string>> chat = {
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0]"},  // a text-only model's context
      {R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})",
       "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})",
       "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools"},
  };
  for (const auto& [body, param] : chat) {
    const ApiError e = error_of(Endpoint::chat, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " -> " << e.what();
  }
}

TEST(OpenAiRequest, SparsePrefillNamesALoadedConfig) {
  ParseContext c = context();
  c.sparse_prefill_names = {"none", "video"};
  const auto parsed = [&](const std::string& body) {
    return parse_api_request(Endpoint::completions, Json::parse(body), c).prompts.at(0);
  };
  EXPECT_EQ(parsed(R"({"prompt": "x", "sparse_prefill": "video"})").sparse_prefill, "video");
  EXPECT_EQ(parsed(R"({"prompt": "x", "sparse_prefill": "none"})").sparse_prefill, "none");
  EXPECT_EQ(parsed(R"({"prompt": "x"})").sparse_prefill, "");
  for (const char* body : {R"({"prompt": "x", "sparse_prefill": "/etc/video.json"})",
                           R"({"prompt": "x", "sparse_prefill": 1})"}) {
    try {
      parsed(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "sparse_prefill") << body;
    }
  }
  try {
    parsed(R"({"prompt": "x", "sparse_prefill": "audio"})");
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: none, video"), std::string::npos) << e.what();
  }
}

TEST(OpenAiRequest, UnknownModelIs404) {
  const ApiError e = error_of(Endpoint::completions, R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "model");
}

TEST(OpenAiRequest, EngineErrorsNameTheFlagAsField) {
  EXPECT_EQ(engine_error("--block-length must be positive (got 0)", "prompt").param,
            "block_length");
  EXPECT_EQ(engine_error("the prompt is empty", "prompt").param, "prompt");
  EXPECT_EQ(
      engine_error("prompt (9000 tokens) + --max-tokens 64 exceeds the model's context", "").param,
      "max_tokens");
}

// Random bodies built from the field names and values the parser knows, plus junk: the parser
// must either accept or throw ApiError, never crash or throw anything else. Bounded (CI).
Json random_value(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 2 ? 7 : 9)) {
    case 0:
      return nullptr;
    case 1:
      return static_cast<int64_t>(rng() % 20) - 5;
    case 2:
      return static_cast<double>(rng() % 1000) / 100.0 - 1.0;
    case 3:
      return rng() % 2 == 0;
    case 4:
      return std::string(rng() % 4, static_cast<char>('a' + rng() % 26));
    case 5:
      return static_cast<uint64_t>(rng()) << 33;
    case 6:
      return -static_cast<int64_t>(rng()) * 1000003;
    case 7: {
      Json a = Json::array();
      for (int i = rng() % 4; i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      static const char* keys[] = {
          "role", "content", "type", "text", "include_usage", "stream_provisional", "x"};
      Json o = Json::object();
      for (int i = rng() % 4; i > 0; --i) o[keys[rng() % 7]] = random_value(rng, depth + 1);
      return o;
    }
  }
}

TEST(OpenAiRequest, RandomBodiesNeverCrash) {
  static const char* fields[] = {"model",
                                 "prompt",
                                 "messages",
                                 "max_tokens",
                                 "max_completion_tokens",
                                 "temperature",
                                 "top_p",
                                 "top_k",
                                 "seed",
                                 "stop",
                                 "stop_token_ids",
                                 "ignore_eos",
                                 "n",
                                 "stream",
                                 "stream_options",
                                 "return_token_ids",
                                 "strategy",
                                 "block_length",
                                 "steps",
                                 "threshold",
                                 "window",
                                 "dllm",
                                 "logprobs",
                                 "echo",
                                 "presence_penalty",
                                 "best_of",
                                 "tools",
                                 "response_format",
                                 "chat_template_kwargs",
                                 "logit_bias",
                                 "suffix",
                                 "unknown"};
  std::mt19937 rng(20);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    Json body = Json::object();
    if (rng() % 2) body["prompt"] = rng() % 2 ? Json("hello") : Json::array({1, 2, 3});
    if (rng() % 2) body["messages"] = Json::array({{{"role", "user"}, {"content", "hi"}}});
    for (int k = rng() % 6; k > 0; --k)
      body[fields[rng() % std::size(fields)]] = random_value(rng, 0);
    const Json doc = rng() % 50 == 0 ? random_value(rng, 0) : body;
    try {
      parse_api_request(rng() % 2 ? Endpoint::chat : Endpoint::completions, doc, context());
      ++accepted;
    } catch (const ApiError& e) {
      EXPECT_GE(e.status, 400);
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
  EXPECT_GT(accepted, 100);  // the generator reaches valid bodies too
}

}  // namespace
}  // namespace dllm::server

namespace dllm::server {
namespace {

// Image parts for a vision-language model's context.
ParseContext vision_context(const std::string& media_root = {}) {
  ParseContext c = context();
  c.accepts_images = true;
  c.max_images = 3;
  c.media.max_image_bytes = 16;
  c.media.allowed_local_media_path = media_root;
  return c;
}

Json image_message(const std::vector<std::string>& urls) {
  Json parts = Json::array();
  parts.push_back({{"type", "text"}, {"text", "look:"}});
  for (const std::string& u : urls)
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", u}, {"detail", "high"}}}});
  parts.push_back({{"type", "text"}, {"text", "and say"}});
  return {{"messages", {{{"role", "user"}, {"content", parts}}}}};
}

ApiError vision_error(const Json& body, const ParseContext& ctx) {
  try {
    parse_api_request(Endpoint::chat, body, ctx);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "", "");
}

TEST(OpenAiRequest, ImagePartsBecomeImageBytesAndTemplateParts) {
  // "Zm9v" = "foo", "YmFyIQ==" = "bar!" (RFC 4648 alphabet); a bare string url is accepted.
  Json body = image_message({"data:image/png;base64,Zm9v", "DATA:image/jpeg;base64,YmFyIQ=="});
  body["messages"][0]["content"].push_back(
      {{"type", "image_url"}, {"image_url", "data:image/webp;base64,YmF6"}});
  const ApiRequest r = parse_api_request(Endpoint::chat, body, vision_context());
  ASSERT_EQ(r.prompts.size(), 1u);
  const Request& q = r.prompts[0];
  ASSERT_EQ(q.image_bytes.size(), 3u);
  EXPECT_EQ(q.image_bytes[0].data, "foo");
  EXPECT_EQ(q.image_bytes[0].name, "messages[0].content[1]");
  EXPECT_EQ(q.image_bytes[1].data, "bar!");
  EXPECT_EQ(q.image_bytes[1].name, "messages[0].content[2]");
  EXPECT_EQ(q.image_bytes[2].data, "baz");
  const Json m = Json::parse(q.messages_json);
  EXPECT_EQ(m[0]["content"], Json::parse(R"([{"type": "text", "text": "look:"},
      {"type": "image"}, {"type": "image"}, {"type": "text", "text": "and say"},
      {"type": "image"}])"));
  // Without images a message's text parts still join into one string.
  const ApiRequest t = parse_api_request(Endpoint::chat, image_message({}), vision_context());
  EXPECT_EQ(Json::parse(t.prompts[0].messages_json)[0]["content"], "look:\nand say");
  EXPECT_TRUE(t.prompts[0].image_bytes.empty());
}

TEST(OpenAiRequest, RefusedImageUrlsNameThePart) {
  const ParseContext ctx = vision_context();
  const std::string ok = "data:image/png;base64,Zm9v";
  struct Case {
    std::vector<std::string> urls;
    std::string words;
  };
  const std::vector<Case> cases = {
      {{"https://example.com/a.png"}, "fetches nothing from the network"},
      {{"http://127.0.0.1/a.png"}, "fetches nothing from the network"},
      {{"file:///etc/passwd"}, "--allowed-local-media-path"},
      {{"ftp://x/a.png"}, "unsupported URL"},
      {{"data:image/png,Zm9v"}, "must be a base64 data: URL"},
      {{"data:image/png;base64"}, "without the ','"},
      {{"data:application/json;base64,Zm9v"}, "image/... type"},
      {{"data:image/png;base64,Zm9v!"}, "offset 4 is not in the base64 alphabet"},
      {{"data:image/png;base64,Zm9=v"}, "invalid base64"},
      {{"data:image/png;base64,Z"}, "invalid base64"},
      {{"data:image/png;base64,Zh=="}, "stray bits"},
      {{"data:image/png;base64,"}, "empty image"},
      // 17 bytes: past the context's 16.
      {{"data:image/png;base64,MDEyMzQ1Njc4OWFiY2RlZmc="}, "accepted are 1 to 16 bytes"},
  };
  for (const Case& c : cases) {
    const ApiError e = vision_error(image_message({ok, c.urls[0]}), ctx);
    EXPECT_EQ(e.status, 400) << c.urls[0];
    EXPECT_EQ(e.param, "messages[0].content[2]") << c.urls[0];
    EXPECT_NE(std::string(e.what()).find(c.words), std::string::npos) << e.what();
  }
  const ApiError many = vision_error(image_message({ok, ok, ok, ok}), ctx);
  EXPECT_EQ(many.param, "messages[0].content[4]");
  EXPECT_NE(std::string(many.what()).find("accepted are 1 to 3 images per request"),
            std::string::npos)
      << many.what();
  Json no_url = image_message({});
  no_url["messages"][0]["content"].push_back({{"type", "image_url"}, {"image_url", {{"x", 1}}}});
  EXPECT_EQ(vision_error(no_url, ctx).param, "messages[0].content[2]");
  // A text-only model refuses the part before looking at it.
  const ApiError text_only = vision_error(image_message({ok}), context());
  EXPECT_EQ(text_only.param, "messages[0].content[1]");
  EXPECT_NE(std::string(text_only.what()).find("not a vision-language model"), std::string::npos);
}

// vLLM's video_url parts: bytes in Request::video_bytes named by their part, {"type": "video"}
// in the template's content, frames from media_io_kwargs.video.num_frames (else the server's).
TEST(OpenAiRequest, VideoPartsBecomeVideoBytesAndTemplateParts) {
  ParseContext ctx = vision_context();
  ctx.max_videos = 2;
  ctx.video_frames = 7;
  ctx.media.max_video_bytes = 4;
  Json body = image_message({"data:image/png;base64,Zm9v"});
  body["messages"][0]["content"].push_back(
      {{"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64,YmFyIQ=="}}}});
  ApiRequest r = parse_api_request(Endpoint::chat, body, ctx);
  const Request& q = r.prompts[0];
  ASSERT_EQ(q.video_bytes.size(), 1u);
  EXPECT_EQ(q.video_bytes[0].data, "bar!");
  EXPECT_EQ(q.video_bytes[0].name, "messages[0].content[3]");
  ASSERT_EQ(q.image_bytes.size(), 1u);
  EXPECT_EQ(q.video_frames, 7);
  EXPECT_EQ(Json::parse(q.messages_json)[0]["content"], Json::parse(R"([{"type": "text",
      "text": "look:"}, {"type": "image"}, {"type": "text", "text": "and say"},
      {"type": "video"}])"));
  body["media_io_kwargs"] = {{"video", {{"num_frames", 3}}}};
  EXPECT_EQ(parse_api_request(Endpoint::chat, body, ctx).prompts[0].video_frames, 3);

  auto expect_error = [&](const Json& b, const std::string& param, const std::string& words) {
    const ApiError e = vision_error(b, ctx);
    EXPECT_EQ(e.status, 400) << b;
    EXPECT_EQ(e.param, param) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  };
  for (const auto& [kwargs, param] : std::vector<std::pair<Json, std::string>>{
           {{{"video", {{"num_frames", 0}}}}, "media_io_kwargs.video.num_frames"},
           {{{"video", {{"num_frames", 1025}}}}, "media_io_kwargs.video.num_frames"},
           {{{"video", {{"num_frames", "8"}}}}, "media_io_kwargs.video.num_frames"},
           {{{"video", {{"fps", 2}}}}, "media_io_kwargs.video.fps"},
           {{{"video", 8}}, "media_io_kwargs.video"},
           {Json(8), "media_io_kwargs"}}) {
    Json b = body;
    b["media_io_kwargs"] = kwargs;
    expect_error(b, param, "media_io_kwargs");
  }
  auto video_message = [&](const std::vector<std::string>& urls) {
    Json b = image_message({});
    for (const std::string& u : urls)
      b["messages"][0]["content"].push_back({{"type", "video_url"}, {"video_url", {{"url", u}}}});
    return b;
  };
  const std::string ok = "data:video/webm;base64,Zm9v";
  expect_error(video_message({ok, ok, ok}), "messages[0].content[4]",
               "accepted are 1 to 2 videos per request (--max-videos-per-request)");
  expect_error(video_message({"data:video/mp4;base64,MDEyMzQ="}), "messages[0].content[2]",
               "is a video of 5 bytes; accepted are 1 to 4 bytes (--max-video-mib");
  expect_error(video_message({"data:image/png;base64,Zm9v"}), "messages[0].content[2]",
               "a video/... type");
  expect_error(video_message({"data:video/mp4;base64,"}), "messages[0].content[2]", "empty video");
  expect_error(video_message({"https://example.com/a.mp4"}), "messages[0].content[2]",
               "send the video inline as a data:video/...;base64 URL");
  expect_error(video_message({"file:///etc/passwd"}), "messages[0].content[2]",
               "--allowed-local-media-path");
  Json no_url = image_message({});
  no_url["messages"][0]["content"].push_back({{"type", "video_url"}, {"x", 1}});
  expect_error(no_url, "messages[0].content[2]", "video_url parts need");
  // An image part does not pass as a video, nor a video as an image, by its media type.
  expect_error(image_message({"data:video/mp4;base64,Zm9v"}), "messages[0].content[1]",
               "an image/... type");
  const ApiError text_only = vision_error(video_message({ok}), context());
  EXPECT_EQ(text_only.param, "messages[0].content[2]");
  EXPECT_NE(std::string(text_only.what()).find("is a video, but this model"), std::string::npos);
}

TEST(OpenAiRequest, FileUrlsAreReadOnlyUnderTheAllowedDirectory) {
  const auto root = std::filesystem::temp_directory_path() /
                    ("dllm-media-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(root / "in");
  std::ofstream(root / "in" / "a b.png") << "inside";
  std::ofstream(root / "secret.png") << "secret";
  std::filesystem::create_symlink(root / "secret.png", root / "in" / "link.png");
  const ParseContext ctx = vision_context(canonical_media_root((root / "in").string()));
  const std::string in = (root / "in").string();
  const ApiRequest r =
      parse_api_request(Endpoint::chat, image_message({"file://" + in + "/a%20b.png"}), ctx);
  ASSERT_EQ(r.prompts[0].image_bytes.size(), 1u);
  EXPECT_EQ(r.prompts[0].image_bytes[0].data, "inside");
  for (const std::string& url :
       {"file://" + in + "/../secret.png", "file://" + in + "/link.png",
        "file://" + (root / "secret.png").string(), "file://" + in + "/missing.png", "file://" + in,
        "file://host" + in + "/a%20b.png", "file://" + in + "/a%2"}) {
    const ApiError e = vision_error(image_message({url}), ctx);
    EXPECT_EQ(e.status, 400) << url;
    EXPECT_EQ(e.param, "messages[0].content[1]") << url;
  }
  EXPECT_THROW(canonical_media_root((root / "missing").string()), Error);
  EXPECT_THROW(canonical_media_root((root / "secret.png").string()), Error);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace dllm::server
