#pragma once
// AMQP 0-9-1 (RabbitMQ): an exchange and a queue of the run's own on the broker at --amqp; its
// confirm is the broker's, so the drain waits for the consumer.

#include <string>

#include <outbox/amqp/amqp.hpp>

#include "../args.hpp"
#include "../concepts.hpp"

namespace fault_harness {

struct amqp_kind {
  static constexpr const char* name = "amqp";
  /// Its broker: --amqp URL (amqp://), default OUTBOX_TEST_AMQP.
  static constexpr const char* server_flag = "amqp";
  static constexpr const char* server_env = "OUTBOX_TEST_AMQP";
  static constexpr const char* server_form = "URL";
  /// The confirm is the broker's: published is not applied, the drain waits for the consumer.
  static constexpr bool confirm_is_applied = false;
  /// What --broker-outages can do (rabbitmqctl, or the commands given).
  static constexpr const char* outages = "close-connections,node-restart";
  /// The scripts/services.sh node whose rabbitmqctl the default outage commands use.
  static constexpr bool services_rabbitmq = true;
  static const char* missing(const args& a) {
    return a.address(server_flag).empty() ? "AMQP (--amqp or OUTBOX_TEST_AMQP)" : nullptr;
  }
  /// One consumer on the queue, whatever the relays: with several, a later event of an
  /// aggregate may be applied first (adapters/amqp/README.md).
  static int consumers(const args&) { return 1; }
  /// A header name over AMQP's 255-byte short string: the publisher fails it `permanent`
  /// before any byte is sent, and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) { e.headers.emplace(std::string(300, 'h'), "x"); }
  static std::string exchange(const args& a) { return "outbox-faults-" + a.run; }
  static std::string queue(const args& a) { return "outbox-faults-q-" + a.run; }
  static outbox::amqp::publisher publisher(const args& a) {
    return outbox::amqp::publisher(
        {.connection = {.url = a.address(server_flag)}, .exchange = exchange(a)});
  }
  /// Declares the run's queue (durable) and binds it; prefetch 1 with one consumer: strict
  /// per-aggregate order (adapters/amqp/README.md).
  static outbox::amqp::receiver receiver(const args& a) {
    return outbox::amqp::receiver({.connection = {.url = a.address(server_flag)},
                                   .queue = queue(a),
                                   .exchange = exchange(a),
                                   .prefetch = 1});
  }
  /// Messages ready in the run's queue (a passive queue.declare), for a run that lost events.
  static long long backlog(const args& a) {
    outbox::amqp::connection conn(outbox::amqp::connection_options{.url = a.address(server_flag)});
    conn.ensure();
    const auto* ok =
        amqp_queue_declare(conn.state(), outbox::amqp::connection::channel,
                           outbox::amqp::bytes(queue(a)), 1, 0, 0, 0, amqp_empty_table);
    conn.check(amqp_get_rpc_reply(conn.state()), "queue.declare (passive)");
    return ok != nullptr ? ok->message_count : -1;
  }
  /// Deletes the run's queue and exchange (best effort: the caller reports a failure).
  static void drop(const args& a) {
    outbox::amqp::connection conn(outbox::amqp::connection_options{.url = a.address(server_flag)});
    conn.ensure();
    amqp_queue_delete(conn.state(), outbox::amqp::connection::channel,
                      outbox::amqp::bytes(queue(a)), 0, 0);
    conn.check(amqp_get_rpc_reply(conn.state()), "queue.delete");
    amqp_exchange_delete(conn.state(), outbox::amqp::connection::channel,
                         outbox::amqp::bytes(exchange(a)), 0);
    conn.check(amqp_get_rpc_reply(conn.state()), "exchange.delete");
  }
};
static_assert(transport_kind<amqp_kind>);

}  // namespace fault_harness
