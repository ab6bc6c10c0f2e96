// TLS (amqps://) against the RabbitMQ node's TLS listener (OUTBOX_TEST_AMQPS; certificates in
// OUTBOX_TEST_AMQP_TLS_DIR, both from scripts/services.sh): the transport conformance suite over
// a verified connection with a client certificate, and each way a TLS configuration can be
// wrong, refused with a clear error that never holds the password.
#define BOOST_TEST_MODULE amqp tls
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fixture.hpp"

using transport_fixtures = std::tuple<outbox::test::amqp_tls_fixture>;

#include "../conformance/transport_conformance.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::test::amqp_tls_fixture;

/// The TLS URL with its host replaced by `host` (the certificate names "localhost" only) and,
/// when given, its port by `port`.
std::string tls_url(const std::string& host, int port = 0) {
  const auto ep = outbox::amqp::parse_url(amqp_tls_fixture::url());
  return "amqps://" + ep.user + ":" + ep.password + "@" + host + ":" +
         std::to_string(port != 0 ? port : ep.port);
}

/// Connects a publisher with `c`; returns the error it throws (fails the test if none).
outbox::error connect_error(outbox::amqp::connection_options c) {
  outbox::amqp::publisher pub(
      {.connection = std::move(c),
       .exchange = "outbox-test-tls-" + outbox::make_uuid_v7().to_string()});
  try {
    pub.connect();
  } catch (const outbox::error& e) {
    return e;
  }
  BOOST_ERROR("the connection was expected to be refused");
  return outbox::error(outbox::errc::permanent, "test", {}, "no error");
}

