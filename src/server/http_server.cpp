#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "server/auth.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "server/server_context.h"

namespace dllm::server {

namespace {

// cpp-httplib listens with a backlog of 5: a burst of clients connecting at once (a load
// generator's 128) would wait for SYN retransmits. Linux lets listen() on the bound socket set a
// larger backlog.
class Listener : public httplib::Server {
 public:
  void widen_backlog(int backlog) { ::listen(svr_sock_, backlog); }
};

const char* status_type(int status) {
  switch (status) {
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 405:
      return "method_not_allowed";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& engine, const ServerOptions& o) : ctx(engine, o) {}
  ServerContext ctx;
  Listener http;
  std::once_flag shutdown_once;

  void configure();
  void add_routes();
};

void HttpServer::Impl::configure() {
  const ServerOptions& o = ctx.options;
  // One worker per connection: enough for every request that may be admitted, plus a few for
  // /metrics, /health and refusals while the server is full.
  const size_t threads =
      o.threads > 0 ? size_t(o.threads)
                    : size_t(std::clamp<int64_t>(o.max_running + o.max_queued + 32, 8, 4096));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(o.max_body_bytes);
  http.set_read_timeout(30);
  http.set_write_timeout(30);
  http.set_keep_alive_max_count(1000);
  http.set_tcp_nodelay(true);  // SSE chunks are small: send each at once
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (ctx.options.api_key.empty() || !path_needs_key(req.path) ||
        key_matches(req.get_header_value("Authorization"), ctx.options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, ApiError(401, "authentication_error", "",
                             "invalid or missing API key (send \"Authorization: Bearer KEY\")"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors the library produces itself (unknown path, body too large, bad request line) get
  // an OpenAI-style body too.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return;
    std::string message = cat("HTTP ", res.status, " for ", req.method, " ", req.path);
    if (res.status == 404) message = cat("no route for ", req.method, " ", req.path);
    if (res.status == 413)
      message = cat("the request body is larger than ", ctx.options.max_body_bytes,
                    " bytes (--max-body-mib)");
    // cpp-httplib parses form-encoded bodies itself and refuses those over 8 KiB with a 413:
    // curl -d sends JSON as a form unless told otherwise.
    if (res.status == 413 &&
        req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded"))
      message =
          "the request body was sent as application/x-www-form-urlencoded, which is "
          "limited to 8 KiB; send JSON with \"Content-Type: application/json\"";
    send_json(res, res.status,
              error_body(ApiError(res.status, status_type(res.status), "", message)));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, "server_error", "", what));
      });
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    ctx.metrics.http_response(res.status);
  });
}

void HttpServer::Impl::add_routes() {
  using Req = httplib::Request;
  using Res = httplib::Response;
  http.Post("/v1/completions", [this](const Req& req, Res& res) {
    guarded(res, [&] { handle_generation(ctx, Endpoint::completions, req, res); });
  });
  http.Post("/v1/chat/completions", [this](const Req& req, Res& res) {
    guarded(res, [&] { handle_generation(ctx, Endpoint::chat, req, res); });
  });
  http.Get("/v1/models", [this](const Req&, Res& res) { handle_models(ctx, res); });
  http.Get("/health", [this](const Req&, Res& res) { handle_health(ctx, res); });
  http.Get("/metrics", [this](const Req&, Res& res) { handle_metrics(ctx, res); });
  http.Post("/tokenize", [this](const Req& req, Res& res) {
    guarded(res, [&] { handle_tokenize(ctx, req, res); });
  });
  http.Post("/detokenize", [this](const Req& req, Res& res) {
    guarded(res, [&] { handle_detokenize(ctx, req, res); });
  });
}

HttpServer::HttpServer(Engine& engine, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(engine, options)) {
  if (options.max_queued < 0) fail("--max-queued must be >= 0 (got ", options.max_queued, ")");
  if (options.port < 0 || options.port > 65535)
    fail("--port must be in [0, 65535] (got ", options.port, ")");
  impl_->configure();
  impl_->add_routes();
}

HttpServer::~HttpServer() {
  shutdown();
}

int HttpServer::bind() {
  const ServerOptions& o = impl_->ctx.options;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) fail("cannot listen on ", o.host, " (any port)");
  } else if (!impl_->http.bind_to_port(o.host, port)) {
    fail("cannot listen on ", o.host, ":", port, " (in use, or not an address of this machine)");
  }
  impl_->http.widen_backlog(1024);
  return port;
}

void HttpServer::run() {
  impl_->http.listen_after_bind();
}

void HttpServer::shutdown() {
  std::call_once(impl_->shutdown_once, [this] {
    ServerContext& ctx = impl_->ctx;
    const auto grace = std::chrono::duration<double>(ctx.options.shutdown_grace_seconds);
    ctx.admission.drain(ctx.engine,
                        std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(grace));
    // Let the responses of cancelled requests write their last chunk before connections close.
    for (int i = 0; i < 500 && ctx.open_responses > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    impl_->http.stop();
  });
}

ServerContext& HttpServer::context() {
  return impl_->ctx;
}

}  // namespace dllm::server
