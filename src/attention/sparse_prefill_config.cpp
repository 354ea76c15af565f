#include "attention/sparse_prefill_config.h"

#include <fstream>

#include "core/error.h"
#include "io/json_file.h"

namespace dllm {

namespace {

HeadPattern default_head() {  // MInference's default for a head the config leaves out
  HeadPattern p;
  p.kind = PatternKind::kVerticalSlash;
  p.vertical = 1000;
  p.slash = 6096;
  return p;
}

// Reads one head's entry; `where` = "FILE: layer-L head H" for errors.
class EntryReader {
 public:
  EntryReader(const nlohmann::json& a, std::string where) : a_(a), where_(std::move(where)) {
    if (!a_.is_array() || a_.empty() || !a_[0].is_string())
      fail(where_, ": a pattern entry must be an array starting with the pattern name (got ",
           a_.dump(), ")");
  }
  std::string name(size_t i) const {
    if (i >= a_.size() || !a_[i].is_string()) fail(where_, ": element ", i, " must be a name");
    return a_[i].get<std::string>();
  }
  size_t size() const { return a_.size(); }
  int32_t integer(size_t i, const char* field, int32_t lo, int32_t hi) const {
    if (i >= a_.size() || !a_[i].is_number_integer())
      fail(where_, ": ", field, " (element ", i, ") must be an integer in [", lo, ", ", hi, "]");
    const int64_t v = a_[i].get<int64_t>();
    if (v < lo || v > hi)
      fail(where_, ": ", field, " must be in [", lo, ", ", hi, "] (got ", v, ")");
    return static_cast<int32_t>(v);
  }
  bool boolean(size_t i, const char* field) const {
    if (i >= a_.size() || !a_[i].is_boolean())
      fail(where_, ": ", field, " (element ", i, ") must be true or false");
    return a_[i].get<bool>();
  }
  [[noreturn]] void unknown() const {
    fail(where_, ": unknown pattern '", name(0),
         "' (dense, vertical_and_slash, vs_attn, stream_llm, a_shape, tri_shape, block_sparse, "
         "grid_attn, shuffle_q, no_shuffle, 2d_shuffle)");
  }
  [[noreturn]] void bad_arity(const char* expected) const {
    fail(where_, ": ", name(0), " takes ", expected, " (got ", a_.dump(), ")");
  }

 private:
  const nlohmann::json& a_;
  std::string where_;
};

constexpr int32_t kMaxSize = 1 << 24;

HeadPattern vertical_slash(const EntryReader& e, size_t at, bool last_q_allowed) {
  HeadPattern p;
  p.kind = PatternKind::kVerticalSlash;
  p.vertical = e.integer(at, "vertical_size", 1, kMaxSize);
  p.slash = e.integer(at + 1, "slash_size", 1, kMaxSize);
  if (last_q_allowed && e.size() > at + 2) p.last_q = e.integer(at + 2, "last_q", 1, 4096);
  return p;
}

HeadPattern parse_entry(const EntryReader& e) {
  const std::string name = e.name(0);
  HeadPattern p;
  if (name == "dense") {
    if (e.size() != 1) e.bad_arity("no parameters");
  } else if (name == "vertical_and_slash" || name == "vs_attn") {
    if (e.size() < 3 || e.size() > 4) e.bad_arity("[vertical_size, slash_size(, last_q | score)]");
    // MInference 1.0 puts a float score last; MMInference's vs_attn an integer last_q.
    p = vertical_slash(e, 1, name == "vs_attn");
  } else if (name == "stream_llm" || name == "a_shape") {
    if (e.size() < 3 || e.size() > 4) e.bad_arity("[sink, local(, score)]");
    p.kind = name == "a_shape" ? PatternKind::kTriShape : PatternKind::kAShape;
    p.sink = e.integer(1, "sink", 0, kMaxSize);
    p.local = e.integer(2, "local", 1, kMaxSize);
    p.n_last = -1;  // MMInference's a_shape: the text after the vision span attends densely
  } else if (name == "tri_shape") {
    if (e.size() != 4) e.bad_arity("[sink, local, n_last]");
    p.kind = PatternKind::kTriShape;
    p.sink = e.integer(1, "sink", 0, kMaxSize);
    p.local = e.integer(2, "local", 1, kMaxSize);
    p.n_last = e.integer(3, "n_last", 0, kMaxSize);
  } else if (name == "block_sparse") {
    if (e.size() < 2 || e.size() > 4) e.bad_arity("[top_blocks(, _, score)]");
    p.kind = PatternKind::kBlockSparse;
    p.top_blocks = e.integer(1, "top_blocks", 1, kMaxSize);
  } else if (name == "grid_attn") {
    // [stride, hline, vline, slash, local, shift] or, as LongVILA's, with a section size before
    // the shift.
    if (e.size() != 7 && e.size() != 8)
      e.bad_arity("[stride, hline, vline, slash, local(, section), shift]");
    p.kind = PatternKind::kGrid;
    p.grid.stride = e.integer(1, "stride", 0, kMaxSize);
    p.grid.hline = e.boolean(2, "hline");
    p.grid.vline = e.boolean(3, "vline");
    if (e.boolean(4, "slash")) e.bad_arity("slash = false (grid slash lines are not implemented)");
    p.grid.local = e.integer(5, "local", 0, kMaxSize);
    p.grid.phase = e.integer(e.size() - 1, "shift", 0, std::max(0, p.grid.stride - 1));
  } else if (name == "shuffle_q" || name == "no_shuffle" || name == "2d_shuffle") {
    if (e.name(1) != "vs_attn" || e.size() != 4)
      e.bad_arity("[\"vs_attn\", vertical_size, slash_size]");
    p = vertical_slash(e, 2, false);
    if (name == "shuffle_q") p.boundary = BoundaryKind::kQ;
    if (name == "2d_shuffle") p.boundary = BoundaryKind::k2D;
  } else {
    e.unknown();
  }
  return p;
}

SparsePrefillConfig::Layer parse_layer(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, ": a layer must be an object of head -> pattern");
  SparsePrefillConfig::Layer layer;
  layer.given = true;
  for (const auto& [key, entry] : j.items()) {
    int head = -1;
    try {
      size_t used = 0;
      head = std::stoi(key, &used);
      if (used != key.size()) head = -1;
    } catch (const std::exception&) {
    }
    if (head < 0 || head > 4096)
      fail(where, ": head key '", key, "' must be an integer in [0, 4096]");
    if (entry.is_null()) continue;  // the published search writes null when nothing won
    const std::string at = where + " head " + key;
    if (static_cast<size_t>(head) >= layer.heads.size()) {
      layer.heads.resize(static_cast<size_t>(head) + 1, default_head());
      layer.head_given.resize(static_cast<size_t>(head) + 1, false);
    }
    layer.heads[static_cast<size_t>(head)] = parse_entry(EntryReader(entry, at));
    layer.head_given[static_cast<size_t>(head)] = true;
  }
  return layer;
}

}  // namespace

