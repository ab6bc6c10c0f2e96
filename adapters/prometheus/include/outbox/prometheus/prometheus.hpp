#pragma once
/// @file
/// The Prometheus metrics adapter (prometheus-cpp): relay, backlog and consumer metrics in a
/// `prometheus::Registry`, under the names of `outbox relay`'s /metrics.

#include <outbox/prometheus/backlog_metrics.hpp>
#include <outbox/prometheus/consumer_metrics.hpp>
#include <outbox/prometheus/labels.hpp>
#include <outbox/prometheus/relay_metrics.hpp>
