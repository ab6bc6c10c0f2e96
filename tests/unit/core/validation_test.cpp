// The core's tests (test_core, module in ../core_test.cpp): event validation, and the
// CloudEvents mapping every transport uses (include/outbox/cloudevents.hpp; the transports'
// round trips are in the transport conformance suite).
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cctype>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <outbox/cloudevents.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/store_options.hpp>
#include <outbox/testing/duplicating_receiver.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../../support/errors.hpp"

using namespace std::chrono_literals;

// ---- validation --------------------------------------------------------------------------------

namespace {
outbox::event good() { return {"order", "42", "order_placed", R"({"total":1})", {{"k", "v"}}}; }

std::string refused_field(const outbox::event& e, const outbox::validation_limits& l = {}) {
  try {
    outbox::validate(e, l);
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::invalid_input));
    BOOST_TEST((err.code() == outbox::errc::invalid_input));
    return err.field();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(validation)

BOOST_AUTO_TEST_CASE(accepts_a_well_formed_event) { BOOST_TEST(refused_field(good()).empty()); }

BOOST_AUTO_TEST_CASE(refuses_empty_or_oversized_names_naming_the_field) {
  auto e = good();
  e.aggregate_type.clear();
  BOOST_TEST(refused_field(e) == "aggregate_type");
  e = good();
  e.aggregate_id = std::string(256, 'x');
  BOOST_TEST(refused_field(e) == "aggregate_id");
  e = good();
  e.event_type = "";
  BOOST_TEST(refused_field(e) == "event_type");
  e = good();
  e.aggregate_id = std::string(255, 'x');
  BOOST_TEST(refused_field(e).empty());
  e.event_type = "bad\xff";
  BOOST_TEST(refused_field(e) == "event_type");
  e = good();
  e.aggregate_type = std::string("ord\0er", 6);
  BOOST_TEST(refused_field(e) == "aggregate_type");
}

BOOST_AUTO_TEST_CASE(refuses_invalid_json_and_payloads_over_the_limit) {
  for (const char* bad :
       {"", "{", "{\"a\":}", "not json", "{\"a\":1} trailing", "{'a':1}", "{\"s\":\"\xc3\x28\"}"}) {
    auto e = good();
    e.payload = bad;
    BOOST_TEST(refused_field(e) == "payload", "payload " << bad);
  }
  auto e = good();
  e.payload = "\"" + std::string(100, 'x') + "\"";
  BOOST_TEST(refused_field(e, {.max_payload_bytes = 50}) == "payload");
  BOOST_TEST(refused_field(e, {.max_payload_bytes = 102}).empty());
  e.payload = "[1, 2, {\"nested\": null}, \"caf\xc3\xa9\"]";
  BOOST_TEST(refused_field(e).empty());
  e.payload = R"({"s":"a\u0000b"})";  // valid JSON, not storable
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = R"({"k":[{"a\u0000":1}]})";
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = R"({"s":"\\u0000 is only text here"})";  // an escaped backslash, then text
  BOOST_TEST(refused_field(e).empty());
}

BOOST_AUTO_TEST_CASE(a_payload_of_another_content_type_is_bytes_and_the_type_is_checked) {
  auto e = good();
  BOOST_TEST(e.content_type == "application/json");
  e.content_type = "application/avro";
  e.payload = std::string("\0\x01\xff not json \xc3\x28", 15);
  BOOST_TEST(refused_field(e).empty());  // opaque bytes, NUL and invalid UTF-8 included
  e.payload = std::string(60, '\xff');
  BOOST_TEST(refused_field(e, {.max_payload_bytes = 50}) == "payload");  // the size still counts
  e = good();
  e.payload = "not json";
  for (const char* json_type :
       {"application/json", "Application/JSON; charset=utf-8", "application/cloudevents+json"}) {
    e.content_type = json_type;
    BOOST_TEST(refused_field(e) == "payload", json_type);
    BOOST_TEST(outbox::is_json_content_type(json_type));
  }
  for (const char* other : {"application/avro", "application/x-protobuf", "text/plain",
                            "application/jsonx", "application/json-seq"})
    BOOST_TEST(!outbox::is_json_content_type(other), other);
  for (const std::string& bad :
       {std::string(), std::string("json"), std::string("/json"), std::string("application/"),
        std::string("a/b\n"), std::string("caf\xc3\xa9/x"), std::string(256, 'a') + "/b"}) {
    e = good();
    e.content_type = bad;
    BOOST_TEST(refused_field(e) == "content_type", bad);
  }
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = m.aggregate_id = m.event_type = "x";
  m.payload = std::string("\0\xff", 2);
  m.content_type = "application/octet-stream";
  BOOST_TEST(outbox::unpublishable_reason(m).empty());
  m.content_type = "application/json";
  BOOST_TEST(!outbox::unpublishable_reason(m).empty());
  m.content_type = "";
  BOOST_TEST(outbox::unpublishable_reason(m).find("content_type") != std::string::npos);
  m.content_type = "application/x;\tq=1";  // a tab between parameters is a media type
  BOOST_TEST(outbox::unpublishable_reason(m).empty());
  m.aggregate_id = std::string("a\0b", 3);  // another program's row: a NUL in a name
  BOOST_TEST(outbox::unpublishable_reason(m).find("NUL") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(refuses_a_payload_nested_past_the_depth_limit_without_recursing) {
  // 30,000 levels in 60 KB, well under the size limit: the old NUL check recursed once per
  // level and overflowed the stack (SIGSEGV inside enqueue).
  auto e = good();
  constexpr int deep = 30'000;
  e.payload = std::string(deep, '[') + R"("\u0000")" + std::string(deep, ']');
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = std::string(deep, '[') + std::string(deep, ']');
  BOOST_TEST(refused_field(e) == "payload");
  // The limit is exact and configurable; objects count like arrays.
  const outbox::validation_limits limits{.max_json_depth = 5};
  e.payload = std::string(5, '[') + std::string(5, ']');
  BOOST_TEST(refused_field(e, limits).empty());
  e.payload = std::string(6, '[') + std::string(6, ']');
  BOOST_TEST(refused_field(e, limits) == "payload");
  e.payload = R"({"a":{"b":{"c":{"d":{"e":1}}}}})";
  BOOST_TEST(refused_field(e, limits).empty());
  e.payload = R"({"a":{"b":{"c":{"d":{"e":[1]}}}}})";
  BOOST_TEST(refused_field(e, limits) == "payload");
  // The default (100, what MySQL's JSON type takes) accepts 100 levels and refuses 101.
  e.payload = std::string(100, '[') + std::string(100, ']');
  BOOST_TEST(refused_field(e).empty());
  e.payload = std::string(101, '[') + std::string(101, ']');
  BOOST_TEST(refused_field(e) == "payload");
  try {
    outbox::validate(e);
  } catch (const outbox::error& err) {
    BOOST_TEST(std::string(err.what()).find("max_json_depth") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(refuses_a_nul_byte_anywhere_in_the_payload) {
  // nlohmann's parser stops at a NUL byte as if the input ended there: {"a":1}\0garbage was
  // accepted, then stored and published as bytes that are not JSON (or cut at the NUL).
  auto e = good();
  for (const std::string& bad :
       {std::string("{\"a\":1}\0garbage", 15), std::string("{\"a\":1}\0", 8),
        std::string("\0{\"a\":1}", 8), std::string("{\"s\":\"a\0b\"}", 11)}) {
    e.payload = bad;
    BOOST_TEST(refused_field(e) == "payload", "payload of " << bad.size() << " bytes");
  }
  e.payload =
      "\xEF\xBB\xBF{\"a\":1}";  // a byte order mark: nlohmann skipped it, PostgreSQL refused
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = "{\"a\":1}  \n";  // trailing white space is JSON
  BOOST_TEST(refused_field(e).empty());
}

BOOST_AUTO_TEST_CASE(refuses_headers_that_are_not_utf8_or_too_large) {
  auto e = good();
  e.headers = {{"ok", "caf\xc3\xa9"}};
  BOOST_TEST(refused_field(e).empty());
  e.headers = {{"bad\xc0\xaf", "v"}};  // overlong encoding of '/'
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"k", "\xed\xa0\x80"}};  // UTF-16 surrogate
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"", "v"}};
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"k", std::string(100, 'v')}};
  BOOST_TEST(refused_field(e, {.max_header_bytes = 50}) == "headers");
  // The relay's predecessor stamp is reserved: an event carrying it would be held back by
  // consumers waiting for a predecessor that never comes.
  e.headers = {{std::string(outbox::predecessor_header), outbox::make_uuid_v7().to_string()}};
  BOOST_TEST(refused_field(e) == "headers");
}

