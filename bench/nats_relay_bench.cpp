// Relay throughput store -> NATS JetStream (a stream on file storage, PubAcks), on the same
// server in one run:
//   - a bare libnats publisher, no database: the same messages (subject, headers, payload),
//     `--batch` at a time with js_PublishMsgAsync, each batch's PubAcks awaited before the next
//     (the relay's contract: it settles a batch from its PubAcks, one batch in flight; the batch
//     after it is claimed meanwhile). `ratio relay/bare` is against this baseline;
//   - the same with every message sent before the PubAcks are awaited once at the end, printed
//     as `ceiling (no per-batch confirm)` for information: no at-least-once relay has that shape;
//   - the library's relay from the in-memory store (the adapter's own cost: no database; rows
//     deleted once published, so its claim does not walk them) and from SQLite, batch
//     `--batch`, pipelined, `relay::run` on its own thread;
//   - the in-memory relay with batch_size 1 (one PubAck round trip at a time), on `--single-rows`.
// The events are spread over `--aggregates` aggregates (default 0: one each). With no more
// aggregates than a batch holds, every aggregate of the next batch has a row in flight, so the
// claim made ahead finds nothing (order per aggregate) and the relay claims, publishes and settles
// one after the other: `--aggregates 1000` measures that shape.
// The contenders run `--rounds` times, in an order reversed every other round, each on a fresh
// stream. Prints events/s per run, `ratio relay/bare` (in-memory store, best of the rounds,
// median in parentheses, then the median of each round's relay/bare: the pair run side by
// side, steadier on a noisy machine), `ratio sqlite-relay/bare`, `ratio relay/ceiling` and
// `ratio batched/one-at-a-time`.
//
// Usage: nats_relay_bench [--rows N] [--batch N] [--single-rows N] [--rounds N]
//                         [--aggregates N] [--dir PATH] [--smoke]
// The server: OUTBOX_TEST_NATS (nats:// URL, JetStream on).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/nats/nats.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/memory_store.hpp>

#include "bench_common.hpp"
#include "sqlite_pristine.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using outbox::bench::rates;

struct args {
  long rows = 20'000;
  long batch = 1000;
  long single_rows = 1'000;
  long rounds = 3;
  long aggregates = 0;  // 0: one per event
  fs::path dir = fs::temp_directory_path();
};

args parse(int argc, char** argv) {
  args a;
  outbox::bench::flags(
      "nats_relay_bench [--rows N] [--batch N] [--single-rows N] [--rounds N] [--aggregates N] "
      "[--dir P]")
      .on("--rows", a.rows)
      .on("--batch", a.batch)
      .on("--single-rows", a.single_rows)
      .on("--rounds", a.rounds)
      .on("--aggregates", a.aggregates)
      .on("--dir", a.dir)
      .on_smoke([&a] {
        a.rows = 300;
        a.batch = 100;
        a.single_rows = 50;
        a.rounds = 1;
      })
      .parse(argc, argv);
  if (a.rows <= 0 || a.batch <= 0 || a.single_rows <= 0 || a.rounds <= 0 || a.aggregates < 0) {
    std::cerr << "nats_relay_bench: counts must be > 0\n";
    std::exit(2);
  }
  return a;
}

/// A fresh stream (file storage) for one run: its name, subjects `<prefix>.>`; deleted by
/// `drop`.
struct scratch_stream {
  std::string prefix = "outbox-bench-" + outbox::make_uuid_v7().to_string();
  outbox::nats::stream_options options{.name = "OUTBOX-BENCH-" + prefix.substr(13),
                                       .subjects = {prefix + ".>"}};
  outbox::nats::publisher_options publisher(const std::string& url) const {
    return {
        .connection = {.url = url}, .stream = options, .subject_pattern = prefix + ".{event_type}"};
  }
  void drop(outbox::nats::connection& c) const {
    jsOptions o;
    jsOptions_Init(&o);
    auto js = c.jetstream(o);
    jsErrCode code{};
    (void)js_DeleteStream(js.get(), options.name.c_str(), nullptr, &code);
  }
};

