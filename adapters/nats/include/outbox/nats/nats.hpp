#pragma once
/// @file
/// The NATS JetStream transport (`outbox::nats`): publisher and receiver over libnats (cnats).

#include <outbox/nats/connection.hpp>
#include <outbox/nats/protocol.hpp>
#include <outbox/nats/publisher.hpp>
#include <outbox/nats/receiver.hpp>
#include <outbox/nats/stream.hpp>
