#pragma once
// A small HTTP/1.1 server for `outbox relay`'s /metrics and /healthz (Boost.Beast, on a thread of
// its own). GET and HEAD only; one request per connection; a client that has not sent its
// request header within 2 s is dropped, and one that has not read its answer within 5 s too.
// When all 32 slots are taken and another client connects, the oldest connection that has not
// sent its request gives its slot up, or else the oldest whose answer is still being written
// (a client that does not read): a flood of either kind cannot keep a probe out. At most 128
// connections wait to be accepted (the listen backlog).

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace outbox_tool {

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body{};
  /// When set, served instead of `body`, without a copy (a page cached for many answers).
  std::shared_ptr<const std::string> shared_body{};
};

class http_server {
 public:
  using handler = std::function<http_response(std::string_view path)>;

  /// Listens on `address`:`port` (port 0: one the system picks, see `port()`) and serves
  /// `handle` from a thread of its own until destroyed.
  /// @throws std::system_error when the address cannot be bound (in use, not local).
  http_server(const std::string& address, unsigned short port, handler handle);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The port it listens on.
  [[nodiscard]] unsigned short port() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace outbox_tool
