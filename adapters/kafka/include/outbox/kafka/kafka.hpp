#pragma once
/// @file
/// The Kafka transport: `publisher` (relay side, an idempotent producer) and `receiver`
/// (consumer side, a consumer-group member), and `mock_cluster` for tests and demos.

#include <outbox/kafka/mock_cluster.hpp>
#include <outbox/kafka/protocol.hpp>
#include <outbox/kafka/publisher.hpp>
#include <outbox/kafka/receiver.hpp>