HeadPattern SparsePrefillConfig::pattern(int layer, int head) const {
  if (layer < 0 || static_cast<size_t>(layer) >= layers.size() ||
      !layers[static_cast<size_t>(layer)].given)
    return HeadPattern{};
  const Layer& l = layers[static_cast<size_t>(layer)];
  if (head < 0 || static_cast<size_t>(head) >= l.heads.size()) return default_head();
  return l.heads[static_cast<size_t>(head)];
}

SparsePrefillConfig parse_sparse_prefill_config(const nlohmann::json& j,
                                                const std::string& source) {
  SparsePrefillConfig c;
  if (j.is_array()) {  // MInference 1.0: one object per layer
    for (size_t l = 0; l < j.size(); ++l)
      c.layers.push_back(parse_layer(j[l], source + ": layer " + std::to_string(l)));
    return c;
  }
  if (!j.is_object())
    fail(source,
         ": a sparse prefill config is a list of layers (MInference) or an object of "
         "\"layer-N\" entries (MMInference)");
  for (const auto& [key, layer] : j.items()) {
    int l = -1;
    if (key.rfind("layer-", 0) == 0) try {
        size_t used = 0;
        l = std::stoi(key.substr(6), &used);
        if (used != key.size() - 6) l = -1;
      } catch (const std::exception&) {
      }
    if (l < 0 || l > 4096) fail(source, ": key '", key, "' must be layer-N with N in [0, 4096]");
    if (static_cast<size_t>(l) >= c.layers.size()) c.layers.resize(static_cast<size_t>(l) + 1);
    c.layers[static_cast<size_t>(l)] = parse_layer(layer, source + ": " + key);
  }
  return c;
}

SparsePrefillConfig load_sparse_prefill_config(const std::filesystem::path& path) {
  return parse_sparse_prefill_config(read_json_file(path), path.string());
}

namespace {

nlohmann::json entry_json(const HeadPattern& p) {
  using nlohmann::json;
  if (p.boundary == BoundaryKind::kQ)
    return json::array({"shuffle_q", "vs_attn", p.vertical, p.slash});
  if (p.boundary == BoundaryKind::k2D)
    return json::array({"2d_shuffle", "vs_attn", p.vertical, p.slash});
  switch (p.kind) {
    case PatternKind::kDense:
      return json::array({"dense"});
    case PatternKind::kAShape:
      return json::array({"stream_llm", p.sink, p.local});
    case PatternKind::kTriShape:
      if (p.n_last < 0) return json::array({"a_shape", p.sink, p.local});
      return json::array({"tri_shape", p.sink, p.local, p.n_last});
    case PatternKind::kVerticalSlash:
      return json::array({"vs_attn", p.vertical, p.slash, p.last_q});
    case PatternKind::kBlockSparse:
      return json::array({"block_sparse", p.top_blocks});
    case PatternKind::kGrid:
      return json::array({"grid_attn", p.grid.stride, p.grid.hline, p.grid.vline, false,
                          p.grid.local, p.grid.phase});
  }
  return json::array({"dense"});
}

}  // namespace

nlohmann::json sparse_prefill_config_json(const SparsePrefillConfig& config) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const auto& layer = config.layers[l];
    if (!layer.given) continue;
    nlohmann::json heads = nlohmann::json::object();
    for (size_t h = 0; h < layer.heads.size(); ++h)
      if (layer.head_given[h]) heads[std::to_string(h)] = entry_json(layer.heads[h]);
    out["layer-" + std::to_string(l)] = heads;
  }
  return out;
}

void save_sparse_prefill_config(const SparsePrefillConfig& config,
                                const std::filesystem::path& path) {
  std::ofstream f(path);
  if (!f) fail(path.string(), ": cannot open for writing");
  f << sparse_prefill_config_json(config).dump(1) << "\n";
  if (!f) fail(path.string(), ": write failed");
}

void check_config_fits(const SparsePrefillConfig& config, int layers, int heads,
                       const std::string& source) {
  for (size_t l = 0; l < config.layers.size(); ++l) {
    if (!config.layers[l].given) continue;
    if (static_cast<int>(l) >= layers)
      fail(source, ": layer-", l, " is past the model's ", layers, " layers");
    if (static_cast<int>(config.layers[l].heads.size()) > heads)
      fail(source, ": layer-", l, " head ", config.layers[l].heads.size() - 1,
           " is past the model's ", heads, " query heads");
  }
}

}  // namespace dllm
