#pragma once
/// @file
/// `outbox::nats::publisher`: the relay's side of the NATS JetStream transport over libnats.
/// A batch is published asynchronously and settled from the stream's PubAcks.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nats/nats.h>

#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>
#include <outbox/nats/connection.hpp>
#include <outbox/nats/protocol.hpp>
#include <outbox/nats/stream.hpp>

namespace outbox::nats {

/// Options of a publisher. Fill with designated initialisers.
struct publisher_options {
  connection_options connection{};  ///< URL, credentials, TLS, timeouts.
  stream_options stream{};          ///< The stream set up (or checked) on connect.
  /// The subject of an event: `{event_type}`, `{aggregate_type}` and `{aggregate_id}` are
  /// replaced. The stream must capture it (`stream_options::subjects`).
  std::string subject_pattern{default_subject_pattern};
  /// When set, the subject of an event instead of `subject_pattern`.
  subject_router::function subject{};
  /// CloudEvents (off by default): `ce-*` headers and `Content-Type` (binary) or a JSON
  /// envelope (structured) beside the transport's own headers (protocol.hpp). A message whose
  /// headers cannot be extension attributes fails `permanent`; a bad `source` is `misconfigured`.
  cloudevents_options cloudevents{};
};

namespace detail {

/// What the PubAck error callback (a libnats thread) shares with `publish` (the caller's
/// thread). On the heap: the callback's closure outlives moves of the publisher. A positive
/// PubAck calls nothing: a message sent and neither refused nor pending at the end is confirmed.
struct ack_state {
  std::mutex mutex;
  struct refusal {
    std::string id;         // Nats-Msg-Id
    std::size_t index = 0;  // in the batch (set by `publish`)
    publish_result result;
    bool no_responders;  // no stream answered (see `settle_no_responders`)
  };
  std::vector<refusal> refused;
  bool open = false;  // a `publish` call is waiting: refusals are recorded

  /// The error callback: records the refusal of the message it is for.
  static void on_error(jsCtx*, jsPubAckErr* pae, void* closure) {
    auto& st = *static_cast<ack_state*>(closure);
    std::string id = header(pae->Msg, msg_id_header);
    publish_result r;
    classify(r, pae);
    std::lock_guard lock(st.mutex);
    if (st.open)
      st.refused.push_back({std::move(id), 0, std::move(r), pae->Err == NATS_NO_RESPONDERS});
  }

  /// A refused publish: a JetStream error code is the stream's verdict on this message (no
  /// room with discard=new, too large, wrong stream...): `permanent`, but for a cluster or
  /// storage that is short for a while; no responders `transient`; a libnats status of its own
  /// (timeout, no connection: no answer from the server) `in_doubt`.
  static void classify(publish_result& r, const jsPubAckErr* pae) {
    const jsErrCode code = pae->ErrCode;
    const bool passing = code == JSClusterNotAvailErr || code == JSInsufficientResourcesErr ||
                         code == JSMemoryResourcesExceededErr ||
                         code == JSStorageResourcesExceededErr;
    r.error_class = code != 0                        ? (passing ? errc::transient : errc::permanent)
                    : pae->Err == NATS_NO_RESPONDERS ? errc::transient
                                                     : errc::in_doubt;
    r.error = std::string("refused by JetStream: ") +
              (pae->ErrText && *pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err));
    if (code != 0) r.error += " (err_code " + std::to_string(code) + ")";
  }
};

}  // namespace detail