BOOST_AUTO_TEST_CASE(utf8_checker_follows_the_standard) {
  BOOST_TEST(outbox::is_valid_utf8(""));
  BOOST_TEST(outbox::is_valid_utf8("plain ascii"));
  BOOST_TEST(outbox::is_valid_utf8("\xf0\x9f\x98\x80"));   // U+1F600
  BOOST_TEST(outbox::is_valid_utf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  BOOST_TEST(!outbox::is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  BOOST_TEST(!outbox::is_valid_utf8("\xe0\x80\xaf"));      // overlong
  BOOST_TEST(!outbox::is_valid_utf8("\xc3"));              // truncated
  BOOST_TEST(!outbox::is_valid_utf8("\x80"));              // lone continuation
}

// The checker skips ASCII 8 bytes a step: a sequence anywhere in or after such a run is still
// looked at byte by byte, at every offset from the block boundaries.
BOOST_AUTO_TEST_CASE(utf8_checker_finds_a_sequence_at_any_offset_of_an_ascii_run) {
  for (std::size_t at = 0; at <= 24; ++at) {
    const auto with = [&](std::string_view seq) {
      return std::string(at, 'a') + std::string(seq) + std::string(24 - at, 'b');
    };
    BOOST_TEST(outbox::is_valid_utf8(with("\xc3\xa9")), at);
    BOOST_TEST(outbox::is_valid_utf8(with("\xf0\x9f\x98\x80")), at);
    BOOST_TEST(!outbox::is_valid_utf8(with("\xff")), at);
    BOOST_TEST(!outbox::is_valid_utf8(with("\xed\xa0\x80")), at);               // a surrogate
    BOOST_TEST(!outbox::is_valid_utf8(std::string(at, 'a') + "\xe2\x82"), at);  // cut at the end
  }
}

BOOST_AUTO_TEST_CASE(sanitize_text_makes_any_bytes_storable) {
  BOOST_TEST(outbox::sanitize_text("plain") == "plain");
  BOOST_TEST(outbox::sanitize_text("caf\xc3\xa9") == "caf\xc3\xa9");
  BOOST_TEST(outbox::sanitize_text(std::string("a\0b", 3)) == "ab");
  BOOST_TEST(outbox::sanitize_text("bad\xff!") == "bad\xef\xbf\xbd!");
  BOOST_TEST(outbox::sanitize_text("cut\xc3") == "cut\xef\xbf\xbd");
  BOOST_TEST(outbox::is_valid_utf8(outbox::sanitize_text("\xed\xa0\x80\xc0\xaf")));
  BOOST_TEST(outbox::sanitize_text(std::string(5000, 'x')).size() == 2048u);
  BOOST_TEST(outbox::sanitize_text("\xc3\xa9\xc3\xa9", 3) == "\xc3\xa9");  // on a boundary
}

BOOST_AUTO_TEST_CASE(headers_that_are_not_utf8_render_without_throwing) {
  // The dead-letter path renders headers a peer sent (AMQP header values may be bytes): it
  // must not fail on what it keeps.
  const outbox::header_map h{{"ok", "v"}, {"bad", "caf\xe9 \xff"}, {"k\xc0", "x"}};
  std::string text;
  BOOST_CHECK_NO_THROW(text = outbox::headers_to_json(h));
  BOOST_TEST(outbox::is_valid_utf8(text));
  const auto back = outbox::headers_from_json(text);
  BOOST_TEST(back.at("ok") == "v");
  BOOST_TEST(back.size() == 3u);
}

BOOST_AUTO_TEST_CASE(headers_round_trip_through_json) {
  const outbox::header_map h{{"a", "1"}, {"quote", "\"'\\"}, {"u", "caf\xc3\xa9"}};
  BOOST_TEST((outbox::headers_from_json(outbox::headers_to_json(h)) == h));
  BOOST_TEST(outbox::headers_to_json({}) == "{}");
  BOOST_CHECK_THROW((void)outbox::headers_from_json("[1]"), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- CloudEvents: options checked at construction, what cannot be mapped, the JSON format
// both ways, RFC 3339 times, why an incomplete event is refused, foreign ids.

namespace ce_test {
using outbox::cloudevents;
using outbox::cloudevents_mode;
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
  m.headers = {{"tenant", "t1"},
               {"traceparent", "00-x"},
               {"dataschema", "https://example.com/schemas/order"}};
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
  m.headers = {{"dataschema", "/schemas/order"}};  // the spec wants an absolute URI
  BOOST_TEST(ce.unmappable(m).find("absolute URI") != std::string::npos);
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

// Found by the outside attack on issue 39: each was a crash, a silent overflow, lost data or a
// spoofable field before.
BOOST_AUTO_TEST_CASE(hostile_or_out_of_range_events_are_refused_not_misread) {
  outbox::message m;
  const std::string head = R"({"specversion":"1.0","id":"x","source":"/s","type":"t","ext":)";
  std::string deep = head;  // 100,000 levels: dump() recursed until the stack overflowed
  deep.append(100'000, '[').append(100'000, ']') += '}';
  BOOST_TEST(outbox::decode_structured(deep, m).find("nested deeper") != std::string::npos);
  // Years a time_point cannot hold (Go's zero time is year 1) overflowed into other centuries.
  for (const char* t : {"0001-01-01T00:00:00Z", "1677-01-01T00:00:00Z", "2263-01-01T00:00:00Z"})
    BOOST_TEST(!outbox::detail::ce::parse_rfc3339(t).has_value(), t);
  BOOST_TEST(outbox::detail::ce::parse_rfc3339("1700-01-01T00:00:00Z").has_value());
  // A byte order mark: nlohmann skipped it, the raw data reader did not (data came back empty).
  const std::string bom = "\xEF\xBB\xBF";
  BOOST_TEST(outbox::decode_structured(bom + head + R"("e","data":{"v":1}})", m) == "");
  BOOST_TEST(m.payload == R"({"v":1})");
  // A JSON payload starting with one is sent as data_base64 (embedded, the envelope is no JSON).
  const cloudevents ce({cloudevents_mode::structured, "/o"});
  auto bommed = sample();
  bommed.payload = bom + "{}";
  BOOST_TEST(outbox::decode_structured(ce.structured(bommed), m) == "");
  BOOST_TEST(m.payload == bommed.payload);
  // A NUL let ("a", "b\0c") and ("a\0b", "c") derive one id: the inbox would drop one.
  BOOST_TEST(outbox::decode_structured(
                 R"({"specversion":"1.0","id":"b\u0000c","source":"a","type":"t"})", m)
                 .find("NUL") != std::string::npos);
  const outbox::header_map nul{
      {"specversion", "1.0"}, {"id", std::string("b\0c", 3)}, {"source", "a"}, {"type", "t"}};
  BOOST_TEST(outbox::decode_attributes(nul, "", "{}", m).find("NUL") != std::string::npos);
  // An extension named ceid cannot replace the original id a derived one keeps.
  BOOST_TEST(outbox::decode_attributes({{"specversion", "1.0"},
                                        {"id", "A-1"},
                                        {"source", "/s"},
                                        {"type", "t"},
                                        {"ceid", "spoofed"}},
                                       "", "{}", m) == "");
  BOOST_TEST(m.headers.at(std::string(outbox::foreign_id_header)) == "A-1");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace ce_test
