#pragma once
// A stand-in for the few opentelemetry-cpp API names examples/trace_with_opentelemetry.cpp
// uses, with the same spellings and signatures, so that the example compiles and runs where the
// SDK is not installed (Debian 12 does not package it). A working W3C propagator and a tracer
// that makes real ids: the example checks that the consumer's span continues the writer's trace.
// Not a tracing library: use opentelemetry-cpp.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace opentelemetry {
namespace nostd {
using string_view = std::string_view;
template <class T>
using shared_ptr = std::shared_ptr<T>;
template <class T>
using unique_ptr = std::unique_ptr<T>;
template <class T, std::size_t N>
using span = std::span<T, N>;
}  // namespace nostd

namespace trace {
/// Trace and span ids as lowercase hex.
struct SpanContext {
  std::string trace, span;
  [[nodiscard]] bool IsValid() const noexcept { return !trace.empty(); }
  [[nodiscard]] std::string trace_id_hex() const { return trace; }
  [[nodiscard]] std::string span_id_hex() const { return span; }
};
enum class SpanKind { kInternal, kServer, kClient, kProducer, kConsumer };
enum class StatusCode { kUnset, kOk, kError };
class Span {
 public:
  explicit Span(SpanContext c) : context_(std::move(c)) {}
  [[nodiscard]] SpanContext GetContext() const noexcept { return context_; }
  void SetStatus(StatusCode code, nostd::string_view = {}) noexcept { status_ = code; }
  void End() noexcept { ended_ = true; }
  [[nodiscard]] bool ended() const noexcept { return ended_; }
  [[nodiscard]] StatusCode status() const noexcept { return status_; }

 private:
  SpanContext context_;
  StatusCode status_ = StatusCode::kUnset;
  bool ended_ = false;
};
}  // namespace trace

namespace context {
/// The active span, as the runtime context holds it.
struct Context {
  nostd::shared_ptr<trace::Span> span{};
};
struct Token {
  Context previous;
  ~Token();
};
class RuntimeContext {
 public:
  static Context GetCurrent() noexcept { return current(); }
  static nostd::unique_ptr<Token> Attach(const Context& c) noexcept {
    auto t = std::make_unique<Token>();
    t->previous = std::exchange(current(), c);
    return t;
  }
  static Context& current() noexcept {
    thread_local Context c;
    return c;
  }
};
inline Token::~Token() { RuntimeContext::current() = previous; }

namespace propagation {
class TextMapCarrier {
 public:
  virtual nostd::string_view Get(nostd::string_view key) const noexcept = 0;
  virtual void Set(nostd::string_view key, nostd::string_view value) noexcept = 0;
  virtual ~TextMapCarrier() = default;
};
/// W3C Trace Context, as opentelemetry-cpp's HttpTraceContext.
class TextMapPropagator {
 public:
  void Inject(TextMapCarrier& carrier, const Context& c) noexcept {
    if (!c.span) return;
    const auto s = c.span->GetContext();
    carrier.Set("traceparent", "00-" + s.trace + "-" + s.span + "-01");
  }
  Context Extract(const TextMapCarrier& carrier, Context& c) noexcept {
    const auto p = carrier.Get("traceparent");
    if (p.size() != 55) return c;
    return Context{std::make_shared<trace::Span>(
        trace::SpanContext{std::string(p.substr(3, 32)), std::string(p.substr(36, 16))})};
  }
};
class GlobalTextMapPropagator {
 public:
  static nostd::shared_ptr<TextMapPropagator> GetGlobalPropagator() noexcept {
    static const auto p = std::make_shared<TextMapPropagator>();
    return p;
  }
};
}  // namespace propagation
}  // namespace context

namespace trace {
struct StartSpanOptions {
  std::variant<SpanContext, context::Context> parent{SpanContext{}};
  SpanKind kind = SpanKind::kInternal;
};
/// Makes spans with fresh ids; a child keeps its parent's trace id.
class Tracer {
 public:
  nostd::shared_ptr<Span> StartSpan(nostd::string_view, const StartSpanOptions& o = {}) noexcept {
    std::string trace;
    if (const auto* c = std::get_if<context::Context>(&o.parent); c && c->span)
      trace = c->span->GetContext().trace;
    else if (const auto* s = std::get_if<SpanContext>(&o.parent); s && s->IsValid())
      trace = s->trace;
    else if (const auto& current = context::RuntimeContext::current(); current.span)
      trace = current.span->GetContext().trace;
    if (trace.empty()) trace = hex(16);
    return std::make_shared<Span>(SpanContext{trace, hex(8)});
  }

 private:
  std::string hex(std::size_t bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < bytes * 2; ++i) out.push_back(digits[rng_() % 16]);
    out[0] = '1';  // never all zero
    return out;
  }
  std::mt19937_64 rng_{std::random_device{}()};
};
class TracerProvider {
 public:
  nostd::shared_ptr<Tracer> GetTracer(nostd::string_view, nostd::string_view = {}) noexcept {
    return tracer_;
  }

 private:
  nostd::shared_ptr<Tracer> tracer_ = std::make_shared<Tracer>();
};
class Provider {
 public:
  static nostd::shared_ptr<TracerProvider> GetTracerProvider() noexcept {
    static const auto p = std::make_shared<TracerProvider>();
    return p;
  }
};
inline context::Context SetSpan(context::Context&, nostd::shared_ptr<Span> span) noexcept {
  return context::Context{std::move(span)};
}
inline nostd::shared_ptr<Span> GetSpan(const context::Context& c) noexcept { return c.span; }
}  // namespace trace
}  // namespace opentelemetry
