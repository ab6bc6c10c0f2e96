// docs/observability.md "Tracing with OpenTelemetry", compiled and run: the page's snippet is
// the regions of this file between the markers "README: begin" and "README: end", joined
// (scripts/check_docs.py checks that they are the same text). It builds against opentelemetry-cpp
// when that is installed, else against examples/support/otel_standin.hpp (the same API names);
// outside the markers: the checks that the consumer's span continued the writer's trace.

#include <cstdio>
#include <iostream>
#include <string>

#include <outbox/outbox.hpp>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

#if __has_include(<opentelemetry/trace/provider.h>)
#include <opentelemetry/context/propagation/global_propagator.h>
#include <opentelemetry/context/runtime_context.h>
#include <opentelemetry/trace/context.h>
#include <opentelemetry/trace/provider.h>
/// The trace id of `c` as 32 hex digits.
std::string trace_id_of(const opentelemetry::trace::SpanContext& c) {
  char buf[32];
  c.trace_id().ToLowerBase16(buf);
  return std::string(buf, 32);
}
#else
#include "support/otel_standin.hpp"
std::string trace_id_of(const opentelemetry::trace::SpanContext& c) { return c.trace_id_hex(); }
#endif

// README: begin
// clang-format off
namespace otel = opentelemetry;

// An outbox::trace_context as OpenTelemetry's propagators read and write it.
struct trace_carrier : otel::context::propagation::TextMapCarrier {
  outbox::trace_context ctx;
  otel::nostd::string_view Get(otel::nostd::string_view key) const noexcept override {
    if (key == outbox::traceparent_header) return ctx.traceparent;
    if (key == outbox::tracestate_header) return ctx.tracestate;
    return {};
  }
  void Set(otel::nostd::string_view key, otel::nostd::string_view value) noexcept override {
    if (key == outbox::traceparent_header) ctx.traceparent = std::string(value);
    if (key == outbox::tracestate_header) ctx.tracestate = std::string(value);
  }
};

// The writer: each event carries the caller's active span.
outbox::trace_context current_trace() {
  trace_carrier carrier;
  auto propagator = otel::context::propagation::GlobalTextMapPropagator::GetGlobalPropagator();
  propagator->Inject(carrier, otel::context::RuntimeContext::GetCurrent());
  return carrier.ctx;
}

// The consumer: a span per delivery, child of the event's context, current while the handler
// runs (so the handler's own spans nest under it), ended with the delivery's outcome.
struct delivery_spans {
  otel::nostd::shared_ptr<otel::trace::Tracer> tracer =
      otel::trace::Provider::GetTracerProvider()->GetTracer("shipping");
  otel::nostd::shared_ptr<otel::trace::Span> span;
  otel::nostd::unique_ptr<otel::context::Token> scope;

  void start(const outbox::message& m) {
    trace_carrier carrier;
    carrier.ctx = m.trace();
    auto current = otel::context::RuntimeContext::GetCurrent();
    auto parent = otel::context::propagation::GlobalTextMapPropagator::GetGlobalPropagator()
                      ->Extract(carrier, current);
    otel::trace::StartSpanOptions options;
    options.kind = otel::trace::SpanKind::kConsumer;
    options.parent = parent;
    span = tracer->StartSpan(m.event_type + " process", options);
    scope = otel::context::RuntimeContext::Attach(otel::trace::SetSpan(parent, span));
  }
  void end(const outbox::delivery_report& r) {
    if (!r.failure.empty()) span->SetStatus(otel::trace::StatusCode::kError, std::string(r.failure));
    span->End();
    scope.reset();
  }
};
// clang-format on
// README: end

int main() try {
  using namespace outbox::testing;
  memory_database db;
  memory_session app(db), relay_sql(db), consumer_sql(db);
  memory_store app_store(app), relay_store(relay_sql), consumer_store(consumer_sql);
  memory_transport broker;

  // The application's request span, active while it places the order.
  auto tracer = otel::trace::Provider::GetTracerProvider()->GetTracer("orders");
  auto request = tracer->StartSpan("POST /orders");
  std::string request_trace = trace_id_of(request->GetContext());
  {
    auto root = otel::context::RuntimeContext::GetCurrent();
    auto scope = otel::context::RuntimeContext::Attach(otel::trace::SetSpan(root, request));
    // README: begin
    // clang-format off
outbox::writer writer(app_store, {.trace_provider = current_trace});
    // clang-format on
    // README: end
    memory_session::transaction tx(app);
    writer.enqueue(app, {.aggregate_type = "order",
                         .aggregate_id = "42",
                         .event_type = "order_placed",
                         .payload = R"({"total":1999})"});
    tx.commit();
  }
  request->End();
  outbox::relay relay(relay_store, broker);
  relay.run_once();

  std::string handler_trace;
  // README: begin
  // clang-format off
delivery_spans spans;
outbox::consumer shipping(consumer_store, broker,
    [&](memory_session&, const outbox::message&) {
      // The delivery's span is current here.
      handler_trace = trace_id_of(
          otel::trace::GetSpan(otel::context::RuntimeContext::GetCurrent())->GetContext());
    },
    {.name = "shipping",
     .on_delivery_start = [&](const outbox::message& m) { spans.start(m); },
     .on_delivery = [&](const outbox::delivery_report& r) { spans.end(r); }});
  // clang-format on
  // README: end
  shipping.poll_once();
  const bool ok = shipping.stats().applied == 1 && handler_trace == request_trace &&
                  trace_id_of(spans.span->GetContext()) == request_trace;
  std::cout << "trace_with_opentelemetry: request trace " << request_trace << ", handler's "
            << handler_trace << ": " << (ok ? "ok" : "FAILED") << "\n";
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "trace_with_opentelemetry: " << e.what() << "\n";
  return 1;
}
