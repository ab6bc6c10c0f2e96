#pragma once
// What a pair kind is: the contract each file of kinds/ fulfils (one per store or transport the
// build has; the build lists them in fault_harness_kinds.hpp), and what the parts derive from it.

#include <concepts>
#include <memory>
#include <string>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>

#include "args.hpp"

namespace fault_harness {

// clang-format off

/// A store kind: how the harness runs a store (`--store S::name`). Every member is static.
///
/// | member                          | what |
/// |---------------------------------|------|
/// | `store_type`                    | the adapter's store: the relay's, the consumer's and the writer's (unless `writer_store`) |
/// | `name`                          | `--store`'s value, and the pair's name in the table |
/// | `id_type`, `seq_type`, `order_key` | the column types of the harness's tables: an event id, a sequence number, an autoincrement primary key |
/// | `server`                        | the database server `--db-restarts` restarts (its name for scripts/services.sh's `restart`), or `nullptr`: none |
/// | `missing(a)`                    | the server address missing (the run skips, exit 77), or `nullptr` |
/// | `open(a)`                       | a new connection to the run's database, as the part `a.role` (a database kill finds it by that) |
/// | `options(a)`                    | the store's options: the claim policy (`--policy`) and its timeouts |
/// | `migrate(sql)`                  | the adapter's migration |
/// | `create(a)`, `drop(a)`, `where(a)` | the run's database made empty, dropped, and named for a reader |
/// | `terminate(sql, role, a)`       | a database kill: every session of `role` in the run ended; how many |
/// | `commit_unanswered(sql)`        | a COMMIT sent and the connection cut before its answer, then throws (a COMMIT in doubt) |
///
/// Optional: its server (`server_flag`, `server_env`, `server_form`: on_server), `claim_policies`
/// (true: `--policy locking|leasing`), `db_kills` (true: `--db-kills`, by `terminate`),
/// `writer_store` (the writer's store type: writer_store_of), `relay_store(sql, a)`
/// (the relay's store: make_relay_store), `after_migrate(sql, a)` (after the migration, before
/// the harness's tables) and `takeover_stall(relay_faults)` (how long relay takeovers can hold
/// a batch back: the dedup window grows by it).
template <class S>
concept store_kind = requires(const args& a, soci::session& sql, const std::string& role) {
  requires outbox::concepts::store<typename S::store_type>;
  { S::name } -> std::convertible_to<const char*>;
  { S::id_type } -> std::convertible_to<const char*>;
  { S::seq_type } -> std::convertible_to<const char*>;
  { S::order_key } -> std::convertible_to<const char*>;
  { S::server } -> std::convertible_to<const char*>;
  { S::missing(a) } -> std::same_as<const char*>;
  { S::open(a) } -> std::same_as<std::unique_ptr<soci::session>>;
  { S::options(a) } -> std::same_as<outbox::store_options>;
  { S::migrate(sql) } -> std::same_as<void>;
  { S::create(a) } -> std::same_as<void>;
  { S::drop(a) } -> std::same_as<void>;
  { S::where(a) } -> std::same_as<std::string>;
  { S::terminate(sql, role, a) } -> std::same_as<long long>;
  { S::commit_unanswered(sql) } -> std::same_as<void>;
};

/// A transport kind: how the harness runs a transport (`--transport T::name`). Every member is
/// static.
///
/// | member                  | what |
/// |-------------------------|------|
/// | `name`                  | `--transport`'s value, and the pair's name in the table |
/// | `confirm_is_applied`    | the publisher's confirm is the consumer's ack (published means applied), not the broker's |
/// | `outages`               | the kinds of `--broker-outages` it offers, comma-separated (`""`: none) |
/// | `missing(a)`            | the server address missing (the run skips, exit 77), or `nullptr` |
/// | `consumers(a)`          | how many consumer processes the run has |
/// | `publisher(a)`          | the relay's publisher, on the run's own broker objects |
/// | `receiver(a)`           | the consumer's receiver |
/// | `make_uncarriable(e)`   | turns `e` into an event it cannot carry (refused `permanent`: the relay dead-letters it) |
/// | `drop(a)`               | deletes the run's broker objects (a failure is reported, not fatal) |
///
/// Optional: its server (`server_flag`, `server_env`, `server_form`: on_server),
/// `services_rabbitmq` (the default outage commands are scripts/services.sh's
/// RabbitMQ's), `services_server` (the scripts/services.sh server that `server-restart`
/// restarts by DIR/restart), `own_cluster(a)`, `start_own_cluster(a)` and `own_cluster_outages` (a broker of
/// the run's own, started by the orchestrator, taken down by a word: `power(down)`),
/// `run_cluster(a)` (that broker's process, `--role kafka-cluster`), `consumer_warmup` (how long
/// a consumer is up before it has deliveries to copy in a storm), `partition_stall(outages)`
/// (how late acked records can come back: the dedup window grows by it) and `uncommitted(a)`
/// (records past the consumers' committed positions after the drain; -1: unknown).
template <class T>
concept transport_kind = requires(const args& a, outbox::event& e) {
  { T::name } -> std::convertible_to<const char*>;
  { T::confirm_is_applied } -> std::convertible_to<bool>;
  { T::outages } -> std::convertible_to<const char*>;
  { T::missing(a) } -> std::same_as<const char*>;
  { T::consumers(a) } -> std::same_as<int>;
  { T::publisher(a) } -> outbox::concepts::transport;
  { T::receiver(a) } -> outbox::concepts::receiver;
  { T::make_uncarriable(e) } -> std::same_as<void>;
  { T::drop(a) } -> std::same_as<void>;
};

/// A kind on a server: every member static, all three or none.
///
/// | member        | what |
/// |---------------|------|
/// | `server_flag` | the harness's flag for its address, `--<server_flag>`, and its key in `args::servers` (`a.address(server_flag)`); kinds on one server share it (postgresql-tail PostgreSQL's) |
/// | `server_env`  | the OUTBOX_TEST_* variable: the address when the flag is not given, and how the orchestrator hands it to the parts |
/// | `server_form` | what the usage text calls the address (`CONNSTR`, `URL`) |
///
/// The flag, its default, its usage line and the export to the parts follow from these; a
/// kind says itself when its address is `missing(a)`.
template <class K>
concept on_server = requires {
  { K::server_flag } -> std::convertible_to<const char*>;
  { K::server_env } -> std::convertible_to<const char*>;
  { K::server_form } -> std::convertible_to<const char*>;
};

// clang-format on

/// The kinds of this build (fault_harness_kinds.hpp, generated by tools/meson.build).
template <class... K>
struct kind_list {};

/// A store kind's `claim_policies` and `db_kills` (false when it has none), and whether it is
/// on a server.
template <class S>
constexpr store_traits traits_of() {
  store_traits t;
  if constexpr (requires { S::claim_policies; }) t.claim_policies = S::claim_policies;
  if constexpr (requires { S::db_kills; }) t.db_kills = S::db_kills;
  t.on_server = on_server<S>;
  return t;
}

/// Whether a kind's name is listed for people: a kind sharing the server of one listed before
/// it (postgresql-tail, PostgreSQL's) is not.
template <class K>
bool named(std::vector<std::string>& servers_named) {
  if constexpr (on_server<K>) {
    for (const auto& s : servers_named)
      if (s == K::server_flag) return false;
    servers_named.emplace_back(K::server_flag);
  }
  return true;
}

/// The servers of the kinds, once each, in the kinds' order (args::servers).
template <class... S, class... T>
std::vector<server_address> servers_of(kind_list<S...> /*stores*/, kind_list<T...> /*transports*/) {
  std::vector<server_address> out;
  std::vector<std::string> seen;
  const auto add = [&]<class K>() {
    if constexpr (on_server<K>)
      if (named<K>(seen)) out.push_back({K::server_flag, K::server_env, K::server_form, {}});
  };
  (add.template operator()<S>(), ...);
  (add.template operator()<T>(), ...);
  return out;
}

/// The names of the kinds that `pick` (kind_list order, joined by '|', one per server).
template <class Pick, class... K>
std::string names_of(kind_list<K...> /*kinds*/, Pick pick) {
  std::string out;
  std::vector<std::string> seen;
  const auto add = [&]<class X>() {
    if (pick.template operator()<X>() && named<X>(seen))
      out += (out.empty() ? "" : "|") + std::string(X::name);
  };
  (add.template operator()<K>(), ...);
  return out;
}

/// The traits of the store kind `name` (none: all false).
template <class... S>
store_traits traits_named(kind_list<S...> /*stores*/, const std::string& name) {
  store_traits t;
  (void)((name == S::name && (t = traits_of<S>(), true)) || ...);
  return t;
}

/// Whether the transport kind `name` is on a server.
template <class... T>
bool on_server_named(kind_list<T...> /*transports*/, const std::string& name) {
  return ((name == T::name && on_server<T>) || ...);
}

/// The writer's store type of a pair kind: its `writer_store` when it has one (the log-tailing
/// relay's table-free writer), else its store.
template <class S>
struct writer_store_of {
  using type = typename S::store_type;
};
template <class S>
requires requires { typename S::writer_store; }
struct writer_store_of<S> {
  using type = typename S::writer_store;
};

/// The relay's store of a pair kind: its `relay_store(sql, a)` when it has one, else its store.
template <class S>
auto make_relay_store(soci::session& sql, const args& a) {
  if constexpr (requires { S::relay_store(sql, a); })
    return S::relay_store(sql, a);
  else
    return std::make_unique<typename S::store_type>(sql, S::options(a));
}

}  // namespace fault_harness
