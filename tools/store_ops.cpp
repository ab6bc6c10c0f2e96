// The `outbox` tool's stores behind store_ops: the one place its subcommands meet the adapters
// (stores.hpp).

#include "store_ops.hpp"

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include <soci/soci.h>

#include "stores.hpp"

namespace outbox_tool {

namespace {

/// `Store` on a session of its own, opened on first use (so that bad arguments are refused before
/// any connection). The store object is made after `migrate` if that is what runs (a store
/// checks the schema version).
template <class Maker>
class store_ops_for final : public store_ops {
  using Store = typename Maker::store_type;

 public:
  store_ops_for(outbox::store_options options, Maker maker)
      : options_(std::move(options)), maker_(std::move(maker)) {}
  int migrate() override { return maker_.migrate(session()); }
  slot_view slot() override {
    if constexpr (requires { Store::tails_the_log; }) {
      const auto st = maker_.slot(session());
      return {maker_.slot_name(), st.exists,     st.active, st.lag_bytes,
              st.retained_bytes,  st.wal_status, st.lag};
    } else {
      throw usage_error("slot: not a log-tailing store (a postgresql+tail:// URL)");
    }
  }
  void drop_slot(bool publication) override {
    if constexpr (requires { Store::tails_the_log; })
      maker_.drop(session(), publication);
    else
      throw usage_error("slot: not a log-tailing store (a postgresql+tail:// URL)");
  }
  outbox::backlog_stats stats() override { return store().stats(std::chrono::system_clock::now()); }
  std::vector<outbox::aggregate_type_stats> stats_by_type() override {
    return store().stats_by_aggregate_type(std::chrono::system_clock::now());
  }
  std::vector<outbox::dead_letter> dead_letters(std::size_t n) override {
    return store().dead_letters(n);
  }
  bool requeue(const outbox::uuid& id) override { return store().requeue(id); }
  std::size_t purge_published(outbox::time_point before, std::size_t n) override {
    return store().purge_published(before, n);
  }
  std::size_t purge_inbox(outbox::time_point before, std::size_t n) override {
    return store().purge_inbox(before, n);
  }

  static constexpr bool triage = outbox::concepts::triage_store<Store>;
  std::vector<outbox::dead_letter_group> dead_letter_groups(std::size_t n) override {
    if constexpr (triage) return store().dead_letter_groups(n);
    no_triage();
  }
  std::size_t requeue_group(const std::string& key, std::size_t n) override {
    if constexpr (triage) return store().requeue_group(key, std::chrono::system_clock::now(), n);
    no_triage();
  }
  std::size_t discard(const outbox::dead_letter_filter& f, std::size_t n) override {
    if constexpr (triage) return store().discard(f, std::chrono::system_clock::now(), n);
    no_triage();
  }
  std::size_t purge_archive(outbox::time_point before, std::size_t n) override {
    if constexpr (triage) return store().purge_archive(before, n);
    no_triage();
  }
  outbox::replay_estimate replay_count(const outbox::replay_filter& f) override {
    if constexpr (replays()) return store().replay_count(f);
    no_replay();
  }
  std::size_t replay(const outbox::replay_filter& f, std::size_t n) override {
    if constexpr (replays()) return store().replay(f, std::chrono::system_clock::now(), n);
    no_replay();
  }

 private:
  static constexpr bool replays() {
    if constexpr (requires { Store::tails_the_log; })
      return false;
    else
      return outbox::concepts::replay_store<Store>;
  }
  [[noreturn]] static void no_triage() {
    throw usage_error(
        "this store keeps no cause keys or archive (dead-letters groups, discard, requeue "
        "--group, purge --archive-before): its dead letters are listed and requeued by id");
  }
  [[noreturn]] static void no_replay() {
    if constexpr (requires { Store::tails_the_log; })
      throw usage_error(
          "replay: not on a log-tailing store: its relay reads new rows from the WAL, and a "
          "replayed row is an old one (replay where a polling relay runs)");
    else
      throw usage_error("replay: this store cannot send published events again");
  }
  soci::session& session() {
    if (!sql_) {
      auto sql = std::make_unique<soci::session>();
      maker_.connect(*sql);  // a failure classified by the store (outbox::error)
      Store::configure(*sql, options_.session);
      sql_ = std::move(sql);
    }
    return *sql_;
  }
  Store& store() {
    if (!store_) store_ = maker_.make(session(), options_);
    return *store_;
  }
  outbox::store_options options_;
  Maker maker_;
  std::unique_ptr<soci::session> sql_;
  std::unique_ptr<Store> store_;
};

}  // namespace

std::unique_ptr<store_ops> open_store(const store_url& u) {
  return with_store_maker<std::unique_ptr<store_ops>>(u, []<class Maker>(Maker maker) {
    return std::unique_ptr<store_ops>(std::make_unique<store_ops_for<Maker>>(
        outbox::store_options{.listen = false}, std::move(maker)));
  });
}

}  // namespace outbox_tool
