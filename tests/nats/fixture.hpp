#pragma once
// The NATS JetStream transport fixtures of the transport conformance suite and the end-to-end
// tests: a stream of its own (subjects `<prefix>.>`) and a durable consumer on the server at
// OUTBOX_TEST_NATS (scripts/services.sh), the stream deleted afterwards. The receiver connects
// (creating the stream and its consumer) before anything is published.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <outbox/nats/nats.hpp>
#include <outbox/uuid.hpp>

#include "../support/services.hpp"

namespace outbox::test {

/// A plain libnats connection for the tests' own checks (consumer state, clean-up): none of
/// the adapter's publishing or receiving code.
class nats_admin {
 public:
  explicit nats_admin(const std::string& url)
      : conn_(outbox::nats::connection_options{.url = url}) {
    conn_.ensure();
    js_ = conn_.jetstream([] {
      jsOptions o;
      jsOptions_Init(&o);
      return o;
    }());
  }
  outbox::nats::connection& conn() { return conn_; }
  jsCtx* js() { return js_.get(); }

  /// The consumer's messages not acknowledged: handed out and pending delivery.
  std::uint64_t outstanding(const std::string& stream, const std::string& durable) {
    jsConsumerInfo* ci = nullptr;
    jsErrCode code{};
    conn_.check(js_GetConsumerInfo(&ci, js_.get(), stream.c_str(), durable.c_str(), nullptr, &code),
                "consumer info", code);
    const std::uint64_t n = static_cast<std::uint64_t>(ci->NumAckPending) + ci->NumPending;
    jsConsumerInfo_Destroy(ci);
    return n;
  }
  /// Messages in the stream.
  std::uint64_t stored(const std::string& stream) {
    jsStreamInfo* si = nullptr;
    jsErrCode code{};
    conn_.check(js_GetStreamInfo(&si, js_.get(), stream.c_str(), nullptr, &code), "stream info",
                code);
    const std::uint64_t n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
  }
  void delete_consumer(const std::string& stream, const std::string& durable) {
    jsErrCode code{};
    conn_.check(js_DeleteConsumer(js_.get(), stream.c_str(), durable.c_str(), nullptr, &code),
                "delete consumer", code);
  }
  void delete_stream(const std::string& stream) {
    jsErrCode code{};
    (void)js_DeleteStream(js_.get(), stream.c_str(), nullptr, &code);
  }

 private:
  outbox::nats::connection conn_;
  outbox::nats::detail::js_ptr js_;
};

struct nats_fixture {
  static constexpr const char* name = "nats";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{.env = "OUTBOX_TEST_NATS"};
  /// Capability: nack(requeue) delivers again.
  static constexpr bool redelivers_on_nack = true;
  /// Capability: a confirm is the stream's PubAck, not a consumer's ack.
  static constexpr bool confirms_on_consumer_ack = false;
  /// Not thread-safe (one relay thread): concurrent relays share it through a lock.
  static constexpr bool thread_safe_publisher = false;
  /// Capability: one stream, one consumer: a batch arrives in publish order.
  static constexpr bool keeps_batch_order = true;
  /// Capability: a requeued delivery comes again before what was fetched after it.
  static constexpr bool redelivers_in_place = true;
  /// The stream drops a message whose `Nats-Msg-Id` (the event id) it stored within its
  /// duplicate window: a copy the relay sends again reaches no consumer.
  static constexpr bool drops_republished = true;

  static std::string url() { return service_address("OUTBOX_TEST_NATS"); }

  /// The CloudEvents layout of the NATS transport: `ce-<attribute>` headers.
  static constexpr std::string_view cloudevents_prefix = outbox::nats::cloudevents_prefix;

