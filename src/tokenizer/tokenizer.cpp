#include "tokenizer/tokenizer.h"

#include <deque>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace dllm {

struct TokenizerData {
  std::string file;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;  // owns the contents `spelling` points at; never resized
  std::vector<std::string> normalized_contents;  // likewise, for tokens with normalized=true
  AddedVocabulary added;
  std::unordered_map<std::string_view, int32_t> added_to_id;
  // Per id in [0, vocab_size): its spelling and flags.
  std::vector<std::string_view> spelling;
  std::vector<uint8_t> flags;
  static constexpr uint8_t kPresent = 1, kSpecial = 2;
};

namespace {

using json = nlohmann::json;

std::filesystem::path resolve_tokenizer_file(const std::filesystem::path& path_or_dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_or_dir, ec)) {
    const auto file = path_or_dir / "tokenizer.json";
    if (!std::filesystem::exists(file, ec))
      fail(path_or_dir.string(), ": directory has no tokenizer.json");
    return file;
  }
  if (!std::filesystem::exists(path_or_dir, ec)) fail(path_or_dir.string(), ": no such file");
  return path_or_dir;
}

bool optional_bool(const json& obj, const char* name, bool fallback, const std::string& file,
                   const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(file, ": ", where, " field \"", name, "\" must be a boolean");
  return it->get<bool>();
}

// Fills the BPE options from "model" and rejects the features we do not implement.
void read_model_options(const json& model, BpeSource& bpe, const std::string& file) {
  if (!model.is_object()) fail(file, ": \"model\" is missing or not an object");
  if (model.contains("type")) {
    if (!model["type"].is_string()) fail(file, ": model.type must be a string");
    const std::string type = model["type"].get<std::string>();
    if (type != "BPE") fail(file, ": model type '", type, "' is not supported (only BPE)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    if (!model["dropout"].is_number()) fail(file, ": model.dropout must be a number or null");
    if (model["dropout"].get<double>() != 0.0) fail(file, ": BPE dropout is not supported");
  }
  for (const char* name : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.contains(name) || model[name].is_null()) continue;
    if (!model[name].is_string() || !model[name].get<std::string>().empty())
      fail(file, ": BPE ", name, " is not supported");
  }
  if (optional_bool(model, "byte_fallback", false, file, "model"))
    fail(file, ": BPE byte_fallback is not supported");
  bpe.fuse_unk = optional_bool(model, "fuse_unk", false, file, "model");
  bpe.ignore_merges = optional_bool(model, "ignore_merges", false, file, "model");
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    if (!model["unk_token"].is_string()) fail(file, ": model.unk_token must be a string or null");
    bpe.unk_token = model["unk_token"].get<std::string>();
  }
}

// Post-processors only add special tokens (which we never add) or adjust offsets (which we do not
// report), so the known ones are accepted as no-ops; unknown ones might do more and are rejected.
void check_post_processor(const json& spec, const std::string& file) {
  if (spec.is_null()) return;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    fail(file, ": post_processor must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    if (!spec.contains("processors") || !spec["processors"].is_array())
      fail(file, ": post_processor Sequence needs a \"processors\" array");
    for (const auto& child : spec["processors"]) check_post_processor(child, file);
    return;
  }
  if (type == "ByteLevel" || type == "TemplateProcessing" || type == "RobertaProcessing" ||
      type == "BertProcessing")
    return;
  fail(file, ": post_processor type '", type, "' is not supported");
}

