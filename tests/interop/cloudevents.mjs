// The CloudEvents side of the interop test (tests/interop/interop_test.sh): reads what the relay
// published in CloudEvents binary and structured mode, from RabbitMQ (amqplib) and Kafka
// (kafkajs), with the CloudEvents SDK for JavaScript (`cloudevents` on npm): Kafka records
// through its Kafka binding (`Kafka.toEvent`), AMQP messages through its HTTP binding
// (`HTTP.toEvent`, the `cloudEvents:` application properties renamed to `ce-` headers, the
// content_type property as `content-type`). Each event must pass the SDK's own validation
// (`validate()`), and its SDK time must be the wire time parsed. Prints a line per event:
//   got TRANSPORT MODE ID TYPE SOURCE SUBJECT TIME DATA_HEX
// TIME is the wire's RFC 3339 text (the SDK keeps milliseconds only). Exits 1 when a transport
// failed or did not deliver COUNT events within the timeout.
//
//   node cloudevents.mjs AMQP_URL QUEUE KAFKA_BOOTSTRAP TOPIC COUNT [TIMEOUT_SECONDS]

import amqplib from 'amqplib';
import { HTTP, Kafka as KafkaBinding } from 'cloudevents';
import { Kafka, logLevel } from 'kafkajs';

const [amqpUrl, queue, bootstrap, topic, countArg, timeoutArg] = process.argv.slice(2);
if (!topic || !countArg) {
  console.error('usage: node cloudevents.mjs AMQP_URL QUEUE KAFKA_BOOTSTRAP TOPIC COUNT [TIMEOUT_SECONDS]');
  process.exit(2);
}
const count = Number(countArg);
const timeoutMs = Number(timeoutArg ?? 60) * 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The event's data as bytes: `data_base64` decoded, a Buffer or typed array as it is, a string as UTF-8, parsed JSON
// as JSON text (the relay embeds JSON payloads that have no spaces, so the text is the same).
function dataHex(ev) {
  if (ev.data_base64) return Buffer.from(ev.data_base64, 'base64').toString('hex');
  const d = ev.data;
  if (d === undefined || d === null) return '-';
  if (Buffer.isBuffer(d) || d instanceof Uint8Array) return Buffer.from(d).toString('hex');
  if (typeof d === 'string') return Buffer.from(d, 'utf8').toString('hex');
  return Buffer.from(JSON.stringify(d), 'utf8').toString('hex');
}

function line(transport, mode, ev, wireTime) {
  ev.validate(); // throws a ValidationError when the SDK finds the event invalid
  if (ev.specversion !== '1.0') throw new Error(`specversion ${ev.specversion}`);
  if (ev.time !== new Date(wireTime).toISOString())
    throw new Error(`SDK time ${ev.time} is not the wire time ${wireTime}`);
  return `got ${transport} ${mode} ${ev.id} ${ev.type} ${ev.source} ${ev.subject} ${wireTime} ${dataHex(ev)}`;
}

async function readAmqp() {
  const conn = await amqplib.connect(amqpUrl);
  try {
    const ch = await conn.createChannel();
    let got = 0;
    const until = Date.now() + timeoutMs;
    while (got < count && Date.now() < until) {
      const msg = await ch.get(queue, { noAck: false });
      if (!msg) {
        await sleep(50);
        continue;
      }
      const headers = {};
      for (const [k, v] of Object.entries(msg.properties.headers ?? {}))
        if (k.startsWith('cloudEvents:')) headers[`ce-${k.slice('cloudEvents:'.length)}`] = String(v);
      if (msg.properties.contentType) headers['content-type'] = msg.properties.contentType;
      const structured = headers['content-type']?.startsWith('application/cloudevents+json');
      // The SDK parses a structured body from text, a binary one from its bytes.
      const ev = HTTP.toEvent({ headers, body: structured ? msg.content.toString() : msg.content });
      const wireTime = structured ? JSON.parse(msg.content.toString()).time : headers['ce-time'];
      console.log(line('amqp', structured ? 'structured' : 'binary', ev, wireTime));
      ch.ack(msg);
      ++got;
    }
    await ch.close();
    if (got < count) throw new Error(`amqp: ${got} of ${count} events within the timeout`);
  } finally {
    await conn.close();
  }
}

async function readKafka() {
  const kafka = new Kafka({
    clientId: 'outbox-interop-ce',
    brokers: bootstrap.split(','),
    logLevel: logLevel.WARN,
    retry: { retries: 5 },
  });
  const consumer = kafka.consumer({ groupId: `outbox-interop-ce-${process.pid}` });
  const seen = new Set(); // a record the producer sent twice counts once
  let resolveDone;
  const done = new Promise((r) => {
    resolveDone = r;
  });
  let failure;
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        try {
          const headers = {};
          for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = v?.toString();
          const structured = headers['content-type']?.startsWith('application/cloudevents+json');
          const ev = KafkaBinding.toEvent({ headers, key: message.key?.toString(), value: message.value });
          const wireTime = structured ? JSON.parse(message.value.toString()).time : headers.ce_time;
          const text = line('kafka', structured ? 'structured' : 'binary', ev, wireTime);
          if (!seen.has(ev.id)) console.log(text);
          seen.add(ev.id);
        } catch (e) {
          failure = e;
          resolveDone();
        }
        if (seen.size >= count) resolveDone();
      },
    });
    await Promise.race([done, sleep(timeoutMs)]);
    if (failure) throw failure;
    if (seen.size < count) throw new Error(`kafka: ${seen.size} of ${count} events within the timeout`);
  } finally {
    await consumer.disconnect();
  }
}

let failed = false;
for (const [name, read] of [['amqp', readAmqp], ['kafka', readKafka]]) {
  try {
    await read();
  } catch (e) {
    console.error(`cloudevents.mjs: ${name}: ${e?.stack ?? e}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
