#include "http_server.hpp"

#include <atomic>
#include <chrono>
#include <list>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace outbox_tool {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// Connections open at once, at most, so that a flood of them cannot take the file descriptors
/// the relays need to reconnect. When all are open, a new one takes the slot of the oldest that
/// has not sent its request yet (see `impl::accept`).
constexpr int max_connections = 32;

/// How long a connection may take to send its request header. A scraper or a probe sends it
/// at once after connecting (a round trip on loopback or a private network): 2 s is ample for
/// them, and bounds how long a client that sends nothing, or a byte at a time, holds a slot.
constexpr auto header_timeout = std::chrono::seconds(2);

class session;
/// The connections still reading their request header, the oldest first.
using waiting_list = std::list<session*>;

/// One connection: read a request's header, answer it, close. A body is not read (nothing
/// here takes one: a request with one gets 405). Runs on the server's one thread, as the
/// acceptor does: `waiting` and `live` need no lock.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, const http_server::handler& handle, std::atomic<int>& live,
          waiting_list& waiting)
      : stream_(std::move(socket)), handle_(handle), live_(live), waiting_(waiting) {
    ++live_;
    parser_.header_limit(8 * 1024);
  }
  ~session() {
    stop_waiting();
    release();
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void start() {
    place_ = waiting_.insert(waiting_.end(), this);
    waiting_now_ = true;
    stream_.expires_after(header_timeout);
    http::async_read_header(stream_, buffer_, parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              self->stop_waiting();
                              if (!ec && self->counted_) self->answer();
                            });
  }

  /// Closes the connection (it has not sent its request yet) and frees its slot at once: its
  /// read ends with an error, and the session with it.
  void evict() {
    stop_waiting();
    stream_.close();  // the socket, and its timer
    release();
  }

 private:
  void stop_waiting() {
    if (!waiting_now_) return;
    waiting_.erase(place_);
    waiting_now_ = false;
  }
  void release() {
    if (counted_) --live_;
    counted_ = false;
  }

  void answer() {
    const auto& request_ = parser_.get();
    response_.version(request_.version());
    response_.keep_alive(false);
    response_.set(http::field::server, "outbox");
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
      response_.set(http::field::content_type, "text/plain; charset=utf-8");
      response_.body() = "GET or HEAD\n";
    } else {
      std::string_view target(request_.target().data(), request_.target().size());
      target = target.substr(0, target.find('?'));
      http_response r;
      try {
        r = handle_(target);
      } catch (const std::exception& e) {
        r = http_response{500, "text/plain; charset=utf-8", std::string(e.what()) + "\n"};
      }
      response_.result(static_cast<unsigned>(r.status));
      response_.set(http::field::content_type, r.content_type);
      if (request_.method() != http::verb::head) {
        response_.body() = std::move(r.body);
      } else {
        head_length_ = r.body.size();  // a HEAD answer has the GET answer's Content-Length
      }
    }
    response_.prepare_payload();
    if (head_length_) response_.content_length(*head_length_);
    stream_.expires_after(std::chrono::seconds(5));
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code, std::size_t) {
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      });
  }

  beast::tcp_stream stream_;
  const http_server::handler& handle_;
  std::atomic<int>& live_;
  waiting_list& waiting_;
  waiting_list::iterator place_;  ///< Its entry in `waiting_`, while `waiting_now_`.
  bool waiting_now_ = false;      ///< Reading its request header.
  bool counted_ = true;           ///< Its socket is open and counted in `live_`.
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> response_;
  std::optional<std::size_t> head_length_;
};

}  // namespace

struct http_server::impl {
  impl(const std::string& address, unsigned short port, handler h)
      : handle(std::move(h)), acceptor(ioc) {
    const tcp::endpoint at(asio::ip::make_address(address), port);
    acceptor.open(at.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(at);
    acceptor.listen();
    accept();
    thread = std::thread([this] { ioc.run(); });
  }
  ~impl() {
    ioc.stop();
    if (thread.joinable()) thread.join();
  }

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (!acceptor.is_open()) return;
      if (ec) {
        // Out of file descriptors (EMFILE), or a connection reset before it was taken: pause
        // rather than spin on the error, then accept again.
        pause.expires_after(std::chrono::milliseconds(100));
        pause.async_wait([this](beast::error_code) { accept(); });
        return;
      }
      // All slots taken: the oldest connection that has not sent its request gives its slot
      // up (a client holding idle connections cannot keep probes and scrapes out); if every
      // one is being answered, the new one is turned away.
      if (live.load() >= max_connections && !waiting.empty()) waiting.front()->evict();
      if (live.load() < max_connections) {
        std::make_shared<session>(std::move(s), handle, live, waiting)->start();
      } else {
        beast::error_code ignored;
        s.close(ignored);
      }
      accept();
    });
  }

  // The sessions left in `ioc` at its destruction use `handle`, `live` and `waiting`: declared
  // before it.
  handler handle;
  std::atomic<int> live{0};
  waiting_list waiting;
  asio::io_context ioc{1};
  tcp::acceptor acceptor;
  asio::steady_timer pause{ioc};
  std::thread thread;
};

http_server::http_server(const std::string& address, unsigned short port, handler handle)
    : impl_(std::make_unique<impl>(address, port, std::move(handle))) {}

http_server::~http_server() = default;

unsigned short http_server::port() const noexcept {
  return impl_->acceptor.local_endpoint().port();
}

}  // namespace outbox_tool