void check_decoder(const json& spec, const std::string& file) {
  if (spec.is_null()) fail(file, ": a null decoder is not supported (only ByteLevel)");
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    fail(file, ": decoder must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type != "ByteLevel")
    fail(file, ": decoder type '", type, "' is not supported (only ByteLevel)");
}

std::vector<AddedToken> read_added_tokens(const json& config, const std::string& file) {
  std::vector<AddedToken> tokens;
  const auto it = config.find("added_tokens");
  if (it == config.end() || it->is_null()) return tokens;
  if (!it->is_array()) fail(file, ": \"added_tokens\" must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = cat("added_tokens[", i, "]");
    if (!t.is_object()) fail(file, ": ", where, " must be an object");
    if (!t.contains("id") || !t["id"].is_number_integer())
      fail(file, ": ", where, " needs a non-negative integer \"id\"");
    // Unsigned ids above INT64_MAX would wrap in get<int64_t>(); the upper bound is checked
    // against the file's token count once the vocabulary is known.
    if (t["id"].is_number_unsigned()
            ? t["id"].get<uint64_t>() >= INT32_MAX
            : (t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= INT32_MAX))
      fail(file, ": ", where, " id ", t["id"].dump(), " is outside the accepted range 0..",
           INT32_MAX - 1);
    if (!t.contains("content") || !t["content"].is_string())
      fail(file, ": ", where, " needs a string \"content\"");
    AddedToken token;
    token.id = static_cast<int32_t>(t["id"].get<int64_t>());
    token.content = t["content"].get<std::string>();
    if (utf8::find_invalid(token.content) != std::string::npos)
      fail(file, ": ", where, " content is not valid UTF-8");
    token.special = optional_bool(t, "special", false, file, where);
    token.single_word = optional_bool(t, "single_word", false, file, where);
    token.lstrip = optional_bool(t, "lstrip", false, file, where);
    token.rstrip = optional_bool(t, "rstrip", false, file, where);
    token.normalized = optional_bool(t, "normalized", !token.special, file, where);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path_or_dir) {
  const std::filesystem::path path = resolve_tokenizer_file(path_or_dir);
  return from_json_text(read_text_file(path), path.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view text, std::string name) {
  auto data = std::make_shared<TokenizerData>();
  data->file = std::move(name);
  const std::string& file = data->file;

  TokenizerJson parsed = parse_tokenizer_json(text, file);
  const json& config = parsed.config;
  if (!config.is_object()) fail(file, ": not a tokenizer.json (top level is not an object)");
  if (config.contains("truncation") && !config["truncation"].is_null())
    fail(file, ": truncation is not supported (set \"truncation\": null)");
  if (config.contains("padding") && !config["padding"].is_null())
    fail(file, ": padding is not supported (set \"padding\": null)");
  if (!config.contains("model")) fail(file, ": \"model\" is missing");
  read_model_options(config["model"], parsed.bpe, file);
  if (!parsed.has_vocab) fail(file, ": model.vocab is missing or not an object");
  if (!parsed.has_merges) fail(file, ": model.merges is missing or not an array");

  auto field = [&](const char* name) -> const json& {
    static const json null_value;
    const auto it = config.find(name);
    return it == config.end() ? null_value : *it;
  };
  data->normalizer = Normalizer::from_json(field("normalizer"), file);
  data->pre_tokenizer = PreTokenizer::from_json(field("pre_tokenizer"), file);
  if (!data->pre_tokenizer.has_byte_level())
    fail(file, ": pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  check_post_processor(field("post_processor"), file);
  check_decoder(field("decoder"), file);
  data->added_tokens = read_added_tokens(config, file);

  const int64_t token_count =
      static_cast<int64_t>(parsed.bpe.vocab.size() + data->added_tokens.size());
  const int64_t id_bound =
      std::min<int64_t>(token_id_limit(static_cast<size_t>(token_count)), INT32_MAX);
  data->model = std::make_unique<BpeModel>(std::move(parsed.bpe), file, data->added_tokens.size());
  data->added = AddedVocabulary(data->added_tokens, data->normalizer);

  int32_t limit = data->model->id_limit();
  for (size_t i = 0; i < data->added_tokens.size(); ++i) {
    const AddedToken& t = data->added_tokens[i];
    // The id-indexed tables below are sized by the largest id.
    if (t.id >= id_bound)
      fail(file, ": added_tokens[", i, "] id ", t.id, " is outside the accepted range 0..",
           id_bound - 1, " (the file defines ", token_count, " tokens; ids may leave at most ",
           kTokenIdGapAllowance, " unused)");
    limit = std::max(limit, t.id + 1);
  }
  data->spelling.assign(limit, std::string_view{});
  data->flags.assign(limit, 0);
  for (int32_t id = 0; id < data->model->id_limit(); ++id) {
    if (const auto token = data->model->id_to_token(id)) {
      data->spelling[id] = *token;
      data->flags[id] = TokenizerData::kPresent;
    }
  }
  // Hugging Face maps the id of a normalized added token back to its normalized content (which is
  // what decode then shows); the content as written still maps to the id.
  data->normalized_contents.resize(data->added_tokens.size());
  for (size_t i = 0; i < data->added_tokens.size(); ++i) {
    const AddedToken& t = data->added_tokens[i];
    std::string_view spelling = t.content;
    if (t.normalized) {
      std::string& normalized = data->normalized_contents[i];
      spelling = data->normalizer.apply(t.content, normalized);
      if (spelling.data() != normalized.data()) normalized.assign(spelling);
      spelling = normalized;
    }
    data->spelling[t.id] = spelling;
    data->flags[t.id] = TokenizerData::kPresent | (t.special ? TokenizerData::kSpecial : 0);
    data->added_to_id.emplace(t.content, t.id);
  }
  return Tokenizer(std::move(data));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const TokenizerData& d = *data_;
  if (const size_t bad = utf8::find_invalid(text); bad != std::string_view::npos)
    fail("encode: the text is not valid UTF-8 (byte offset ", bad, ")");

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Segment> raw_segments, normalized_segments;
  std::vector<std::string_view> pieces;
  std::deque<std::string> piece_storage;
  std::string normalized_storage;

  auto encode_plain = [&](std::string_view plain) {
    pieces.clear();
    piece_storage.clear();
    d.pre_tokenizer.split(plain, pieces, piece_storage);
    d.model->encode_words(pieces, ids);
  };

  // Added tokens are found on the raw text first, the rest is normalized (per segment, as Hugging
  // Face does), then normalized added tokens are found, then pre-tokenization and BPE.
  d.added.split(text, false, raw_segments);
  for (const auto& seg : raw_segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view normalized =
        d.normalizer.apply(text.substr(seg.start, seg.end - seg.start), normalized_storage);
    if (!d.added.has_tokens(true)) {
      encode_plain(normalized);
      continue;
    }
    normalized_segments.clear();
    d.added.split(normalized, true, normalized_segments);
    for (const auto& nseg : normalized_segments) {
      if (nseg.id >= 0) {
        ids.push_back(nseg.id);
      } else {
        encode_plain(normalized.substr(nseg.start, nseg.end - nseg.start));
      }
    }
  }
  return ids;
}

void Tokenizer::check_id(int32_t id, const char* what) const {
  const TokenizerData& d = *data_;
  if (id < 0 || id >= static_cast<int32_t>(d.flags.size()))
    fail(what, ": token id ", id, " is out of range (vocabulary size ", d.flags.size(), ")");
  if (!(d.flags[id] & TokenizerData::kPresent)) fail(what, ": no token has id ", id);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  check_id(id, "token_bytes");
  std::string bytes;
  const std::string_view token = data_->spelling[id];
  // Hugging Face's ByteLevel decoder: a token whose characters are not all byte-level characters
  // contributes its own UTF-8 text.
  if (!ByteLevelAlphabet::get().decode(token, bytes)) bytes.assign(token);
  return bytes;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerData& d = *data_;
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    check_id(id, "decode");
    if (skip_special_tokens && (d.flags[id] & TokenizerData::kSpecial)) continue;
    if (!alphabet.decode(d.spelling[id], bytes)) bytes.append(d.spelling[id]);
  }
  std::string text;
  text.reserve(bytes.size());
  utf8::append_lossy(bytes, text);
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = data_->added_to_id.find(token);
  if (it != data_->added_to_id.end()) return it->second;
  return data_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  check_id(id, "id_to_token");
  return std::string(data_->spelling[id]);
}

bool Tokenizer::has_token(int32_t id) const {
  const TokenizerData& d = *data_;
  return id >= 0 && id < static_cast<int32_t>(d.flags.size()) &&
         (d.flags[id] & TokenizerData::kPresent);
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(data_->flags.size());
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (data_->flags[id] & TokenizerData::kSpecial);
}

const std::string& Tokenizer::source_path() const {
  return data_->file;
}

}  // namespace dllm
