#include "server/http_util.h"

#include "io/json_file.h"

namespace dllm::server {

Json parse_body(const httplib::Request& req) {
  try {
    return parse_json_text<Json>(req.body, "request body");
  } catch (const Error& e) {
    bad_request("", e.what());
  }
}

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_body(e));
}

}  // namespace dllm::server