/// The relay from `st` over a fresh publisher until `rows` are published.
template <class Store>
outbox::bench::result relay_run(Store& st, long rows, long batch, outbox::nats::publisher& pub) {
  // The end is signalled by the last settle (no polling thread waking beside the relay: the
  // bare publisher has none).
  const auto target = static_cast<std::uint64_t>(rows);
  std::mutex m;
  std::condition_variable done;
  std::uint64_t settled = 0;
  const outbox::relay_options o{.batch_size = static_cast<std::size_t>(batch),
                                .lease = 180s,
                                .publish_timeout = 60s,
                                .idle_poll_min = 1ms,
                                .idle_poll_max = 10ms,
                                .pipeline = batch > 1,
                                .on_batch = [&](const outbox::batch_report& r) {
                                  std::lock_guard lock(m);
                                  settled += r.settled.published;
                                  if (settled >= target) done.notify_all();
                                }};
  outbox::relay<Store, outbox::nats::publisher> relay(st, pub, o);
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t1;
  {
    std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
    std::unique_lock lock(m);
    done.wait_for(lock, 600s, [&] { return settled >= target; });
    t1 = std::chrono::steady_clock::now();
  }
  const double s = std::chrono::duration<double>(t1 - t0).count();
  if (relay.stats().published < target) {
    std::cerr << "bench: " << relay.stats().published << " of " << rows << " published\n";
    std::exit(1);
  }
  return {s, static_cast<long>(relay.stats().published)};
}

/// The relay from an in-memory store holding `rows` sample events over `aggregates`.
outbox::bench::result memory_run(const std::string& url, long rows, long batch, long aggregates) {
  outbox::testing::memory_database db;
  outbox::testing::memory_session sql(db);
  outbox::testing::memory_store st(sql, {.retention = outbox::retention::delete_on_publish});
  outbox::writer w(st);
  {
    outbox::testing::memory_session::transaction tx(sql);
    for (long i = 0; i < rows; ++i)
      (void)w.enqueue(sql, outbox::bench::sample_event(i, aggregates));
    tx.commit();
  }
  const scratch_stream s;
  outbox::nats::publisher pub(s.publisher(url));
  pub.connect();
  const auto r = relay_run(st, rows, batch, pub);
  outbox::nats::connection c({.url = url});
  c.ensure();
  s.drop(c);
  return r;
}

/// The relay from a fresh copy of the SQLite outbox `pristine`.
outbox::bench::result sqlite_run(const std::string& url, const fs::path& pristine, long rows,
                                 long batch) {
  const fs::path copy = outbox::bench::fresh_copy(pristine, "run");
  outbox::bench::result r;
  const scratch_stream s;
  {
    soci::session sql(soci::sqlite3, "db=" + copy.string());
    outbox::sqlite::store st(sql);
    outbox::nats::publisher pub(s.publisher(url));
    pub.connect();
    r = relay_run(st, rows, batch, pub);
  }
  outbox::bench::remove_sqlite_db(copy);
  outbox::nats::connection c({.url = url});
  c.ensure();
  s.drop(c);
  return r;
}