  nats_fixture() : nats_fixture(outbox::nats::stream_options{.memory = true}) {}
  /// A publisher writing CloudEvents as `pub` says, a receiver reading them when `rcv` is not off.
  nats_fixture(outbox::cloudevents_options pub, outbox::cloudevents_options rcv)
      : nats_fixture(outbox::nats::stream_options{.memory = true}, std::move(pub), std::move(rcv)) {
  }
  ~nats_fixture() {
    rcv_.reset();
    pub_.reset();
    try {
      nats_admin(url()).delete_stream(stream_.name);
    } catch (const std::exception&) {
      // the server went away: nothing left to clean up on it
    }
  }
  nats_fixture(const nats_fixture&) = delete;
  nats_fixture& operator=(const nats_fixture&) = delete;

  outbox::nats::publisher& publisher() { return *pub_; }
  outbox::nats::receiver& receiver() { return *rcv_; }
  const outbox::nats::stream_options& stream() const { return stream_; }
  const std::string& prefix() const { return prefix_; }
  static constexpr const char* durable = "billing";

  outbox::nats::publisher_options publisher_options() const {
    return {.connection = {.url = url()},
            .stream = stream_,
            .subject_pattern = prefix_ + ".{event_type}",
            .cloudevents = pub_ce_};
  }
  outbox::nats::receiver_options receiver_options() const {
    return {.connection = {.url = url()},
            .stream = stream_,
            .durable = durable,
            .cloudevents = rcv_ce_};
  }
  /// Why the receiver last terminated a message as not an event.
  [[nodiscard]] std::string last_malformed() const { return rcv_->last_malformed(); }

  /// Publishes an already published message again (a duplicate delivery) past the stream's
  /// duplicate window (a `Nats-Msg-Id` of its own, the event id in `Outbox-Event-Id`): what a
  /// publish after the window, or the server's own redelivery, gives a consumer.
  bool redeliver(const outbox::message& m) {
    nats_admin admin(url());
    auto msg = outbox::nats::encode(m, prefix_ + "." + m.event_type);
    natsMsgHeader_Set(msg.get(), outbox::nats::event_id_header.data(), m.id.to_string().c_str());
    const std::string again = m.id.to_string() + "-again-" + std::to_string(++copies_);
    natsMsgHeader_Set(msg.get(), outbox::nats::msg_id_header.data(), again.c_str());
    jsPubAck* pa = nullptr;
    const natsStatus s = js_PublishMsg(&pa, admin.js(), msg.get(), nullptr, nullptr);
    jsPubAck_Destroy(pa);
    return s == NATS_OK;
  }
  /// Messages of the consumer not yet acknowledged (pending and handed out).
  [[nodiscard]] std::size_t outstanding() {
    return nats_admin(url()).outstanding(stream_.name, durable);
  }
  /// Closes the receiver (it NAKs what it held): messages wait for other clients.
  void close_receiver() { rcv_.reset(); }
  /// Replaces the receiver with a fresh one (a consumer process that restarted).
  void restart_receiver() {
    rcv_.reset();
    rcv_ = outbox::nats::receiver(receiver_options());  // moved in
    rcv_->connect();
  }

 protected:
  /// A stream with the settings of `s` (its name and subjects are the fixture's).
  explicit nats_fixture(outbox::nats::stream_options s, outbox::cloudevents_options pub = {},
                        outbox::cloudevents_options rcv = {})
      : pub_ce_(std::move(pub)),
        rcv_ce_(std::move(rcv)),
        prefix_("outbox-test-" + make_uuid_v7().to_string()),
        stream_(std::move(s)) {
    stream_.name = "OUTBOX-TEST-" + prefix_.substr(12);
    stream_.subjects = {prefix_ + ".>"};
    pub_ = outbox::nats::publisher(publisher_options());
    restart_receiver();
    pub_->connect();
  }

 private:
  outbox::cloudevents_options pub_ce_;
  outbox::cloudevents_options rcv_ce_;
  std::string prefix_;
  outbox::nats::stream_options stream_;
  std::optional<outbox::nats::publisher> pub_;
  std::optional<outbox::nats::receiver> rcv_;
  int copies_ = 0;
};

/// The NATS transport fixtures of the end-to-end matrix.
using nats_fixtures = std::tuple<nats_fixture>;

}  // namespace outbox::test
