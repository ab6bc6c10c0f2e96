// The core's tests (test_core, module in ../core_test.cpp): the CloudEvents mapping
// (include/outbox/cloudevents.hpp) that every transport uses: options checked at
// construction, what cannot be mapped, the JSON format both ways, RFC 3339 times, and why an
// incomplete event is refused. The transports' round trips are in the transport conformance
// suite.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include <outbox/cloudevents.hpp>

using outbox::cloudevents;
using outbox::cloudevents_mode;

namespace {
outbox::message sample() {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = "42";
  m.event_type = "order.placed";
  m.payload = R"({"total":12.50})";
  m.created_at = outbox::time_point{} + std::chrono::nanoseconds(1'765'000'000'120'000'000LL);
  return m;
}
bool misconfigured(const outbox::error& e) { return e.kind() == outbox::errc::misconfigured; }
}  // namespace

BOOST_AUTO_TEST_SUITE(cloudevents_mapping)

BOOST_AUTO_TEST_CASE(a_source_that_is_no_uri_reference_is_refused_at_construction) {
  for (const char* bad : {"", "orders service", ":orders", "1x:orders", "/a%zz", "/[::1]", "/é"})
    BOOST_CHECK_EXCEPTION(cloudevents({cloudevents_mode::binary, bad}), outbox::error,
                          misconfigured);
  for (const char* good : {"/orders-service", "urn:example:orders", "https://example.com/o?x=1#f",
                           "orders", "//host:80/p", "http://[::1]/o", "/a%20b"})
    BOOST_CHECK_NO_THROW(cloudevents({cloudevents_mode::structured, good}));
  BOOST_CHECK_NO_THROW(cloudevents({cloudevents_mode::off, ""}));  // off: nothing to check
}