/// A `concepts::transport` over NATS JetStream. `publish` sends the whole batch with
/// `js_PublishMsgAsync` (headers: `encode`; `Nats-Msg-Id` = the event id), then waits until
/// `until` for the PubAcks: a PubAck = confirmed (a duplicate within the stream's duplicate
/// window too: the stream holds the event already); a JetStream error for the message (a stream
/// at its limits with discard=new, a message over the stream's max_msg_size) = its `permanent`
/// failure; no stream capturing the subject (no responders, or no PubAck by `until`, and
/// JetStream lists none for it: a plain subscriber took it) = `permanent`; no PubAck by
/// `until`, or a lost connection (sent or not), = `in_doubt` (the relay defers it without
/// counting an attempt: the stream may have it); no answer at all,
/// PubAck or refusal, for anything sent: `publish` throws `transient` (a server away, frozen or
/// behind a half-open connection: the relay counts no attempt). A message that
/// cannot be sent (a bad subject or header, over the server's max_payload: `unsendable`) is its
/// `permanent` failure, found before anything of it is sent. libnats calls back for refusals
/// only (`js_PublishAsyncComplete` waits for the rest): a message sent, not refused and not
/// pending at the end had its PubAck (a callback per PubAck cost a quarter of the CPU).
///
/// Connection: opened lazily; libnats reconnects by itself after a loss. While it is
/// disconnected, `publish` throws `transient` and sends nothing (the relay backs off).
///
/// Threading: one caller thread (the PubAcks are read on libnats' thread). Move-only.
class publisher {
 public:
  /// Checks the options; connects lazily (first `publish`) unless `connect()` is called.
  /// @throws outbox::error `misconfigured` for a bad URL or subject pattern.
  explicit publisher(publisher_options options)
      : options_(std::move(options)),
        router_(options_.subject_pattern, options_.subject),
        ce_(options_.cloudevents, "nats"),
        state_(std::make_unique<detail::ack_state>()),
        conn_(std::make_unique<connection>(options_.connection)) {}

  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;
  /// Move-only: the connection and the callbacks' state go with it.
  publisher(publisher&&) noexcept = default;
  /// Moves the publisher, closing its own connection first.
  publisher& operator=(publisher&& other) noexcept {
    if (this != &other) {
      shut();
      options_ = std::move(other.options_);
      router_ = std::move(other.router_);
      ce_ = std::move(other.ce_);
      js_ = std::move(other.js_);
      state_ = std::move(other.state_);
      conn_ = std::move(other.conn_);
      stream_ready_ = other.stream_ready_;
    }
    return *this;
  }
  /// Closes the connection, once no PubAck error callback runs (it waits for a running one).
  ~publisher() { shut(); }

  /// The route of `m` (`concepts::routing_transport`): `nats:<subject>`.
  [[nodiscard]] std::string route(const message& m) const {
    try {
      return "nats:" + router_(m);
    } catch (...) {
      return "nats:?";
    }
  }

  /// Connects now and sets the stream up (see `stream_options`).
  /// @throws outbox::error `transient` or `misconfigured`.
  void connect() { ensure(); }

  /// Where it publishes, without credentials.
  [[nodiscard]] const std::string& where() const noexcept { return conn_->where(); }
  /// The libnats connection (null before the first connect).
  [[nodiscard]] natsConnection* native_handle() const noexcept { return conn_->handle(); }
  /// Connections opened so far (not counting libnats' own reconnects).
  [[nodiscard]] std::uint64_t connections() const noexcept { return conn_->generation(); }

