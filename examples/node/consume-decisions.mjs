// A chat service's side of the moderator, with the stock kafkajs client (pure JavaScript).
//
// It reads the decisions topic (moderator/schemas/decision.schema.json) and does to each message
// what its decision says: `allow` shows it, `nudge` shows it and nudges its sender, `block` hides
// it, and `review` holds it until the message's final decision (`final: true`, same message_id)
// arrives, or until its `review.due_at_ms` has passed, when it applies `review.fallback` itself
// (the moderator publishes that fallback as a final decision about a second after the due time;
// a chat service applies it alone only when the moderator is late, GRACE_MS later).
//
// Decisions come at least once, so everything is keyed by message_id: a repeated decision changes
// nothing, and a final decision changes what the chat shows only when it differs from what it
// already shows (a fallback applied here, then a verdict the moderator had made: the verdict wins).
//
// One line on stdout per thing done to the chat: `<show|nudge|hide|hold> <message_id> <why>`.
// Held messages live in this process: a chat service keeps them with its messages, so that a
// restart keeps its fallback timers too (the final decision still comes either way).
//
//   node examples/node/consume-decisions.mjs --bootstrap 127.0.0.1:9092
import { parseArgs } from 'node:util';

import kafkajs from 'kafkajs';

const { Kafka, logLevel } = kafkajs;

const SHOWN = { allow: 'show', nudge: 'nudge', block: 'hide' }; // a policy's own action: hidden
const GRACE_MS = 5000; // past due_at_ms before applying the fallback here: the moderator's is coming
const TICK_MS = 200; // how often held messages are checked against the clock

/** What the chat shows, by message_id; fed decisions and the clock, it prints what it does. */
class Chat {
  constructor(print = (line) => process.stdout.write(`${line}\n`)) {
    this.print = print;
    this.messages = new Map(); // message_id -> {shown (null while held), dueAtMs, fallback, final}
    this.held = new Map();
  }

  onDecision(decision) {
    const id = decision.message_id;
    let message = this.messages.get(id);
    if (decision.final) {
      if (message?.final) return; // a repeated final decision
      if (!message) this.messages.set(id, (message = { shown: null }));
      message.final = true;
      this.apply(id, message, decision.action, `final:${decision.reason}`);
    } else if (!message) { // the first decision; a repeat (or one after its final) is ignored
      message = { shown: null, final: false };
      this.messages.set(id, message);
      if (decision.action === 'review') {
        message.dueAtMs = decision.review.due_at_ms;
        message.fallback = decision.review.fallback;
        this.held.set(id, message);
        this.print(`hold ${id} due_at_ms=${message.dueAtMs} fallback=${message.fallback}`);
      } else {
        this.apply(id, message, decision.action, 'decision');
      }
    }
  }

  /** Apply the fallback of each held message whose final decision is overdue. */
  onClock(nowMs) {
    for (const [id, message] of this.held) {
      if (nowMs >= message.dueAtMs + GRACE_MS) this.apply(id, message, message.fallback, 'fallback');
    }
  }

  apply(id, message, action, why) {
    this.held.delete(id);
    const shown = SHOWN[action] ?? 'hide';
    if (shown !== message.shown) {
      message.shown = shown;
      this.print(`${shown} ${id} ${why}`);
    }
  }
}

/** The decision in a record's value, or null for anything else on the topic. */
function readDecision(value) {
  let decision = null;
  try {
    decision = JSON.parse(value?.toString() ?? '');
  } catch {
    return null;
  }
  return typeof decision?.message_id === 'string' ? decision : null;
}

// kafkajs logs to stdout by default: its warnings go to stderr here, stdout is the chat's.
const toStderr = () => ({ namespace, log }) =>
  process.stderr.write(`kafkajs ${namespace}: ${log.message}\n`);

async function main() {
  const { values } = parseArgs({
    options: {
      bootstrap: { type: 'string', default: '127.0.0.1:9092' },
      topic: { type: 'string', default: 'chat.decisions' },
      group: { type: 'string', default: 'chat-service-node' }, // a group's members share one client
      'max-messages': { type: 'string', default: '0' }, // stop after this many, once none is held
      timeout: { type: 'string', default: '0' }, // stop after this many seconds
    },
  });
  const maxMessages = Number(values['max-messages']);
  const timeoutS = Number(values.timeout);
  const kafka = new Kafka({
    clientId: 'chat-service',
    brokers: values.bootstrap.split(','),
    logLevel: logLevel.WARN,
    logCreator: toStderr,
  });
  // A dead instance's partitions move on after the session timeout.
  const consumer = kafka.consumer({ groupId: values.group, sessionTimeout: 10000 });
  const chat = new Chat();
  let read = 0;
  let stopping = false;
  let finish;
  const finished = new Promise((resolve) => {
    finish = (code) => {
      stopping = true;
      resolve(code);
    };
  });
  const tick = () => {
    chat.onClock(Date.now());
    if (maxMessages > 0 && read >= maxMessages && chat.held.size === 0) finish(0);
  };
  await consumer.connect();
  await consumer.subscribe({ topics: [values.topic], fromBeginning: true });
  await consumer.run({
    eachBatchAutoResolve: false, // an offset is committed once its decision is done
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      for (const message of batch.messages) {
        if (stopping || !isRunning() || isStale()) break;
        const decision = readDecision(message.value);
        if (decision) chat.onDecision(decision);
        else process.stderr.write(`not a decision at offset ${message.offset}: skipped\n`);
        resolveOffset(message.offset);
        read += 1;
        tick();
      }
      await heartbeat();
    },
  });
  const ticker = setInterval(tick, TICK_MS);
  const timer = timeoutS > 0 && setTimeout(() => {
    process.stderr.write(`stopped after ${timeoutS} s: ${read} records read\n`);
    finish(maxMessages > 0 ? 1 : 0);
  }, timeoutS * 1000);
  process.once('SIGINT', () => finish(130));
  process.once('SIGTERM', () => finish(143));
  const code = await finished;
  clearInterval(ticker);
  clearTimeout(timer);
  await consumer.disconnect(); // commits the resolved offsets
  return code;
}

process.exitCode = await main();