/// A bare libnats publisher: `rows` messages like the relay's (subject, the six headers,
/// payload), published asynchronously `batch` at a time, each batch's PubAcks awaited before the
/// next (`batch` = `rows`: all sent, then every PubAck awaited).
outbox::bench::result bare_run(const std::string& url, long rows, long batch, long aggregates) {
  const scratch_stream s;
  outbox::nats::connection c({.url = url});
  c.ensure();
  jsOptions o;
  jsOptions_Init(&o);
  auto js = c.jetstream(o);
  outbox::nats::ensure_stream(c, js.get(), s.options);
  std::vector<std::string> ids;
  std::vector<outbox::event> events;
  for (long i = 0; i < rows; ++i) {
    ids.push_back(outbox::make_uuid_v7().to_string());
    events.push_back(outbox::bench::sample_event(i, aggregates));
  }
  const std::string subject = s.prefix + ".order_placed";
  const std::string created =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 60000;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < rows; ++i) {
    const auto& e = events[static_cast<std::size_t>(i)];
    natsMsg* m = nullptr;
    natsMsg_Create(&m, subject.c_str(), nullptr, e.payload.data(),
                   static_cast<int>(e.payload.size()));
    natsMsgHeader_Set(m, "Nats-Msg-Id", ids[static_cast<std::size_t>(i)].c_str());
    natsMsgHeader_Set(m, "Outbox-Event-Type", e.event_type.c_str());
    natsMsgHeader_Set(m, "Outbox-Aggregate-Type", e.aggregate_type.c_str());
    natsMsgHeader_Set(m, "Outbox-Aggregate-Id", e.aggregate_id.c_str());
    natsMsgHeader_Set(m, "Content-Type", e.content_type.c_str());
    natsMsgHeader_Set(m, "Outbox-Created-At", created.c_str());
    const natsStatus st = js_PublishMsgAsync(js.get(), &m, nullptr);
    natsMsg_Destroy(m);
    if (st != NATS_OK) {
      std::cerr << "bench: bare publish failed: " << natsStatus_GetText(st) << "\n";
      std::exit(1);
    }
    if ((i + 1) % batch == 0 || i + 1 == rows) {
      if (js_PublishAsyncComplete(js.get(), &po) != NATS_OK) {
        std::cerr << "bench: bare publisher: PubAcks missing\n";
        std::exit(1);
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.drop(c);
  return {secs, rows};
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  const std::string url =
      outbox::bench::service_address("nats_relay_bench", "OUTBOX_TEST_NATS", "nats:// URL");
  std::cout << "nats relay benchmark: " << a.rows << " rows (batch " << a.batch << ", aggregates "
            << (a.aggregates > 0 ? std::to_string(a.aggregates) : std::string("one per event"))
            << "), " << a.single_rows
            << " rows with batch 1; JetStream file storage, PubAcks; server "
            << outbox::nats::redact_url(url) << "\n";
  const fs::path pristine = a.dir / ("outbox-nats-bench-" + std::to_string(::getpid()) + ".db");
  outbox::bench::build_sqlite_pristine(pristine, a.rows, a.aggregates);
  rates bare;
  rates ceiling;
  rates memory;
  rates sqlite;
  const auto show = [](const char* name, const outbox::bench::result& r) {
    std::cout << "  " << std::left << std::setw(32) << name << std::fixed << std::setprecision(0)
              << r.rate() << " events/s\n";
    return r;
  };
  for (long round = 0; round < a.rounds; ++round) {
    std::cout << "round " << round + 1 << "\n";
    const auto run_bare = [&] {
      bare.add(show("bare libnats", bare_run(url, a.rows, a.batch, a.aggregates)));
      ceiling.add(
          show("ceiling (no per-batch confirm)", bare_run(url, a.rows, a.rows, a.aggregates)));
    };
    const auto run_relays = [&] {
      memory.add(show("relay (memory store)", memory_run(url, a.rows, a.batch, a.aggregates)));
      sqlite.add(show("relay (sqlite)", sqlite_run(url, pristine, a.rows, a.batch)));
    };
    if (round % 2 == 0) {
      run_bare();
      run_relays();
    } else {
      run_relays();
      run_bare();
    }
  }
  const double single =
      show("relay, batch 1", memory_run(url, a.single_rows, 1, a.aggregates)).rate();
  outbox::bench::remove_sqlite_db(pristine);
  std::cout << std::setprecision(2) << "ratio relay/bare " << memory.best() / bare.best() << " ("
            << memory.median() / bare.median() << "; paired " << memory.paired_median(bare) << ")\n"
            << "ratio sqlite-relay/bare " << sqlite.best() / bare.best() << " ("
            << sqlite.median() / bare.median() << ")\n"
            << "ratio relay/ceiling " << memory.best() / ceiling.best() << " ("
            << memory.median() / ceiling.median() << ")\n"
            << "ratio batched/one-at-a-time " << memory.best() / single << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "nats_relay_bench: " << e.what() << "\n";
  return 1;
}
