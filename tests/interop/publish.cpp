// The C++ side of the interop test (tests/interop/interop_test.sh): events with a W3C trace
// context (set as `event::trace`, as the headers traceparent/tracestate and by
// `writer_options::trace_provider`; one without) written through the outbox writer (in-memory
// store), relayed to RabbitMQ and to Kafka, left there for another implementation (consume.mjs,
// OpenTelemetry JS) to read. It prints
//   amqp-exchange NAME / amqp-queue NAME / kafka-bootstrap HOST:PORT / kafka-topic NAME
//   expect TRANSPORT EVENT_ID TRACE_ID SPAN_ID FLAGS TRACESTATE   (one per event; - for none)
//   ce-amqp-queue NAME / ce-kafka-topic NAME    (CloudEvents, both modes, read by cloudevents.mjs)
//   ce-expect TRANSPORT MODE ID TYPE SOURCE SUBJECT TIME DATA_HEX   (one per CloudEvent)
//   ready
// then serves until SIGINT or SIGTERM: it holds the Kafka mock cluster (librdkafka's, in this
// process, when no bootstrap servers are given) and, on the signal, deletes its queue and
// exchange from the broker.
//
//   interop_publish AMQP_URL [KAFKA_BOOTSTRAP_SERVERS]

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <outbox/amqp/amqp.hpp>
#include <outbox/kafka/kafka.hpp>
#include <outbox/outbox.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_store.hpp>

namespace {

using namespace outbox::testing;
using namespace std::chrono_literals;

volatile std::sig_atomic_t stopping = 0;
void on_signal(int) { stopping = 1; }

std::string random_hex(std::mt19937_64& rng, std::size_t digits) {
  std::string out;
  while (out.size() < digits) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
    out += buf;
  }
  out.resize(digits);
  return out;
}

/// How an event gets its context: `event::trace`, the hand-set headers (the same on the wire),
/// `writer_options::trace_provider`, or not at all.
enum class set_by { field, headers, provider, none };

/// One event and the context it carries (all empty: none).
struct traced {
  set_by how;
  std::string trace_id, span_id, flags, tracestate;

  [[nodiscard]] outbox::trace_context context() const {
    return {.traceparent = "00-" + trace_id + "-" + span_id + "-" + flags,
            .tracestate = tracestate};
  }
};

/// The events each transport gets: contexts with and without a tracestate, sampled and not, set
/// each way the writer takes one, and an event with no context at all (the reader must extract
/// none).
std::vector<traced> contexts(std::mt19937_64& rng) {
  const auto id = [&](std::size_t digits) { return random_hex(rng, digits); };
  return {
      {set_by::field, id(32), id(16), "01", "outbox=t61rcWkgMzE,congo=ucfJifl5GOE"},
      {set_by::field, id(32), id(16), "00", ""},
      {set_by::headers, id(32), id(16), "01", "vendor@tenant=a1"},
      {set_by::provider, id(32), id(16), "01", "p=provided"},
      {set_by::none, "", "", "", ""},
  };
}

/// Writes `events` through the writer into a fresh in-memory store and relays them with
/// `transport`; prints an `expect` line per event.
template <class Transport>
void write_and_relay(const std::string& name, const std::vector<traced>& events,
                     Transport& transport) {
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store app_store(app), relay_store(relay_sql);
  outbox::writer writer(app_store);
  std::vector<outbox::uuid> ids;
  {
    memory_session::transaction tx(app);
    int n = 0;
    for (const auto& t : events) {
      outbox::event e{.aggregate_type = "interop",
                      .aggregate_id = "a-" + std::to_string(n++),
                      .event_type = "traced",
                      .payload = R"({"interop":true})"};
      switch (t.how) {
        case set_by::field:
          e.trace = t.context();
          break;
        case set_by::headers:
          e.headers.emplace(outbox::traceparent_header, t.context().traceparent);
          e.headers.emplace(outbox::tracestate_header, t.tracestate);
          break;
        case set_by::provider: {
          // As an application's tracer would: the active span's context, per enqueue call.
          outbox::writer traced_writer(app_store, {.trace_provider = [&t] { return t.context(); }});
          ids.push_back(traced_writer.enqueue(app, e));
          continue;
        }
        case set_by::none:
          break;
      }
      ids.push_back(writer.enqueue(app, e));
    }
    tx.commit();
  }
  outbox::relay relay(relay_store, transport, {.publish_timeout = 20s});
  std::size_t published = 0;
  for (int round = 0; round < 20 && published < events.size(); ++round) {
    relay.run_once();
    published = relay.stats().published;
  }
  if (published != events.size())
    throw std::runtime_error(name + ": published " + std::to_string(published) + " of " +
                             std::to_string(events.size()));
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& t = events[i];
    const auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
    std::cout << "expect " << name << ' ' << ids[i].to_string() << ' ' << dash(t.trace_id) << ' '
              << dash(t.span_id) << ' ' << dash(t.flags) << ' ' << dash(t.tracestate) << '\n';
  }
}

