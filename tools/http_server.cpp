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
/// has not sent its request yet, or else of the oldest still being answered (see `impl::accept`).
constexpr int max_connections = 32;

/// Connections the kernel queues for accepting, at most (beyond them a connection is refused or
/// retried by its client): a flood cannot queue thousands that would each be accepted and
/// answered long after their clients left.
constexpr int listen_backlog = 128;

/// How long a connection may take to send its request header. A scraper or a probe sends it
/// at once after connecting (a round trip on loopback or a private network): 2 s is ample for
/// them, and bounds how long a client that sends nothing, or a byte at a time, holds a slot.
constexpr auto header_timeout = std::chrono::seconds(2);

/// How long an answer may take to be written (to a client that reads slowly, or not at all).
constexpr auto write_timeout = std::chrono::seconds(5);

class session;
/// Sessions in one phase (reading their request header, or writing their answer), the oldest
/// first.
using session_list = std::list<session*>;

/// One connection: read a request's header, answer it, close. A body is not read (nothing
/// here takes one: a request with one gets 405). Runs on the server's one thread, as the
/// acceptor does: `waiting`, `writing` and `live` need no lock.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, const http_server::handler& handle, std::atomic<int>& live,
          session_list& waiting, session_list& writing)
      : stream_(std::move(socket)),
        handle_(handle),
        live_(live),
        waiting_(waiting),
        writing_(writing) {
    ++live_;
    parser_.header_limit(8 * 1024);
  }
  ~session() {
    leave();
    release();
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void start() {
    enter(waiting_);
    stream_.expires_after(header_timeout);
    http::async_read_header(stream_, buffer_, parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              self->leave();
                              if (!ec && self->counted_) self->answer();
                            });
  }

  /// Closes the connection (it has not sent its request yet, or is not reading its answer) and
  /// frees its slot at once: its read or write ends with an error, and the session with it.
  void evict() {
    leave();
    stream_.close();  // the socket, and its timer
    release();
  }

 private:
  void enter(session_list& list) {
    leave();
    list_ = &list;
    place_ = list.insert(list.end(), this);
  }
  void leave() {
    if (list_ == nullptr) return;
    list_->erase(place_);
    list_ = nullptr;
  }
  void release() {
    if (counted_) --live_;
    counted_ = false;
  }

  void answer() {
    const auto& request_ = parser_.get();
    std::string refusal;
    response_.version(request_.version());
    response_.keep_alive(false);
    response_.set(http::field::server, "outbox");
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
      response_.set(http::field::content_type, "text/plain; charset=utf-8");
      refusal = "GET or HEAD\n";
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
      body_ = r.shared_body ? std::move(r.shared_body)
                            : std::make_shared<const std::string>(std::move(r.body));
      if (request_.method() != http::verb::head) {
        response_.body() = {body_->data(), body_->size()};
      } else {
        head_length_ = body_->size();  // a HEAD answer has the GET answer's Content-Length
      }
    }
    if (!body_) {
      body_ = std::make_shared<const std::string>(std::move(refusal));
      response_.body() = {body_->data(), body_->size()};
    }
    response_.prepare_payload();
    if (head_length_) response_.content_length(*head_length_);
    enter(writing_);
    stream_.expires_after(write_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->leave();
                        if (ec) return;
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      });
  }

  beast::tcp_stream stream_;
  const http_server::handler& handle_;
  std::atomic<int>& live_;
  session_list& waiting_;
  session_list& writing_;
  session_list* list_ = nullptr;  ///< `waiting_` or `writing_` while it is in one, or none.
  session_list::iterator place_;  ///< Its entry in `*list_`.
  bool counted_ = true;           ///< Its socket is open and counted in `live_`.
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  /// The answer's body: shared (a cached /metrics page is written without a copy), kept alive
  /// by the session while `response_` points into it.
  std::shared_ptr<const std::string> body_;
  http::response<http::span_body<const char>> response_;
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
    acceptor.listen(listen_backlog);
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
      // up (a client holding idle connections cannot keep probes and scrapes out), or else the
      // oldest whose answer is still being written (a client that does not read it cannot
      // either); a slot is left in neither phase only for the moment its answer is made.
      if (live.load() >= max_connections) {
        if (!waiting.empty())
          waiting.front()->evict();
        else if (!writing.empty())
          writing.front()->evict();
      }
      if (live.load() < max_connections) {
        std::make_shared<session>(std::move(s), handle, live, waiting, writing)->start();
      } else {
        beast::error_code ignored;
        s.close(ignored);
      }
      accept();
    });
  }

  // The sessions left in `ioc` at its destruction use `handle`, `live`, `waiting` and
  // `writing`: declared before it.
  handler handle;
  std::atomic<int> live{0};
  session_list waiting;
  session_list writing;
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
