#include "io/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/json_file.h"

namespace dllm {

namespace {

using json = nlohmann::json;

// Headers larger than this are refused, like the reference implementation does (100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Element sizes of every dtype the safetensors format defines. Tensors of dtypes we do not compute
// with are validated and listed but cannot be loaded as weights.
std::optional<size_t> element_size(std::string_view dtype) {
  static const std::map<std::string, size_t, std::less<>> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  if (it == sizes.end()) return std::nullopt;
  return it->second;
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

SafetensorsIndex parse_safetensors(const unsigned char* bytes, size_t size,
                                   const std::string& fname) {
  SafetensorsIndex index;
  auto& tensors = index.tensors;
  auto& metadata = index.metadata;
  if (size < 8) fail(fname, ": not a safetensors file (", size, " bytes, need at least 8)");
  const uint64_t header_len = read_u64_le(bytes);
  if (header_len > kMaxHeaderBytes)
    fail(fname, ": safetensors header length ", header_len, " is too large");
  if (header_len > size - 8)
    fail(fname, ": truncated: header claims ", header_len, " bytes but the file has only ",
         size - 8, " after the length field");
  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_len);
  const json header = parse_json_text(header_text, fname + " (safetensors header)");
  if (!header.is_object()) fail(fname, ": safetensors header is not a JSON object");

  const unsigned char* data_begin = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(fname, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(fname, ": __metadata__ value '", m.key(), "' is not a string");
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { fail(fname, ": tensor '", name, "': ", why); };
    if (!v.is_object()) bad("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-array 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      bad("'data_offsets' must be an array of two integers");

    TensorEntry t;
    t.name = name;
    t.file = fname;
    t.dtype_name = v["dtype"].get<std::string>();
    auto esize = element_size(t.dtype_name);
    if (!esize) bad("unknown dtype '" + t.dtype_name + "'");
    t.dtype = parse_dtype(t.dtype_name);

    // shape × element size, with overflow checks (a hostile header can claim any size).
    uint64_t bytes = *esize;
    bool overflow = false, has_zero = false;
    for (const json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        bad("shape entries must be non-negative integers");
      const int64_t dim = d.get<int64_t>();
      t.shape.push_back(dim);
      has_zero = has_zero || dim == 0;
      overflow = __builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes) || overflow;
    }
    if (overflow && !has_zero) bad("shape " + shape_string(t.shape) + " is too large");
    for (const json& o : v["data_offsets"])
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
        bad("'data_offsets' must be non-negative integers");
    const uint64_t begin = v["data_offsets"][0].get<uint64_t>();
    const uint64_t end = v["data_offsets"][1].get<uint64_t>();
    if (begin > end) bad(cat("data_offsets [", begin, ", ", end, "] are reversed"));
    if (end > data_size)
      bad(cat("data_offsets [", begin, ", ", end, "] run past the end of the data (", data_size,
              " bytes; file truncated?)"));
    if (has_zero) bytes = 0;
    if (bytes != end - begin)
      bad(cat("dtype ", t.dtype_name, " x shape ", shape_string(t.shape),
              " does not match its byte range of ", end - begin, " bytes"));
    t.data = data_begin + begin;
    t.nbytes = end - begin;
    tensors.push_back(std::move(t));
  }

  // Overlapping byte ranges would alias two tensors; refuse them.
  std::vector<const TensorEntry*> by_offset;
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorEntry* prev = by_offset[i - 1];
    if (prev->nbytes > 0 && by_offset[i]->nbytes > 0 &&
        prev->data + prev->nbytes > by_offset[i]->data)
      fail(fname, ": tensors '", prev->name, "' and '", by_offset[i]->name,
           "' have overlapping byte ranges");
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  return index;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  SafetensorsIndex index = parse_safetensors(file_.data(), file_.size(), file_.path());
  tensors_ = std::move(index.tensors);
  metadata_ = std::move(index.metadata);
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorEntry& t, std::string_view n) { return t.name < n; });
  return (it != tensors_.end() && it->name == name) ? &*it : nullptr;
}

