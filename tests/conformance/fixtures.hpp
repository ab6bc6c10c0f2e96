#pragma once
// The fixture contracts of the conformance suites and the end-to-end matrix, as concepts: what a
// store fixture and a transport fixture provide, and their capability traits. Each suite
// static_asserts them over the fixtures it is given, so a fixture that lacks a hook fails to
// compile with the concept named, not deep inside a test case.
//
// A new adapter's fixture lives in tests/<name>/fixture.hpp and defines
// `outbox::test::<name>_fixtures`, a std::tuple of its fixture types (one per variant, e.g. per
// claim policy); the build instantiates the end-to-end matrix with it (tests/meson.build).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>

#include <outbox/concepts/store.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>

#include "../support/services.hpp"

namespace conformance {

// The concept bodies are not clang-formatted: clang-format 14 mangles requires-expressions.
// clang-format off
/// The traits every fixture has: a name for test names and what it needs to run.
template <class F>
concept named_fixture = requires {
  { F::name } -> std::convertible_to<const char*>;
  { F::service } -> std::convertible_to<outbox::test::service_need>;
};

/// A store fixture (store_conformance.hpp): a fresh, migrated database per fixture object,
/// sessions and stores on it, and hooks that observe and manipulate it without SQL text.
template <class F>
concept store_fixture =
    named_fixture<F> && outbox::concepts::store<typename F::store_type> &&
    requires(F& fx, typename F::session_type& sql, const std::string& text) {
      // Capabilities.
      { F::single_writer } -> std::convertible_to<bool>;      // concurrent relays serialize
      { F::in_flight_visible } -> std::convertible_to<bool>;  // stats() counts claimed rows
      { F::leases_expire } -> std::convertible_to<bool>;      // an unsettled claim frees its rows
      // Sessions and stores.
      { fx.open_session() } -> std::same_as<std::unique_ptr<typename F::session_type>>;
      { fx.make_store(sql) } -> std::same_as<std::unique_ptr<typename F::store_type>>;
      { fx.make_store(sql, F::retentions()[0]) };
      { F::begin(sql)->commit() };
      { F::begin(sql)->rollback() };
      // The application's business row, and the observation hooks.
      { F::insert_order(sql, text, 1) };
      { F::outbox_rows(sql) } -> std::convertible_to<std::int64_t>;
      { F::published_rows(sql) } -> std::convertible_to<std::int64_t>;
      { F::orders(sql) } -> std::convertible_to<std::int64_t>;
      { F::inbox_rows(sql) } -> std::convertible_to<std::int64_t>;
      { F::inbox_dead_rows(sql) } -> std::convertible_to<std::int64_t>;
      // Rows and failures as another program or a careless handler makes them.
      { F::max_out_attempts(sql) };
      { F::insert_raw(sql, text, text, text) };
      { F::swallow_a_failure_that_aborts_the_transaction(sql) };
      { F::raise_transient_sql_error(sql) };
    };

/// A store fixture of a store built on the store kit (store_kit_conformance.hpp): also an
/// unmigrated database, the schema before the latest migration, and SQL text for the version
/// table.
template <class F>
concept kit_store_fixture =
    store_fixture<F> && requires(F& fx, typename F::session_type& sql, const std::string& text) {
      { fx.open_unmigrated_session() } -> std::same_as<std::unique_ptr<typename F::session_type>>;
      { F::insert_raw_previous_schema(sql, text, text, text) };
      { F::now_literal } -> std::convertible_to<const char*>;
      { F::previous_schema_version } -> std::convertible_to<int>;  // insert_raw_previous_schema's
    };

/// What the end-to-end tests also need of a store fixture: the consumer's effect and its counts.
template <class F>
concept e2e_store_fixture =
    store_fixture<F> && requires(typename F::session_type& sql, const std::string& text) {
      { F::record_applied(sql, text, text, text) };
      { F::applied_rows(sql) } -> std::convertible_to<std::int64_t>;
      { F::applied_rows_for(sql, text) } -> std::convertible_to<std::int64_t>;
      { F::applied_events(sql) } -> std::convertible_to<std::int64_t>;
      { F::inbox_dead_rows_with_error(sql, text) } -> std::convertible_to<std::int64_t>;
    };

/// A transport fixture (transport_conformance.hpp): a publisher and a receiver connected to it.
template <class F>
concept transport_fixture =
    named_fixture<F> &&
    outbox::concepts::transport<
        std::remove_reference_t<decltype(std::declval<F&>().publisher())>> &&
    outbox::concepts::receiver<
        std::remove_reference_t<decltype(std::declval<F&>().receiver())>> &&
    requires {
      { F::redelivers_on_nack } -> std::convertible_to<bool>;  // nack(requeue) delivers again
      // A confirm is the consumer's ack, not the broker's: publish waits for a consumer.
      { F::confirms_on_consumer_ack } -> std::convertible_to<bool>;
      // A receiver sees a batch in publish order across aggregates; false: per aggregate only
      // (Kafka over several partitions).
      { F::keeps_batch_order } -> std::convertible_to<bool>;
      // A delivery nacked with requeue comes again before any later one of its aggregate,
      // however often it is nacked (false: AMQP, whose prefetch hands the later ones out).
      { F::redelivers_in_place } -> std::convertible_to<bool>;
    };

/// What the end-to-end tests also need of a transport fixture.
template <class F>
concept e2e_transport_fixture =
    transport_fixture<F> && requires(F& fx, const outbox::message& m) {
      { F::thread_safe_publisher } -> std::convertible_to<bool>;  // relays may share publisher()
      { fx.redeliver(m) } -> std::convertible_to<bool>;           // a duplicate delivery
      { fx.outstanding() } -> std::convertible_to<std::size_t>;   // deliveries not yet acked
    };
// clang-format on

}  // namespace conformance