/// Sets an environment variable for its lifetime (restored even when the test throws).
class env_override {
 public:
  env_override(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
    ::setenv(name, value.c_str(), 1);
  }
  ~env_override() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  env_override(const env_override&) = delete;
  env_override& operator=(const env_override&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

/// The checks every refusal shares: adapter, class, the password never in the text.
void check_refusal(const outbox::error& e, outbox::errc kind, const std::string& says) {
  const std::string what = e.what();
  BOOST_TEST_MESSAGE("refused: " << what);
  BOOST_TEST(e.adapter() == "amqp");
  BOOST_TEST((e.kind() == kind), what);
  BOOST_TEST(what.find(says) != std::string::npos, what);
  // (services.sh gives the broker a distinctive password, so it cannot hide in other words.)
  const auto password = outbox::amqp::parse_url(amqp_tls_fixture::url()).password;
  BOOST_TEST_REQUIRE(!password.empty());
  BOOST_TEST(what.find(password) == std::string::npos, what);
}

/// Publishes one message with a fresh publisher over `c` and says whether it was confirmed.
bool publishes(outbox::amqp::connection_options c) {
  amqp_tls_fixture fx;  // an exchange with a bound queue, so the message is routable
  outbox::amqp::publisher pub({.connection = std::move(c), .exchange = fx.exchange()});
  const auto batch = transport_conformance::make_messages(1);
  const auto r = pub.publish(batch, std::chrono::steady_clock::now() + 10s);
  return r.size() == 1 && r[0].confirmed;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(amqp_tls)

BOOST_AUTO_TEST_CASE(the_test_environment_has_its_certificates) {
  for (const char* f : {"ca.pem", "client.pem", "client.key", "other-ca.pem", "other-client.pem",
                        "other-client.key", "client-encrypted.key"})
    BOOST_TEST(std::filesystem::exists(amqp_tls_fixture::tls_file(f)),
               amqp_tls_fixture::tls_file(f) << " (set OUTBOX_TEST_AMQP_TLS_DIR)");
}

BOOST_AUTO_TEST_CASE(without_a_ca_file_the_system_trust_store_is_used_and_refuses_a_private_ca) {
  // The default: verification on, the system's CAs, which do not include the test CA.
  const auto e = connect_error({.url = amqp_tls_fixture::url()});
  check_refusal(e, outbox::errc::misconfigured, "the broker's certificate is not trusted: ");
  BOOST_TEST(std::string(e.what()).find("amqps://localhost:") != std::string::npos, e.what());
}

BOOST_AUTO_TEST_CASE(without_a_ca_file_a_ca_in_the_system_trust_store_is_trusted) {
  // OpenSSL's default paths honour SSL_CERT_FILE: with the test CA there, no ca_cert is needed.
  const env_override cert_file("SSL_CERT_FILE", amqp_tls_fixture::tls_file("ca.pem"));
  BOOST_TEST(publishes({.url = amqp_tls_fixture::url()}));
}

BOOST_AUTO_TEST_CASE(a_broker_certificate_from_another_ca_is_refused) {
  const auto e = connect_error({.url = amqp_tls_fixture::url(),
                                .tls = {.ca_cert = amqp_tls_fixture::tls_file("other-ca.pem")}});
  check_refusal(e, outbox::errc::misconfigured, "the broker's certificate is not trusted: ");
}

BOOST_AUTO_TEST_CASE(a_certificate_for_another_host_name_is_refused_unless_told_otherwise) {
  // The broker's certificate names "localhost"; 127.0.0.1 is the same broker by another name.
  const auto ca = amqp_tls_fixture::tls_file("ca.pem");
  const auto e = connect_error({.url = tls_url("127.0.0.1"), .tls = {.ca_cert = ca}});
  check_refusal(e, outbox::errc::misconfigured, "not issued for 127.0.0.1");
  BOOST_TEST(
      publishes({.url = tls_url("127.0.0.1"), .tls = {.ca_cert = ca, .verify_hostname = false}}));
}

BOOST_AUTO_TEST_CASE(verification_turned_off_accepts_the_broker_without_a_ca) {
  BOOST_TEST(publishes({.url = amqp_tls_fixture::url(), .tls = {.verify_peer = false}}));
}

BOOST_AUTO_TEST_CASE(the_ca_alone_without_a_client_certificate_is_enough_for_this_broker) {
  // The broker verifies client certificates when shown (verify_peer) but does not require one.
  BOOST_TEST(publishes(
      {.url = amqp_tls_fixture::url(), .tls = {.ca_cert = amqp_tls_fixture::tls_file("ca.pem")}}));
}

BOOST_AUTO_TEST_CASE(a_client_certificate_the_broker_does_not_trust_is_refused) {
  const auto e =
      connect_error({.url = amqp_tls_fixture::url(),
                     .tls = {.ca_cert = amqp_tls_fixture::tls_file("ca.pem"),
                             .client_cert = amqp_tls_fixture::tls_file("other-client.pem"),
                             .client_key = amqp_tls_fixture::tls_file("other-client.key")}});
  // The broker's alert names the reason (TLS 1.3: it arrives after the handshake, at the login).
  check_refusal(e, outbox::errc::misconfigured, "unknown ca");
}

BOOST_AUTO_TEST_CASE(bad_tls_files_are_misconfigured_before_anything_is_sent) {
  const auto ca = amqp_tls_fixture::tls_file("ca.pem");
  check_refusal(
      connect_error({.url = amqp_tls_fixture::url(), .tls = {.ca_cert = ca + ".missing"}}),
      outbox::errc::misconfigured, "cannot load the CA file");
  // A passphrase-protected key fails (it must not prompt on the terminal).
  check_refusal(
      connect_error({.url = amqp_tls_fixture::url(),
                     .tls = {.ca_cert = ca,
                             .client_cert = amqp_tls_fixture::tls_file("client.pem"),
                             .client_key = amqp_tls_fixture::tls_file("client-encrypted.key")}}),
      outbox::errc::misconfigured, "cannot load the client certificate");
  // A key that does not belong to the certificate.
  check_refusal(
      connect_error({.url = amqp_tls_fixture::url(),
                     .tls = {.ca_cert = ca,
                             .client_cert = amqp_tls_fixture::tls_file("client.pem"),
                             .client_key = amqp_tls_fixture::tls_file("other-client.key")}}),
      outbox::errc::misconfigured, "cannot load the client certificate");
}

BOOST_AUTO_TEST_CASE(contradictory_options_are_refused_at_construction) {
  const auto ca = amqp_tls_fixture::tls_file("ca.pem");
  // TLS options with a plain amqp:// URL: never silently plain TCP.
  try {
    outbox::amqp::publisher pub(
        {.connection = {.url = outbox::test::amqp_fixture::url(), .tls = {.ca_cert = ca}}});
    BOOST_ERROR("TLS options with amqp:// must be refused");
  } catch (const outbox::error& e) {
    check_refusal(e, outbox::errc::misconfigured, "not amqps://");
  }
  try {
    outbox::amqp::receiver rcv(
        {.connection = {.url = amqp_tls_fixture::url(), .tls = {.client_cert = ca}}, .queue = "q"});
    BOOST_ERROR("a client certificate without its key must be refused");
  } catch (const outbox::error& e) {
    check_refusal(e, outbox::errc::misconfigured, "go together");
  }
  // Any name accepted from any public CA: no authentication at all.
  try {
    outbox::amqp::publisher pub(
        {.connection = {.url = amqp_tls_fixture::url(), .tls = {.verify_hostname = false}}});
    BOOST_ERROR("verify_hostname = false with the system's CAs must be refused");
  } catch (const outbox::error& e) {
    check_refusal(e, outbox::errc::misconfigured, "needs a ca_cert");
  }
}

BOOST_AUTO_TEST_CASE(an_amqps_url_on_the_plain_port_is_a_handshake_failure) {
  const auto plain = outbox::amqp::parse_url(outbox::test::amqp_fixture::url());
  const auto e = connect_error({.url = tls_url("localhost", plain.port),
                                .tls = {.ca_cert = amqp_tls_fixture::tls_file("ca.pem")}});
  check_refusal(e, outbox::errc::misconfigured, "TLS handshake failed");
}

BOOST_AUTO_TEST_CASE(a_cut_tls_connection_fails_the_batch_and_the_next_publish_reconnects) {
  amqp_tls_fixture fx;
  auto& pub = fx.publisher();
  const auto first = transport_conformance::make_messages(3);
  for (const auto& r : pub.publish(first, transport_conformance::deadline()))
    BOOST_TEST(r.confirmed);
  BOOST_TEST(pub.connections() == 1u);
  ::shutdown(amqp_get_sockfd(pub.native_handle()), SHUT_RDWR);
  const auto second = transport_conformance::make_messages(3);
  // Nothing written was answered (the connection was gone): `transient`, no attempt counted.
  try {
    for (const auto& r : pub.publish(second, transport_conformance::deadline()))
      BOOST_TEST(!r.confirmed);
    BOOST_ERROR("a publish on a cut connection was expected to throw transient");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
  }
  for (const auto& r : pub.publish(second, transport_conformance::deadline()))
    BOOST_TEST(r.confirmed, r.error);
  BOOST_TEST(pub.connections() == 2u);
  // Everything confirmed arrives (the three of the failed attempt may or may not have: copies).
  std::set<outbox::uuid> confirmed;
  for (const auto* batch : {&first, &second})
    for (const auto& m : *batch) confirmed.insert(m.id);
  std::set<outbox::uuid> got;
  const auto until = transport_conformance::deadline();
  for (auto now = std::chrono::steady_clock::now(); got.size() < confirmed.size() && now < until;
       now = std::chrono::steady_clock::now())
    if (auto d = fx.receiver().receive(std::chrono::ceil<std::chrono::milliseconds>(until - now))) {
      got.insert(d->msg.id);
      fx.receiver().ack(*d);
    }
  BOOST_TEST((got == confirmed));
}

BOOST_AUTO_TEST_CASE(a_tls_connection_keeps_working_and_reconnecting_after_a_move) {
  // OpenSSL's verify callback writes into state the connection owns: it must follow a move.
  std::vector<outbox::amqp::connection> conns;
  for (int i = 0; i < 3; ++i) {  // the vector moves the first ones as it grows
    outbox::amqp::connection c(amqp_tls_fixture::connection());
    c.ensure();
    conns.push_back(std::move(c));
  }
  for (auto& c : conns) {
    BOOST_TEST_REQUIRE(c.open());
    outbox::amqp::connection moved(std::move(c));
    amqp_exchange_declare(moved.state(), outbox::amqp::connection::channel,
                          outbox::amqp::bytes("amq.topic"), outbox::amqp::bytes("topic"), 1, 0, 0,
                          0, amqp_empty_table);
    moved.check(amqp_get_rpc_reply(moved.state()), "exchange.declare (passive)");
    moved.drop();
    BOOST_TEST(moved.ensure());  // a new TLS handshake after the move
    BOOST_TEST(moved.generation() == 2u);
    c = std::move(moved);
  }
  // A refusal found by the verify callback of a moved connection still names its reason.
  outbox::amqp::connection untrusted(
      {.url = amqp_tls_fixture::url(),
       .tls = {.ca_cert = amqp_tls_fixture::tls_file("other-ca.pem")}});
  outbox::amqp::connection moved(std::move(untrusted));
  try {
    moved.ensure();
    BOOST_ERROR("the broker's certificate was expected to be refused");
  } catch (const outbox::error& e) {
    check_refusal(e, outbox::errc::misconfigured, "the broker's certificate is not trusted: ");
  }
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_AMQPS")