TensorStore TensorStore::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  TensorStore store;
  store.source_ = path.string();
  auto add_file = [&](const fs::path& p) -> SafetensorsFile& {
    store.files_.push_back(std::make_unique<SafetensorsFile>(p));
    return *store.files_.back();
  };
  auto index_file = [&](const SafetensorsFile& f) {
    for (const auto& t : f.tensors()) {
      if (!store.by_name_.emplace(t.name, &t).second)
        fail(store.source_, ": tensor '", t.name, "' appears in more than one shard (", f.path(),
             ")");
    }
  };

  if (fs::is_regular_file(path)) {
    index_file(add_file(path));
    return store;
  }
  if (!fs::is_directory(path)) fail(path.string(), ": no such checkpoint file or directory");

  const fs::path index_path = path / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const json index = read_json_file(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path.string(), ": missing object 'weight_map'");
    std::map<std::string, SafetensorsFile*> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        fail(index_path.string(), ": weight_map['", it.key(), "'] is not a string");
      const std::string shard = it.value().get<std::string>();
      const fs::path rel(shard);
      bool escapes = rel.is_absolute() || shard.empty();
      for (const auto& part : rel) escapes = escapes || part == "..";
      if (escapes)
        fail(index_path.string(), ": shard name '", shard,
             "' must be a file inside the checkpoint");
      if (!shards.count(shard)) shards[shard] = &add_file(path / rel);
      if (!shards[shard]->find(it.key()))
        fail(index_path.string(), ": tensor '", it.key(), "' is mapped to ", shard,
             " but that shard does not hold it");
    }
    for (const auto& [_, f] : shards) index_file(*f);
    return store;
  }
  if (fs::exists(path / "model.safetensors")) {
    index_file(add_file(path / "model.safetensors"));
    return store;
  }
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path());
  if (found.size() == 1) {
    index_file(add_file(found[0]));
    return store;
  }
  if (found.empty()) fail(path.string(), ": no model.safetensors or model.safetensors.index.json");
  fail(path.string(),
       ": several .safetensors files but no model.safetensors.index.json to say how they fit");
}

const TensorEntry* TensorStore::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorEntry& TensorStore::get(std::string_view name) const {
  const TensorEntry* t = find(name);
  if (!t) fail(source_, ": missing tensor '", name, "'");
  return *t;
}

const TensorEntry* TensorStore::get_weight(std::string_view name,
                                           const std::vector<int64_t>& shape) const {
  const TensorEntry& t = get(name);
  if (t.shape != shape)
    fail(t.file, ": tensor '", name, "' has shape ", shape_string(t.shape), ", expected ",
         shape_string(shape), " from config.json");
  if (!t.dtype)
    fail(t.file, ": tensor '", name, "' has dtype ", t.dtype_name, "; supported: BF16, F16, F32");
  return &t;
}

std::vector<const TensorEntry*> TensorStore::all() const {
  std::vector<const TensorEntry*> out;
  for (const auto& [_, t] : by_name_) out.push_back(t);
  return out;
}

size_t TensorStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [_, t] : by_name_) n += t->nbytes;
  return n;
}

void TensorStore::add_owned(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<unsigned char> bytes) {
  const size_t nbytes = bytes.size();
  add_in_memory(std::move(name), dtype, std::move(shape), std::move(bytes), nullptr, nbytes);
}

void TensorStore::add_view(std::string name, DType dtype, std::vector<int64_t> shape,
                           const unsigned char* data, std::shared_ptr<const void> owner) {
  const size_t nbytes = static_cast<size_t>(HostTensor::count(shape)) * dtype_size(dtype);
  add_in_memory(std::move(name), dtype, std::move(shape), {}, data, nbytes);
  if (owner) view_owners_.push_back(std::move(owner));
}

void TensorStore::add_in_memory(std::string name, DType dtype, std::vector<int64_t> shape,
                                std::vector<unsigned char> owned_bytes, const unsigned char* data,
                                size_t nbytes) {
  auto owned = std::make_unique<std::pair<TensorEntry, std::vector<unsigned char>>>();
  TensorEntry& t = owned->first;
  t.name = std::move(name);
  t.dtype = dtype;
  t.dtype_name = std::string(dtype_name(dtype));
  t.shape = std::move(shape);
  if (static_cast<size_t>(t.numel()) * dtype_size(dtype) != nbytes)
    fail("in-memory tensor '", t.name, "': ", nbytes, " bytes do not match shape ",
         shape_string(t.shape));
  owned->second = std::move(owned_bytes);
  t.data = owned->second.empty() ? data : owned->second.data();
  t.nbytes = nbytes;
  t.file = "<memory>";
  if (!by_name_.emplace(t.name, &t).second) fail("in-memory tensor '", t.name, "' added twice");
  owned_.push_back(std::move(owned));
}

HostTensor TensorStore::load_f32(std::string_view name,
                                 const std::vector<int64_t>& expected_shape) const {
  return to_f32(get_weight(name, expected_shape));
}

HostTensor to_f32(const TensorEntry* t) {
  if (!t) return {};
  HostTensor out(t->shape);
  convert_to_f32(*t->dtype, t->data, out.ptr(), static_cast<size_t>(t->numel()));
  return out;
}

}  // namespace dllm