  /// Publishes `batch` and waits until `until` for its PubAcks. See the class comment.
  /// @throws outbox::error `transient` (no connection, connected only after `until`, or no
  ///         answer to anything sent) or
  ///         `misconfigured` (credentials, the stream missing and not to be created).
  std::vector<publish_result> publish(std::span<const message> batch,
                                      std::chrono::steady_clock::time_point until) {
    std::vector<publish_result> results;
    if (batch.empty()) return results;
    ensure();
    if (!conn_->connected())
      throw error(errc::transient, "nats", {},
                  "disconnected from " + conn_->where() + " (reconnecting); nothing sent");
    if (std::chrono::steady_clock::now() >= until)
      throw error(
          errc::transient, "nats", {},
          "connected only after the publish deadline; nothing sent (" + conn_->where() + ")");
    results.resize(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) results[i].id = batch[i].id;
    auto& st = *state_;
    {
      std::lock_guard lock(st.mutex);
      st.refused.clear();
      st.open = true;
    }
    subjects_.assign(batch.size(), std::string());
    sent_.assign(batch.size(), sent_state::not_sent);
    // An id settles one copy: a later copy in the batch is not sent (confirmed by its twin's
    // PubAck alone, it could be counted without one of its own).
    index_batch(batch);
    for (std::size_t k = 1; k < by_id_.size(); ++k)
      if (by_id_[k].first == by_id_[k - 1].first) {
        const std::size_t i = by_id_[k].second;
        sent_[i] = sent_state::twin;
        results[i].error_class = errc::permanent;
        results[i].error = "the event id is in the batch twice; its later copies are not sent";
      }
    // Each message checked and sent before the next is looked at: the server gets the first
    // message at once (a check pass over the batch first left it idle meanwhile).
    const std::int64_t max_payload = natsConnection_GetMaxPayload(conn_->handle());
    std::string failure;  // set when the connection failed: the rest is not sent
    for (std::size_t i = 0; i < batch.size() && failure.empty(); ++i) {
      std::optional<message> layout;  // the CloudEvents form, when on
      if (sent_[i] == sent_state::twin || !check(batch[i], i, results, max_payload, layout))
        continue;
      send(layout ? *layout : batch[i], i, batch[i].id.to_string(), results, failure);
    }
    const bool all_answered = await(until);
    std::vector<detail::ack_state::refusal> refused;
    {
      std::lock_guard lock(st.mutex);
      st.open = false;
      refused.swap(st.refused);
    }
    // A refusal of an id this batch did not send (a message of an earlier call, taken back
    // then) is not this batch's.
    std::erase_if(refused, [&](detail::ack_state::refusal& r) {
      const auto i = sent_index(r.id);
      if (!i) return true;
      sent_[*i] = sent_state::refused;
      r.index = *i;
      return false;
    });
    // Nothing sent was answered, PubAck or refusal: the server is away (frozen, or a half-open
    // connection libnats has not noticed yet), as when disconnected: no attempt is counted.
    const auto in_state = [&](sent_state x) { return std::count(sent_.begin(), sent_.end(), x); };
    if (const auto unacked = in_state(sent_state::unacked);
        unacked > 0 && in_state(sent_state::sent) == 0 && in_state(sent_state::refused) == 0)
      throw error(errc::transient, "nats", {},
                  "no PubAck nor refusal for any of the " + std::to_string(unacked) +
                      " messages sent by the deadline: " + conn_->where() +
                      " is not answering; nothing confirmed");
    std::vector<std::size_t> no_responders;
    captured_.clear();
    asking_ = true;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (sent_[i] == sent_state::sent && all_answered)
        results[i].confirmed = true;
      else if (sent_[i] == sent_state::sent || sent_[i] == sent_state::unacked)
        results[i] = unanswered(batch[i].id, subjects_[i]);
    }
    for (auto& r : refused) {
      publish_result& out = results[r.index];
      out.error_class = r.result.error_class;
      out.error = std::move(r.result.error);
      if (r.no_responders) no_responders.push_back(r.index);
    }
    if (!no_responders.empty()) settle_no_responders(results, no_responders);
    // After a failed send, what has no answer (sent or not) is in doubt; a refusal is an answer.
    if (!failure.empty())
      for (std::size_t i = 0; i < batch.size(); ++i)
        if (!results[i].confirmed && results[i].error_class != errc::permanent &&
            sent_[i] != sent_state::refused)
          results[i] = {batch[i].id, false, errc::in_doubt, failure};
    return results;
  }

 private:
  void ensure() {
    if (conn_->ensure() || !js_) {
      jsOptions o;
      jsOptions_Init(&o);
      o.PublishAsync.ErrHandler = &detail::ack_state::on_error;
      o.PublishAsync.ErrHandlerClosure = state_.get();
      js_.reset();
      js_ = conn_->jetstream(o);
    }
    if (!stream_ready_) {
      ensure_stream(*conn_, js_.get(), options_.stream);
      stream_ready_ = true;
    }
  }

  /// Sets `subjects_[i]` (and `layout` to the CloudEvents form when on) and returns true
  /// when `m` can be sent; otherwise its result is a `permanent` failure.
  bool check(const message& m, std::size_t i, std::vector<publish_result>& results,
             std::int64_t max_payload, std::optional<message>& layout) {
    std::string subject;
    try {
      subject = router_(m);
    } catch (const std::exception& e) {
      results[i].error_class = errc::permanent;
      results[i].error = std::string("publisher_options::subject threw: ") + e.what();
      return false;
    }
    std::string why;
    if (ce_.on()) {
      why = ce_.unmappable(m);
      if (!why.empty())
        why = "CloudEvents: " + why;
      else
        layout = ce_.to_layout(m, cloudevents_prefix);
    }
    if (why.empty()) why = unsendable(layout ? *layout : m, subject, max_payload);
    if (!why.empty()) {
      results[i].error_class = errc::permanent;
      results[i].error = std::move(why);
      return false;
    }
    subjects_[i] = std::move(subject);
    return true;
  }

  /// Publishes message `i` (checked; `m` as it goes on the wire, `id` its event id as text); a
  /// refusal of the connection sets `failure`.
  void send(const message& m, std::size_t i, const std::string& id,
            std::vector<publish_result>& results, std::string& failure) {
    msg_ptr msg;
    try {
      msg = encode(m, subjects_[i], id);
    } catch (const error& e) {
      results[i].error_class = errc::permanent;
      results[i].error = e.what();
      return;
    }
    // No jsPubOptions::MaxWait: with it libnats times each message (measured: 31,000/s at
    // 1000 a batch, 2,000/s at 5000; 45,000/s both without). The deadline is ours, and what
    // is unacknowledged then is taken back.
    natsMsg* raw = msg.release();
    const natsStatus s = js_PublishMsgAsync(js_.get(), &raw, nullptr);
    natsMsg_Destroy(raw);  // null when libnats took it
    if (s == NATS_OK) {
      sent_[i] = sent_state::sent;
      return;
    }
    if (s == NATS_MAX_PAYLOAD) {
      results[i].error_class = errc::permanent;
      results[i].error = "over the server's max_payload";
      return;
    }
    failure = conn_->scrub(std::string("publish failed: ") + natsStatus_GetText(s) + " (" +
                           conn_->where() + ")");
  }

  /// `by_id_` = the batch's (id, index) pairs in order: a copy's twins follow it.
  void index_batch(std::span<const message> batch) {
    by_id_.resize(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) by_id_[i] = {batch[i].id, i};
    std::sort(by_id_.begin(), by_id_.end());
  }

  /// The index of the message of the batch in flight sent under Nats-Msg-Id `id`, if any.
  [[nodiscard]] std::optional<std::size_t> sent_index(std::string_view id) const {
    const auto u = uuid::parse(id);
    if (!u) return std::nullopt;
    const auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::pair{*u, std::size_t{0}});
    if (it == by_id_.end() || it->first != *u || sent_[it->second] == sent_state::not_sent)
      return std::nullopt;
    return it->second;
  }

  /// Waits until `until` for the PubAcks of what was sent; what has none by then is taken back
  /// from libnats (`unacked`: a PubAck that comes later finds nothing). False when an error
  /// callback had not finished after that (the fate of the rest unknown: not confirmed).
  bool await(std::chrono::steady_clock::time_point until) {
    if (complete_within(until - std::chrono::steady_clock::now())) return true;
    natsMsgList pending{};
    if (js_PublishAsyncGetPendingList(&pending, js_.get()) == NATS_OK) {
      for (int k = 0; k < pending.Count; ++k)
        if (const auto i = sent_index(header(pending.Msgs[k], msg_id_header)))
          sent_[*i] = sent_state::unacked;
      natsMsgList_Destroy(&pending);
    }
    // A message whose error callback runs now is in no list: wait for the callback.
    return complete_within(std::chrono::seconds(1));
  }

  /// Whether every message sent has its PubAck (or refusal, its callback over) within `d`.
  bool complete_within(std::chrono::steady_clock::duration d) {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = std::max<std::int64_t>(
        1, std::chrono::ceil<std::chrono::milliseconds>(d).count());  // 0 would mean no limit
    return js_PublishAsyncComplete(js_.get(), &po) == NATS_OK;
  }

  /// No stream answered for these messages: none captures the subject (JetStream says so
  /// when asked for the streams of that subject: `permanent`), or one does and has not
  /// answered (a server that restarted recovers its streams after it takes connections), or
  /// JetStream is not there: `transient`. One question per subject.
  void settle_no_responders(std::vector<publish_result>& results,
                            const std::vector<std::size_t>& which) {
    for (const std::size_t i : which) {
      const std::string& subject = subjects_[i];
      const bool stream = captured(subject, std::chrono::seconds(5));
      publish_result& r = results[i];
      r.error_class = stream ? errc::transient : errc::permanent;
      r.error = stream ? "no answer from the stream of subject " + subject +
                             " (JetStream starting or recovering?)"
                       : "no JetStream stream captures the subject " + subject;
    }
  }

  /// A message sent without a PubAck by the deadline: in doubt (the stream may have it), unless
  /// no stream captures its subject: then a plain NATS subscriber took it (no "no responders"),
  /// and no PubAck will ever come: `permanent`, not deferred again and again.
  publish_result unanswered(const uuid& id, const std::string& subject) {
    if (captured(subject, std::chrono::seconds(1)))
      return {id, false, errc::in_doubt, "no PubAck by the deadline"};
    return {id, false, errc::permanent,
            "no PubAck, and no JetStream stream captures the subject " + subject +
                " (a plain NATS subscriber holds it?)"};
  }

  /// Whether a stream captures `subject`, asked once per call (`captured_`); a server that does
  /// not say within `wait` counts as capturing it (silence fails nothing for good), and is not
  /// asked again in the call (`asking_`): a frozen server costs one wait, not one per subject.
  bool captured(const std::string& subject, std::chrono::milliseconds wait) {
    if (const auto it = captured_.find(subject); it != captured_.end()) return it->second;
    if (!asking_) return true;
    jsOptions o;
    jsOptions_Init(&o);
    o.Wait = wait.count();
    o.Stream.Info.SubjectsFilter = subject.c_str();
    jsStreamNamesList* names = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = js_StreamNames(&names, js_.get(), &o, &code);
    if (names != nullptr) jsStreamNamesList_Destroy(names);
    if (s != NATS_OK && s != NATS_NOT_FOUND) asking_ = false;
    return captured_.emplace(subject, s != NATS_NOT_FOUND).first->second;
  }

  /// No error callback runs after it (libnats may call a subscription's handler once more after
  /// the subscription is closed: `quiesce`). The connection is closed before the context goes:
  /// its reply subscription is destroyed with libnats' reader joined (`connection::disconnect`).
  void shut() noexcept {
    if (!state_) return;
    const bool quiet = !js_ || quiesce();
    if (conn_) conn_->close();
    js_.reset();
    {
      std::lock_guard lock(state_->mutex);
      state_->open = false;
    }
    if (!quiet) (void)state_.release();  // a callback still runs: its state is left to it
  }

  /// Takes back what waits for a PubAck (a reply then finds nothing and calls nothing) and waits
  /// for the error callbacks that run. True when none runs any more.
  bool quiesce() noexcept {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 1;
    // Nothing pending, or no PubAck state at all (the pending list of libnats 3.4 needs one).
    if (js_PublishAsyncComplete(js_.get(), &po) == NATS_OK) return true;
    natsMsgList pending{};
    if (js_PublishAsyncGetPendingList(&pending, js_.get()) == NATS_OK)
      natsMsgList_Destroy(&pending);
    po.MaxWait = 5000;
    return js_PublishAsyncComplete(js_.get(), &po) == NATS_OK;
  }

  publisher_options options_;
  subject_router router_;
  cloudevents ce_;
  // The error callback's closure: `shut` frees it only once no callback runs.
  std::unique_ptr<detail::ack_state> state_;
  std::unique_ptr<connection> conn_;
  detail::js_ptr js_;
  bool stream_ready_ = false;
  std::vector<std::string> subjects_;                // of the batch in flight; empty: not sent
  std::vector<std::pair<uuid, std::size_t>> by_id_;  // of the batch in flight (`index_batch`)
  enum class sent_state : std::uint8_t { not_sent, twin, sent, refused, unacked };
  std::vector<sent_state> sent_;                    // of the batch in flight
  std::unordered_map<std::string, bool> captured_;  // subject -> a stream captures it (one call)
  bool asking_ = true;  // the server answered the call's stream questions so far
};

static_assert(concepts::routing_transport<publisher>);

}  // namespace outbox::nats
