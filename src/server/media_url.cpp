#include "server/media_url.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "io/regular_file.h"
#include "server/api_error.h"
#include "server/base64.h"

namespace dllm::server {

namespace {

namespace fs = std::filesystem;

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

// What the messages say for each kind of media.
struct KindWords {
  const char* noun;       // "image"
  const char* type;       // the data: URL's media type prefix, "image/"
  const char* example;    // "data:image/png;base64,..."
  const char* types;      // examples of accepted media types
  const char* size_flag;  // "--max-image-mib"
};

KindWords words(MediaKind kind) {
  if (kind == MediaKind::video)
    return {"video", "video/", "data:video/mp4;base64,...", "video/mp4, video/webm",
            "--max-video-mib"};
  return {"image", "image/", "data:image/png;base64,...", "image/png, image/jpeg",
          "--max-image-mib"};
}

size_t max_bytes(MediaKind kind, const MediaUrlPolicy& p) {
  return kind == MediaKind::video ? p.max_video_bytes : p.max_image_bytes;
}

void check_size(size_t bytes, MediaKind kind, const std::string& where, const MediaUrlPolicy& p) {
  const KindWords w = words(kind);
  const size_t limit = max_bytes(kind, p);
  if (bytes == 0) bad_request(where, cat("'", where, "' holds an empty ", w.noun));
  if (bytes > limit)
    bad_request(where, cat("'", where, "' is ", kind == MediaKind::video ? "a " : "an ", w.noun,
                           " of ", bytes, " bytes; accepted are 1 to ", limit, " bytes (",
                           w.size_flag, " ", double(limit) / double(1 << 20), ")"));
}

// data:[<media type>][;<parameter>]*;base64,<data>
std::string data_url_bytes(std::string_view url, MediaKind kind, const std::string& where,
                           const MediaUrlPolicy& p) {
  const KindWords w = words(kind);
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos)
    bad_request(where, cat("'", where, "' is a data: URL without the ',' before its data"));
  const std::string_view header = url.substr(5, comma - 5), data = url.substr(comma + 1);
  if (!starts_with_nocase(header, w.type))
    bad_request(where, cat("'", where, "' is a data: URL of media type '",
                           header.substr(0, header.find(';')), "'; ",
                           kind == MediaKind::video ? "a " : "an ", w.type, "... type (", w.types,
                           ") is expected"));
  const size_t last = header.rfind(';');
  if (last == std::string_view::npos || header.substr(last + 1) != "base64")
    bad_request(where, cat("'", where, "' must be a base64 data: URL (", w.example, ")"));
  // The size limit before the work of decoding; an empty item after it (bad data says so first).
  if (const size_t n = base64_decoded_size(data); n > max_bytes(kind, p))
    check_size(n, kind, where, p);
  std::string bytes;
  try {
    bytes = base64_decode(data);
  } catch (const Error& e) {
    bad_request(where, cat("'", where, "' has invalid base64 data: ", e.what()));
  }
  check_size(bytes.size(), kind, where, p);
  return bytes;
}

// %XX escapes of a file: URL's path.
std::string percent_decode(std::string_view s, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [&](size_t k) -> int {
      if (k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[k])))
        bad_request(where, cat("'", where, "' has a bad %-escape at offset ", i));
      return std::isdigit(static_cast<unsigned char>(s[k])) ? s[k] - '0'
                                                            : (std::tolower(s[k]) - 'a' + 10);
    };
    out += static_cast<char>(hex(i + 1) * 16 + hex(i + 2));
    i += 2;
  }
  if (out.find('\0') != std::string::npos)
    bad_request(where, cat("'", where, "' names a path with a NUL byte"));
  return out;
}

bool is_under(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q)
    if (r->empty()) continue;  // a trailing separator's empty element
    else if (q == p.end() || *q != *r) return false;
  return true;
}

// file:///absolute/path (host empty or "localhost"), under the allowed directory.
std::string file_url_bytes(std::string_view url, MediaKind kind, const std::string& where,
                           const MediaUrlPolicy& p) {
  if (p.allowed_local_media_path.empty())
    bad_request(where, cat("'", where,
                           "' is a file: URL, which this server does not read (start it with "
                           "--allowed-local-media-path DIR to allow files under DIR); send the ",
                           words(kind).noun, " as a data:", words(kind).type, "...;base64 URL"));
  std::string_view rest = url.substr(7);  // after "file://"
  if (starts_with_nocase(rest, "localhost/")) rest.remove_prefix(9);
  if (rest.empty() || rest[0] != '/')
    bad_request(where, cat("'", where, "' must be file:///absolute/path (no host)"));
  const fs::path path = fs::path(percent_decode(rest, where)).lexically_normal();
  const fs::path root(p.allowed_local_media_path);
  auto outside = [&] {
    bad_request(where, cat("'", where, "' names a file outside the allowed directory ",
                           p.allowed_local_media_path, " (--allowed-local-media-path)"));
  };
  if (!is_under(path, root)) outside();  // before touching the file system
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) bad_request(where, cat("'", where, "': cannot open ", path.string(), ": ", ec.message()));
  if (!is_under(real, root)) outside();  // a symbolic link leading out
  try {
    const RegularFile file(real);
    check_size(file.size(), kind, where, p);
    return file.read_all();
  } catch (const Error& e) {
    bad_request(where, cat("'", where, "': ", e.what()));
  }
}

}  // namespace

MediaBytes media_from_url(MediaKind kind, const std::string& url, const std::string& where,
                          const MediaUrlPolicy& policy) {
  const KindWords w = words(kind);
  MediaBytes out;
  out.name = where;
  if (starts_with_nocase(url, "data:")) {
    out.data = data_url_bytes(url, kind, where, policy);
  } else if (starts_with_nocase(url, "file://")) {
    out.data = file_url_bytes(url, kind, where, policy);
  } else if (starts_with_nocase(url, "http://") || starts_with_nocase(url, "https://")) {
    bad_request(where, cat("'", where,
                           "' is an http(s) URL; this server fetches nothing from the network: "
                           "send the ",
                           w.noun, " inline as a data:", w.type, "...;base64 URL"));
  } else {
    bad_request(where, cat("'", where, "' has an unsupported URL (",
                           url.substr(0, std::min<size_t>(url.size(), 24)),
                           "...); accepted are data:", w.type, "...;base64 URLs",
                           policy.allowed_local_media_path.empty() ? "" : " and file:// paths"));
  }
  return out;
}

std::string canonical_media_root(const std::string& dir) {
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) fail("--allowed-local-media-path ", dir, ": ", ec.message());
  if (!fs::is_directory(root)) fail("--allowed-local-media-path ", dir, ": not a directory");
  return root.string();
}

}  // namespace dllm::server
