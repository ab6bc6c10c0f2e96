#pragma once
/// @file
/// The AMQP 0-9-1 (RabbitMQ) transport: `publisher` (relay side) and `receiver` (consumer side).

#include <outbox/amqp/connection.hpp>
#include <outbox/amqp/protocol.hpp>
#include <outbox/amqp/publisher.hpp>
#include <outbox/amqp/receiver.hpp>
