#pragma once
// The consumer (--role consumer): outbox::consumer whose handler writes an effect row per event,
// its receiver wrapped to fire the consumer's sharp faults, feed it duplicate storms and play
// its planted defects; every duplicate the inbox absorbed logged as it happens.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include <soci/soci.h>
#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>
#include <outbox/testing/duplicating_receiver.hpp>

#include "args.hpp"
#include "basics.hpp"
#include "concepts.hpp"
#include "database.hpp"
#include "run_files.hpp"
#include "signals.hpp"

namespace fault_harness {

/// The consumer's store: the real one, or (planted defect) one whose inbox forgets.
template <class S>
class harness_store : public S::store_type {
 public:
  harness_store(soci::session& sql, const args& a, bool forget)
      : S::store_type(sql, S::options(a)), forget_(forget) {}
  bool record_delivery(std::string_view consumer, const outbox::uuid& id, outbox::time_point now) {
    return forget_ || S::store_type::record_delivery(consumer, id, now);
  }

 private:
  bool forget_ = false;
};

/// Wraps the receiver: kills the process after the commit, before the ack, when armed; and
/// starts a duplicate storm when armed (outbox::testing::duplicating_receiver underneath: its
/// last 32 deliveries again, 10 times each, before the next real delivery), once it has
/// deliveries to copy. Notes where the last delivery sits on the wire, when the transport says
/// (Kafka: partition and offset; a storm's copy: its original's), else "".
template <class Inner>
class harness_receiver {
 public:
  harness_receiver(Inner& real, outbox::testing::duplicating_receiver<Inner>& inner, bool ack_early,
                   bool stuck)
      : real_(&real), inner_(&inner), ack_early_(ack_early), stuck_(stuck) {}
  std::optional<outbox::delivery> receive(std::chrono::milliseconds timeout) {
    // A storm armed before this consumer received anything would copy nothing: it waits.
    if (armed_storm != 0 && inner_->kept() > 0) {
      armed_storm = 0;
      inner_->storm(10);
    }
    auto d = inner_->receive(timeout);
    if (d) note_position(*d);
    if (ack_early_ && d) inner_->ack(*d);  // the defect: acked before the handler's transaction
    return d;
  }
  void ack(const outbox::delivery& d) {
    if (armed_usr1 != 0 && !inner_->is_copy(d)) die_here();  // committed, not acked
    // The defect (stuck-commit): every 100th delivery is never acked.
    if (stuck_ && !inner_->is_copy(d) && ++acks_ % 100 == 0) return;
    if (!ack_early_) inner_->ack(d);
  }
  void nack(const outbox::delivery& d, bool requeue) { inner_->nack(d, requeue); }
  /// The transport's window (AMQP prefetch): without it, the consumer would hold back a
  /// delivery the transport needs acked before it hands out the one it waits for.
  [[nodiscard]] std::size_t max_held() const requires requires(const Inner& r) { r.max_held(); }
  { return inner_->max_held(); }
  [[nodiscard]] bool last_was_copy() const { return inner_->last_was_copy(); }
  /// The last delivery's event id and its place on the wire ("" when the transport has none).
  [[nodiscard]] const std::string& last_id() const { return last_id_; }
  [[nodiscard]] const std::string& last_position() const { return last_position_; }

 private:
  void note_position(const outbox::delivery& d) {
    last_id_ = d.msg.id.to_string();
    if constexpr (requires { real_->position(d); }) {
      if (inner_->last_was_copy()) {
        const auto it = positions_.find(last_id_);
        last_position_ = it != positions_.end() ? it->second : std::string();
        return;
      }
      const auto p = real_->position(d);
      last_position_ =
          p ? std::to_string(p->partition) + ":" + std::to_string(p->offset) : std::string();
      // A storm copies the last 32 deliveries: their positions, for a copy applied first.
      if (positions_.insert_or_assign(last_id_, last_position_).second) order_.push_back(last_id_);
      if (order_.size() > 64) {
        positions_.erase(order_.front());
        order_.pop_front();
      }
    }
  }