BOOST_AUTO_TEST_CASE(headers_that_are_no_extension_names_or_collide_cannot_be_mapped) {
  const cloudevents ce({cloudevents_mode::binary, "/o"});
  auto m = sample();
  BOOST_TEST(ce.unmappable(m).empty());
  m.headers = {{"tenant", "t1"}, {"traceparent", "00-x"}, {"dataschema", "/schemas/order"}};
  BOOST_TEST(ce.unmappable(m).empty());
  m.headers[std::string(outbox::predecessor_header)] = m.id.to_string();  // carried renamed
  BOOST_TEST(ce.unmappable(m).empty());
  for (const char* bad :
       {"Tenant", "x-tenant", "ce_id", "a.b", "id", "source", "time", "subject", "type",
        "datacontenttype", "specversion", "aggregatetype", "outboxpredecessor"}) {
    m.headers = {{bad, "v"}};
    BOOST_TEST(!ce.unmappable(m).empty(), bad);
  }
  m.headers = {{"dataschema", "not a uri"}};
  BOOST_TEST(ce.unmappable(m).find("dataschema") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(attributes_carry_the_event_and_time_keeps_its_fraction) {
  const cloudevents ce({cloudevents_mode::binary, "/orders-service"});
  auto m = sample();
  m.headers = {{"tenant", "t1"}, {"dataschema", "/s"}};
  outbox::header_map a;
  for (const auto& [k, v] : ce.attributes(m)) a.emplace(std::string(k), v);
  BOOST_TEST(a.at("specversion") == "1.0");
  BOOST_TEST(a.at("id") == m.id.to_string());
  BOOST_TEST(a.at("source") == "/orders-service");
  BOOST_TEST(a.at("type") == "order.placed");
  BOOST_TEST(a.at("subject") == "42");
  BOOST_TEST(a.at("time") == "2025-12-06T05:46:40.12Z");
  BOOST_TEST(a.at("datacontenttype") == "application/json");
  BOOST_TEST(a.at("aggregatetype") == "order");
  BOOST_TEST(a.at("tenant") == "t1");
  BOOST_TEST(a.at("dataschema") == "/s");
  BOOST_TEST(outbox::detail::ce::rfc3339(outbox::time_point{}) == "1970-01-01T00:00:00Z");
  const auto t = outbox::detail::ce::parse_rfc3339("2025-12-06T06:46:40.120000000+01:00");
  BOOST_TEST_REQUIRE(t.has_value());
  BOOST_TEST((*t == m.created_at));
  for (const char* bad : {"2025-12-06", "2025-13-06T00:00:00Z", "2025-12-06T00:00:00",
                          "2025-12-06T00:00:00.Z", "2025-02-30T00:00:00Z"})
    BOOST_TEST(!outbox::detail::ce::parse_rfc3339(bad).has_value(), bad);
}

BOOST_AUTO_TEST_CASE(the_json_format_embeds_json_and_base64s_the_rest_both_ways_exactly) {
  const cloudevents ce({cloudevents_mode::structured, "/o"});
  auto m = sample();
  const auto json = ce.structured(m);
  BOOST_TEST(json.ends_with(R"(,"data":{"total":12.50}})"));  // the bytes as written
  outbox::message back;
  BOOST_TEST(outbox::decode_structured(json, back) == "");
  BOOST_TEST(back.payload == m.payload);
  BOOST_TEST((back.created_at == m.created_at));
  m.payload = " [1] ";  // white space around: not embedded, or it would not come back exactly
  BOOST_TEST(ce.structured(m).find("data_base64") != std::string::npos);
  m.content_type = "application/octet-stream";
  m.payload = std::string("\0\xff\x80z", 4);
  const auto bin = ce.structured(m);
  BOOST_TEST(bin.find(R"("data_base64":"AP+Aeg==")") != std::string::npos);
  BOOST_TEST(outbox::decode_structured(bin, back) == "");
  BOOST_TEST(back.payload == m.payload);
  BOOST_TEST(back.content_type == "application/octet-stream");
}

BOOST_AUTO_TEST_CASE(an_incomplete_event_is_refused_with_the_attribute_it_lacks) {
  outbox::message m;
  BOOST_TEST(outbox::decode_structured(R"({"specversion":"1.0","id":"1","source":"/s"})", m) ==
             "not a CloudEvent: the required attribute type is missing");
  BOOST_TEST(outbox::decode_structured(R"({"specversion":"1.0","id":"1","type":"t"})", m) ==
             "not a CloudEvent: the required attribute source is missing");
  BOOST_TEST(
      outbox::decode_structured(R"({"specversion":"0.3","id":"1","source":"/s","type":"t"})", m)
          .find("not 1.0") != std::string::npos);
  BOOST_TEST(outbox::decode_structured(R"([1])", m).find("not a JSON object") != std::string::npos);
  BOOST_TEST(outbox::decode_structured(
                 R"({"specversion":"1.0","id":"1","source":"/s","type":"t","time":"yesterday"})", m)
                 .find("RFC 3339") != std::string::npos);
  BOOST_TEST(outbox::decode_attributes({{"specversion", "1.0"}, {"source", "/s"}, {"type", "t"}},
                                       "", "", m) ==
             "not a CloudEvent: the required attribute id is missing");
}

BOOST_AUTO_TEST_CASE(a_foreign_id_maps_to_one_uuid_per_source_and_id) {
  outbox::message a, b, c;
  const outbox::header_map attrs{
      {"specversion", "1.0"}, {"id", "A-1"}, {"source", "/s"}, {"type", "t"}};
  BOOST_TEST(outbox::decode_attributes(attrs, "", "{}", a) == "");
  BOOST_TEST(outbox::decode_attributes(attrs, "", "{}", b) == "");
  BOOST_TEST((a.id == b.id));  // a redelivery dedups in the inbox
  BOOST_TEST(a.id.version() == 8);
  auto other = attrs;
  other["source"] = "/t";
  BOOST_TEST(outbox::decode_attributes(other, "", "{}", c) == "");
  BOOST_TEST((a.id != c.id));  // the same id from another source is another event
  BOOST_TEST(a.headers.at(std::string(outbox::foreign_id_header)) == "A-1");
}

BOOST_AUTO_TEST_SUITE_END()
