#pragma once
// A fresh exchange bound to a fresh durable queue on the benchmark's broker, for one run:
// declared on construction, deleted on destruction.

#include <exception>
#include <iostream>
#include <string>
#include <utility>

#include <outbox/amqp/amqp.hpp>
#include <outbox/uuid.hpp>

namespace outbox::bench {

class amqp_scratch {
 public:
  /// Declares `<prefix>-<uuid>` (a topic exchange) and `<that>-q` bound to it with `#`.
  amqp_scratch(std::string url, const std::string& prefix)
      : url_(std::move(url)),
        exchange_(prefix + "-" + outbox::make_uuid_v7().to_string()),
        queue_(exchange_ + "-q") {
    outbox::amqp::receiver binder(
        {.connection = {.url = url_}, .queue = queue_, .exchange = exchange_});
    binder.connect();
  }
  amqp_scratch(const amqp_scratch&) = delete;
  amqp_scratch& operator=(const amqp_scratch&) = delete;

  ~amqp_scratch() {
    try {
      outbox::amqp::connection c({.url = url_});
      c.ensure();
      amqp_queue_delete(c.state(), outbox::amqp::connection::channel, outbox::amqp::bytes(queue_),
                        0, 0);
      c.check(amqp_get_rpc_reply(c.state()), "queue.delete");
      amqp_exchange_delete(c.state(), outbox::amqp::connection::channel,
                           outbox::amqp::bytes(exchange_), 0);
      c.check(amqp_get_rpc_reply(c.state()), "exchange.delete");
    } catch (const std::exception& e) {
      std::cerr << "bench: could not delete " << queue_ << " / " << exchange_ << ": " << e.what()
                << "\n";
    }
  }

  /// Empties the queue (so that every run meets the broker in the same state).
  void purge() const {
    outbox::amqp::connection c({.url = url_});
    c.ensure();
    amqp_queue_purge(c.state(), outbox::amqp::connection::channel, outbox::amqp::bytes(queue_));
    c.check(amqp_get_rpc_reply(c.state()), "queue.purge");
  }

  [[nodiscard]] const std::string& url() const noexcept { return url_; }
  [[nodiscard]] const std::string& exchange() const noexcept { return exchange_; }
  [[nodiscard]] const std::string& queue() const noexcept { return queue_; }

 private:
  std::string url_, exchange_, queue_;
};

}  // namespace outbox::bench
