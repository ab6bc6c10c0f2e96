#pragma once
/// @file
/// Requirements on transport policies: the publishing side (used by the relay) and the receiving
/// side (used by the consumer).

#include <chrono>
#include <concepts>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <outbox/message.hpp>

namespace outbox::concepts {

// clang-format off

/// A transport the relay publishes through.
///
/// | operation                  | returns                       | guarantees | errors |
/// |----------------------------|-------------------------------|------------|--------|
/// | `t.publish(batch, until)`  | `std::vector<publish_result>` | sends every message of `batch` in order, pipelined (confirms are awaited for the batch, not one by one); returns by `until` with at most one result per message, matched by id, in any order; `confirmed` only once the broker (or receiving peer) took responsibility; `in_doubt` for a message the broker did not answer for (sent with no answer by `until`, or not sent after the connection failed: it may have it), which the relay defers without counting an attempt; a message without a result is treated as a transient timeout | throws `outbox::error` only when the transport as a whole is unusable (`transient`: reconnect and retry; `misconfigured`) |
///
/// Messages of one aggregate appear on the wire in batch order.
template <class T>
concept transport = requires(T& t, std::span<const message> batch,
                             std::chrono::steady_clock::time_point until) {
  { t.publish(batch, until) } -> std::same_as<std::vector<publish_result>>;
};

/// Capability: a transport whose publish calls keep the order of an aggregate's run: the
/// messages of one call reach the receiver in call order, and once a message failed other than
/// for good, no later message of its aggregate in the call reaches the receiver or is confirmed
/// (failed for good, `permanent`, it is dead-lettered, and a dead letter does not hold its
/// aggregate back). The relay releases the later ones; they follow after the retry. The relay then sends
/// all of an aggregate's messages in a batch in one call (one confirm round trip for the
/// batch, however hot the aggregate), instead of one wave per message that waits for the
/// previous one's confirm. Declared by the transport: `static constexpr bool
/// keeps_publish_order = true;`.
template <class T>
concept order_keeping_transport = transport<T> && requires {
  requires T::keeps_publish_order;
};

/// Capability: a transport that names the route (destination) of each message, so the relay's
/// storm guard (`relay_options::storm_guard`) pauses one broken route, not the whole transport.
/// Without it the transport is one route, named "".
///
/// | operation    | returns       | guarantees | errors |
/// |--------------|---------------|------------|--------|
/// | `t.route(m)` | `std::string` | the destination `publish` sends `m` to, with the transport's name (`kafka:orders`, `amqp:outbox/order.created`); the same for the same message; cheap (called twice per message sent) | should not throw (a throw counts as route "") |
template <class T>
concept routing_transport = transport<T> && requires(T& t, const message& m) {
  { t.route(m) } -> std::convertible_to<std::string>;
};

/// The receiving side a consumer reads from.
///
/// | operation            | returns                    | guarantees | errors |
/// |----------------------|----------------------------|------------|--------|
/// | `r.receive(timeout)` | `std::optional<delivery>`  | the next delivery, or `nullopt` after `timeout` (a value, not an error); an unacknowledged delivery is delivered again later (at-least-once) | `transient` |
/// | `r.ack(d)`           | `void`                     | `d` will not be delivered again to this consumer group | `transient` (then it may be redelivered: the inbox absorbs it) |
/// | `r.nack(d, requeue)` | `void`                     | `requeue`: delivered again later; otherwise dropped (or sent to the transport's own dead-letter route) | `transient` |
template <class R>
concept receiver = requires(R& r, std::chrono::milliseconds timeout, const delivery& d,
                            bool requeue) {
  { r.receive(timeout) } -> std::same_as<std::optional<delivery>>;
  { r.ack(d) } -> std::same_as<void>;
  { r.nack(d, requeue) } -> std::same_as<void>;
};

// clang-format on

}  // namespace outbox::concepts
