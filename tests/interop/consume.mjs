// The other side of the interop test (tests/interop/interop_test.sh): an independent reader of
// what the outbox relay published. It consumes the messages from RabbitMQ (amqplib) and from
// Kafka (kafkajs), extracts each one's trace context with OpenTelemetry JS's W3C propagator over
// the message headers, and prints a line per message:
//   got TRANSPORT EVENT_ID TRACE_ID SPAN_ID FLAGS TRACESTATE   (- for none)
// The event id is the AMQP message_id, or the Kafka record's `id` header. Exits 1 when a
// transport failed or did not deliver COUNT messages within the timeout.
//
//   node consume.mjs AMQP_URL QUEUE KAFKA_BOOTSTRAP TOPIC COUNT [TIMEOUT_SECONDS]

import { ROOT_CONTEXT, propagation, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import amqplib from 'amqplib';
import { Kafka, logLevel } from 'kafkajs';

const [amqpUrl, queue, bootstrap, topic, countArg, timeoutArg] = process.argv.slice(2);
if (!topic || !countArg) {
  console.error('usage: node consume.mjs AMQP_URL QUEUE KAFKA_BOOTSTRAP TOPIC COUNT [TIMEOUT_SECONDS]');
  process.exit(2);
}
const count = Number(countArg);
const timeoutMs = Number(timeoutArg ?? 60) * 1000;

propagation.setGlobalPropagator(new W3CTraceContextPropagator());

// Header values are strings from amqplib and Buffers from kafkajs.
const getter = {
  keys: (carrier) => Object.keys(carrier ?? {}),
  get: (carrier, key) => {
    const v = carrier?.[key];
    if (v === undefined || v === null) return undefined;
    if (Array.isArray(v)) return v.map((x) => x.toString());
    return Buffer.isBuffer(v) ? v.toString('utf8') : String(v);
  },
};

function line(transport, eventId, headers) {
  const ctx = propagation.extract(ROOT_CONTEXT, headers ?? {}, getter);
  const sc = trace.getSpanContext(ctx);
  if (!sc || !trace.isSpanContextValid(sc)) return `got ${transport} ${eventId} - - - -`;
  const flags = sc.traceFlags.toString(16).padStart(2, '0');
  const state = sc.traceState?.serialize() || '-';
  return `got ${transport} ${eventId} ${sc.traceId} ${sc.spanId} ${flags} ${state}`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function readAmqp() {
  const conn = await amqplib.connect(amqpUrl);
  try {
    const ch = await conn.createChannel();
    let got = 0;
    const until = Date.now() + timeoutMs;
    while (got < count && Date.now() < until) {
      const msg = await ch.get(queue, { noAck: false });
      if (!msg) {
        await sleep(100);
        continue;
      }
      console.log(line('amqp', msg.properties.messageId ?? '?', msg.properties.headers));
      ch.ack(msg);
      ++got;
    }
    await ch.close();
    if (got < count) throw new Error(`amqp: ${got} of ${count} messages within the timeout`);
  } finally {
    await conn.close();
  }
}

async function readKafka() {
  const toStderr = () => ({ level, log }) => {
    if (level <= logLevel.WARN) console.error(`kafkajs: ${log.message} ${JSON.stringify(log)}`);
  };
  const kafka = new Kafka({
    clientId: 'outbox-interop',
    brokers: bootstrap.split(','),
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    retry: { retries: 5 },
  });
  const consumer = kafka.consumer({ groupId: `outbox-interop-${process.pid}` });
  const seen = new Set(); // a record the producer sent twice counts once
  let resolveDone;
  const done = new Promise((r) => {
    resolveDone = r;
  });
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const id = message.headers?.id?.toString() ?? '?';
        console.log(line('kafka', id, message.headers));
        seen.add(id);
        if (seen.size >= count) resolveDone();
      },
    });
    await Promise.race([done, sleep(timeoutMs)]);
    if (seen.size < count) throw new Error(`kafka: ${seen.size} of ${count} messages within the timeout`);
  } finally {
    await consumer.disconnect();
  }
}

let failed = false;
for (const [name, read] of [['amqp', readAmqp], ['kafka', readKafka]]) {
  try {
    await read();
  } catch (e) {
    console.error(`consume.mjs: ${name}: ${e?.stack ?? e}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