/// Writes two events (a JSON payload, opaque bytes) stamped at a fixed time with microseconds
/// and relays them with `transport`, a publisher in CloudEvents `mode`; prints a `ce-expect`
/// line per event: transport, mode, id, type, source, subject, time, data as hex.
template <class Transport>
void write_cloudevents(const std::string& name, const std::string& mode, Transport& transport) {
  using namespace std::chrono;
  const outbox::time_point at = sys_days{year{2026} / 12 / 7} + 14h + 30min + 123456us;
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store app_store(app), relay_store(relay_sql);
  outbox::writer writer(app_store, {}, manual_clock(at));
  const std::vector<outbox::event> events{{.aggregate_type = "order",
                                           .aggregate_id = "o-" + mode,
                                           .event_type = "order.placed",
                                           .payload = R"({"mode":")" + mode + R"(","n":1})",
                                           .headers = {{"tenant", "t1"}}},
                                          {.aggregate_type = "order",
                                           .aggregate_id = "o-" + mode,
                                           .event_type = "order.scanned",
                                           .payload = std::string("\0\x01\xfe\xff"
                                                                  "bytes",
                                                                  9),
                                           .content_type = "application/octet-stream"}};
  std::vector<outbox::uuid> ids;
  {
    memory_session::transaction tx(app);
    for (const auto& e : events) ids.push_back(writer.enqueue(app, e));
    tx.commit();
  }
  outbox::relay relay(relay_store, transport, {.publish_timeout = 20s});
  for (int round = 0; round < 20 && relay.stats().published < events.size(); ++round)
    relay.run_once();
  if (relay.stats().published != events.size())
    throw std::runtime_error(name + " cloudevents " + mode + ": not all published");
  for (std::size_t i = 0; i < events.size(); ++i) {
    std::string hex;
    for (const unsigned char c : events[i].payload) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", c);
      hex += b;
    }
    std::cout << "ce-expect " << name << ' ' << mode << ' ' << ids[i].to_string() << ' '
              << events[i].event_type << " /orders-service " << events[i].aggregate_id << ' '
              << outbox::detail::ce::rfc3339(at) << ' ' << hex << '\n';
  }
}

void delete_from_broker(const std::string& url, const std::string& queue,
                        const std::string& exchange) {
  outbox::amqp::connection conn(outbox::amqp::connection_options{.url = url});
  conn.ensure();
  constexpr auto ch = outbox::amqp::connection::channel;
  amqp_queue_delete(conn.state(), ch, outbox::amqp::bytes(queue), 0, 0);
  conn.check(amqp_get_rpc_reply(conn.state()), "queue.delete");
  amqp_exchange_delete(conn.state(), ch, outbox::amqp::bytes(exchange), 0);
  conn.check(amqp_get_rpc_reply(conn.state()), "exchange.delete");
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: interop_publish AMQP_URL [KAFKA_BOOTSTRAP_SERVERS]\n";
    return 2;
  }
  const std::string amqp_url = argv[1];
  std::string bootstrap = argc > 2 ? argv[2] : "";

  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGINT, SIGTERM}) {
    sigaddset(&mask, sig);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(sig, &sa, nullptr);
  }
  sigset_t before;
  ::sigprocmask(SIG_BLOCK, &mask, &before);

  std::mt19937_64 rng(std::random_device{}());
  const std::string suffix = random_hex(rng, 12);
  const std::string exchange = "outbox-interop-" + suffix;
  const std::string queue = "outbox-interop-" + suffix;
  const std::string topic = "outbox.interop." + suffix;
  const std::string ce_exchange = "outbox-interop-ce-" + suffix;
  const std::string ce_queue = "outbox-interop-ce-" + suffix;
  const std::string ce_topic = "outbox.interop.ce." + suffix;

  std::optional<outbox::kafka::mock_cluster> mock;
  if (bootstrap.empty()) {
    mock.emplace(1);
    mock->create_topic(topic, 1, 1);
    mock->create_topic(ce_topic, 1, 1);
    bootstrap = mock->bootstrap_servers();
  }
  std::cout << "amqp-exchange " << exchange << "\namqp-queue " << queue << "\nkafka-bootstrap "
            << bootstrap << "\nkafka-topic " << topic << "\nce-amqp-queue " << ce_queue
            << "\nce-kafka-topic " << ce_topic << "\n";

  int status = 0;
  {
    // The queue the reader consumes: declared (durable) and bound before anything is published.
    outbox::amqp::receiver declare({.connection = {.url = amqp_url},
                                    .queue = queue,
                                    .exchange = exchange,
                                    .binding_key = "#"});
    declare.connect();
    outbox::amqp::receiver declare_ce(
        {.connection = {.url = amqp_url}, .queue = ce_queue, .exchange = ce_exchange});
    declare_ce.connect();
  }
  try {
    outbox::amqp::publisher amqp({.connection = {.url = amqp_url}, .exchange = exchange});
    write_and_relay("amqp", contexts(rng), amqp);
    outbox::kafka::publisher kafka(
        {.bootstrap_servers = bootstrap, .topic_pattern = topic, .delivery_timeout = 15s});
    write_and_relay("kafka", contexts(rng), kafka);
    for (const auto mode :
         {outbox::cloudevents_mode::binary, outbox::cloudevents_mode::structured}) {
      const outbox::cloudevents_options ce{mode, "/orders-service"};
      const std::string mode_name =
          mode == outbox::cloudevents_mode::binary ? "binary" : "structured";
      outbox::amqp::publisher ce_amqp(
          {.connection = {.url = amqp_url}, .exchange = ce_exchange, .cloudevents = ce});
      write_cloudevents("amqp", mode_name, ce_amqp);
      outbox::kafka::publisher ce_kafka({.bootstrap_servers = bootstrap,
                                         .topic_pattern = ce_topic,
                                         .delivery_timeout = 15s,
                                         .cloudevents = ce});
      write_cloudevents("kafka", mode_name, ce_kafka);
    }
    std::cout << "ready" << std::endl;
    while (!stopping) ::sigsuspend(&before);
  } catch (const std::exception& e) {
    std::cerr << "interop_publish: " << e.what() << std::endl;
    status = 1;
  }
  delete_from_broker(amqp_url, queue, exchange);
  delete_from_broker(amqp_url, ce_queue, ce_exchange);
  return status;
} catch (const std::exception& e) {
  std::cerr << "interop_publish: " << e.what() << "\n";
  return 1;
}