  Inner* real_;
  outbox::testing::duplicating_receiver<Inner>* inner_;
  bool ack_early_ = false;
  bool stuck_ = false;
  long acks_ = 0;
  std::string last_id_{};
  std::string last_position_{};
  std::map<std::string, std::string> positions_{};
  std::deque<std::string> order_{};
};

/// Logs a duplicate the inbox absorbed, as one line of duplicates.log written as it happens
/// (a SIGKILL loses none already logged): `s` a storm's copy; `r` the transport delivering
/// again a record it had delivered before (Kafka: an offset not committed when its partition
/// changed owner, or refused by the coordinator in a rebalance), known by its position on the
/// wire; `d` any other (the relay put the message on the wire again). Positions a message was
/// absorbed or dead-lettered at are kept in harness_seen (after the `d` is logged: a kill in
/// between counts one more `d`, never one less). A database away (a restart, a killed session)
/// fails neither statement: the copy counts `d`, its position is not kept (a later copy there
/// counts `d` too: never one less), and the store reconnects the session when next used.
template <class R>
void log_duplicate(soci::session& sql, const args& a, int log, const R& wire, bool dead) {
  if (wire.last_was_copy()) {
    if (!dead && ::write(log, "s\n", 2) != 2) throw std::runtime_error("cannot log a duplicate");
    return;
  }
  const std::string& id = wire.last_id();
  const std::string& at = wire.last_position();
  // Runs one bookkeeping statement; false when the connection is gone (anything else throws).
  const auto run = [&](auto&& statement) {
    try {
      statement();
      return true;
    } catch (const std::exception&) {
      if (sql.is_connected()) throw;
      return false;
    }
  };
  long long seen = 0;
  bool answered = true;
  if (!dead && !at.empty())
    answered = run([&] {
      sql << "SELECT (SELECT count(*) FROM harness_effect WHERE event_id = :e AND wire_at = :p) "
             "+ (SELECT count(*) FROM harness_seen WHERE event_id = :e2 AND wire_at = :p2)",
          soci::use(id), soci::use(at), soci::use(id), soci::use(at), soci::into(seen);
    });
  if (!dead && ::write(log, seen > 0 ? "r\n" : "d\n", 2) != 2)
    throw std::runtime_error("cannot log a duplicate");
  if (!dead && seen == 0 && tracing() && !at.empty())
    trace("consumer " + std::to_string(a.index) + " absorbed " + id + " sent again, at " + at);
  if (answered && seen == 0 && !at.empty())
    run([&] {
      sql << "INSERT INTO harness_seen (event_id, wire_at) VALUES (:e, :p)", soci::use(id),
          soci::use(at);
    });
}

/// Applies each event as a row of harness_effect (event id, aggregate, sequence; apply_order
/// is the autoincrement), in the inbox transaction; a poison event's handler throws, always.
/// Logs each duplicate the inbox absorbed as one line of duplicates.log (`d`, or `s` for a
/// storm's copy), written as it happens (a SIGKILL loses none already logged). Purges inbox
/// records older than --dedup-window as it goes (plant forget-window: all of them), so that
/// storms and redeliveries meet a purge at work.
template <class S, class T>
int run_consumer(const args& a) {
  become_part();
  database<S> db(a);
  soci::session& sql = db.sql;
  harness_store<S> store(sql, a, a.plant == "skip-inbox");
  auto rcv = T::receiver(a);
  outbox::testing::duplicating_receiver storming(rcv);
  const bool ack_early = a.plant == "ack-before-commit";
  harness_receiver wire(rcv, storming, ack_early, a.plant == "stuck-commit");
  const int log = ::open(duplicates_log(a).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log < 0) throw std::runtime_error("cannot open " + duplicates_log(a));
  const auto window = a.plant == "forget-window" ? 0s : std::chrono::seconds(a.dedup_window_s);
  auto next_purge = steady::now();
  std::chrono::milliseconds extra{0};  // the servers' overrun (window_extra_file)
  std::string last_error;              // traced when it changes
  outbox::consumer consumer(
      store, wire,
      [ack_early, &wire](soci::session& s, const outbox::message& m) {
        if (m.event_type == "poison") throw std::runtime_error("a poison event: always fails");
        const auto body = nlohmann::json::parse(m.payload);
        const std::string id = m.id.to_string();
        const std::string agg = body.at("agg").get<std::string>();
        const long long seq = body.at("seq").get<long long>();
        const long long at = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
        const int by = static_cast<int>(::getpid());
        const std::string where = wire.last_id() == id ? wire.last_position() : std::string();
        s << "INSERT INTO harness_effect (event_id, aggregate, seq, applied_ms, applied_by, "
             "wire_at) VALUES (:e, :a, :s, :t, :b, :w)",
            soci::use(id), soci::use(agg), soci::use(seq), soci::use(at), soci::use(by),
            soci::use(where);
        if (armed_usr2 != 0) {  // inside the transaction
          // The planted early ack must be on the wire before the kill, or the defect cannot
          // show: a ZeroMQ send only queues the frames for the context's I/O thread, which the
          // SIGKILL can beat (CI: 3 in-tx kills, none of their acks reached the relay, nothing
          // lost, the plant not caught). A handler that runs a while after acking is the case
          // the plant stands for.
          if (ack_early) std::this_thread::sleep_for(300ms);
          die_here();
        }
      },
      {.name = consumer_name, .poll_timeout = 50ms});
  long long polled = 0;
  auto traced_at = steady::now();
  while (stop_requested == 0) {
    if (tracing() && steady::now() - traced_at >= 1s) {
      std::string counts;
      if constexpr (requires { rcv.stats().commit_failures; }) {
        const auto x = rcv.stats();
        counts = " (receiver: " + std::to_string(x.received) + " received, " +
                 std::to_string(x.commits) + " commits, " + std::to_string(x.commit_failures) +
                 " refused, " + std::to_string(x.rebalances) + " rebalances, " +
                 std::to_string(rcv.assigned()) + " partitions)";
      }
      trace("consumer " + std::to_string(a.index) + " polled " + std::to_string(polled) + counts);
      traced_at = steady::now();
    }
    try {
      const auto outcome = consumer.poll_once();
      if (outcome != decltype(consumer)::outcome::idle) ++polled;
      if (outcome == decltype(consumer)::outcome::duplicate ||
          outcome == decltype(consumer)::outcome::dead_lettered)
        log_duplicate(sql, a, log, wire, outcome == decltype(consumer)::outcome::dead_lettered);
      if (steady::now() >= next_purge) {
        next_purge = steady::now() + 250ms;
        if (window > 0s) {
          std::ifstream in(window_extra_file(a));
          long long ms = 0;
          if (in >> ms) extra = std::max(extra, std::chrono::milliseconds(ms));
        }
        store.purge_inbox(outbox::system_clock{}.now() - window - extra, 1000);
      }
    } catch (const outbox::error& e) {
      // What consumer::run does: back off from all but a misconfiguration.
      if (tracing() && e.what() != last_error) {
        trace("consumer " + std::to_string(a.index) + " error: " + e.what());
        last_error = e.what();
      }
      if (e.kind() == outbox::errc::misconfigured) throw;
      std::this_thread::sleep_for(20ms);
    }
  }
  ::close(log);
  return exit_ok;
}

}  // namespace fault_harness
