#include "io/npy.h"

#include <cstring>
#include <fstream>
#include <limits>
#include <regex>

#include "core/error.h"
#include "core/host_tensor.h"
#include "io/json_file.h"

namespace dllm {

void write_npy_f32(const std::filesystem::path& path, std::span<const float> data,
                   const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  // Pad with spaces so that magic(6) + version(2) + len(2) + header ends on a 64-byte boundary.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(path.string(), ": cannot open for writing");
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  const uint16_t hlen = static_cast<uint16_t>(dict.size());
  const char lenbytes[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  out.write(lenbytes, 2);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size_bytes()));
  if (!out) fail(path.string(), ": write failed");
}

NpyArray read_npy(const std::filesystem::path& path) {
  // Logits dumps may be large; only the regular-file check applies.
  const std::string bytes = read_text_file(path, std::numeric_limits<size_t>::max());
  const std::string name = path.string();
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    fail(name, ": not a .npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(bytes[8]) |
           (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    hstart = 10;
  } else {
    if (bytes.size() < 12) fail(name, ": truncated .npy header");
    hlen = 0;
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(bytes[8 + i]);
    hstart = 12;
  }
  if (hstart + hlen > bytes.size()) fail(name, ": truncated .npy header");
  const std::string header = bytes.substr(hstart, hlen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<|=]?[a-z][0-9])'")))
    fail(name, ": no descr");
  const std::string descr = m[1];
  if (header.find("'fortran_order': False") == std::string::npos)
    fail(name, ": only C-order arrays are supported");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    fail(name, ": no shape");
  NpyArray arr;
  const std::string dims = m[1];
  std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator();
       ++it)
    arr.shape.push_back(std::stoll(it->str()));
  const int64_t n = HostTensor::count(arr.shape);
  const char* data = bytes.data() + hstart + hlen;
  const size_t avail = bytes.size() - hstart - hlen;
  auto need = [&](size_t esize) {
    if (avail < static_cast<size_t>(n) * esize) fail(name, ": truncated data");
  };
  if (descr == "<f4") {
    need(4);
    arr.f32.resize(static_cast<size_t>(n));
    std::memcpy(arr.f32.data(), data, static_cast<size_t>(n) * 4);
  } else if (descr == "<i4" || descr == "<i8") {
    const size_t esize = descr == "<i4" ? 4 : 8;
    need(esize);
    arr.is_float = false;
    arr.i32.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = 0;
      if (esize == 4) {
        int32_t t;
        std::memcpy(&t, data + i * 4, 4);
        v = t;
      } else {
        std::memcpy(&v, data + i * 8, 8);
      }
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        fail(name, ": value out of int32 range");
      arr.i32[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
  } else {
    fail(name, ": unsupported dtype ", descr, " (need <f4, <i4 or <i8)");
  }
  return arr;
}

}  // namespace dllm
