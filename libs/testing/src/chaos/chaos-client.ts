import { sleep } from '../private-redis';
import { SeededRandom } from './random';

/** A turn the API acknowledged (2xx), as the client was told. */
export interface AckedTurn {
  key: string;
  content: string;
  taskId: string;
  userSeq: number;
  replySeq: number;
  reply: string;
}

export interface ConversationRecord {
  conversationId: string;
  acked: AckedTurn[];
  /** Every message content sent under a key that was never acknowledged (may be stored once, or not). */
  unacked: string[];
}

export interface ClientCounts {
  statuses: Record<string, number>;
  connectionErrors: number;
  retriesSameKey: number;
  newKeys: number;
  agentFailed: Record<string, number>;
  doubleSends: number;
}

export interface ClientViolation {
  conversationId: string;
  what: string;
}

const TOPICS = [
  '我跟公司签的劳动合同有问题',
  '上面那份合同里关于竞业协议的部分怎么看?',
  'My landlord wants to end the lease contract early, what can I do?',
  'Is the non-compete clause in my employment contract valid?',
  '租赁合同的押金不退怎么办',
];
const WENT_ON = 'this turn failed and the conversation has gone on since';

/**
 * One user working through a conversation: turns in sequence, each under an Idempotency-Key,
 * retried as docs/http-api.md tells clients to (503 or a lost connection: the same key; the 409
 * "send again" and a 502: a new key), against orchestrator replicas chosen at random.
 */
export class ChaosConversation {
  readonly record: ConversationRecord;
  constructor(
    private readonly index: number,
    private readonly bases: string[],
    private readonly token: string,
    private readonly rnd: SeededRandom,
    private readonly counts: ClientCounts,
    private readonly violations: ClientViolation[],
    private readonly opts: { hangMs: number; giveUpMs: number },
  ) {
    this.record = { conversationId: `chaos${index}x${rnd.token(12)}`, acked: [], unacked: [] };
  }

  /** Sends turns until `until` (a Date.now() value), then finishes the turn in flight. */
  async run(until: () => boolean): Promise<void> {
    if (!(await this.create())) return;
    for (let turn = 1; !until(); turn++) {
      await this.turn(turn);
      await sleep(this.rnd.int(0, 300));
    }
  }

  private async create(): Promise<boolean> {
    const started = Date.now();
    for (;;) {
      const res = await this.call('POST', '/v1/conversations', {
        conversationId: this.record.conversationId,
      });
      if (res && (res.status === 200 || res.status === 201)) {
        if (res.body?.conversationId === this.record.conversationId) return true;
        this.violate(`created under another id: ${JSON.stringify(res.body)}`);
        return false;
      }
      if (Date.now() - started > this.opts.giveUpMs) {
        this.violate('the conversation could not be created');
        return false;
      }
      await sleep(this.rnd.int(100, 600));
    }
  }

  private async turn(turn: number): Promise<void> {
    const topic = this.rnd.pick(TOPICS);
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      const key = `k${this.index}t${turn}a${attempt}${this.rnd.token(8)}`;
      const content = `${topic} (conversation ${this.index}, turn ${turn}, attempt ${attempt})`;
      const outcome = await this.sendUntilAnswered(key, content, started);
      if (outcome === 'acked' || outcome === 'gave-up') return;
      this.record.unacked.push(content);
      this.counts.newKeys += 1;
    }
  }

  private async sendUntilAnswered(
    key: string,
    content: string,
    started: number,
  ): Promise<'acked' | 'new-key' | 'gave-up'> {
    const path = `/v1/conversations/${this.record.conversationId}/messages`;
    for (;;) {
      // A quarter of the sends ask for the reply as a stream (stored once, at its end).
      const accept = this.rnd.next() < 0.25 ? 'text/event-stream' : 'application/json';
      const send = () => this.call('POST', path, { content }, { 'idempotency-key': key, accept });
      // Now and then a double click: the same key twice at once, maybe to both replicas.
      const twice = this.rnd.next() < 0.1;
      const answers = twice ? await Promise.all([send(), send()]) : [await send()];
      const acks = answers.filter((a) => a && (a.status === 201 || a.status === 200));
      if (twice) this.counts.doubleSends += 1;
      if (acks.length === 2 && acks[0]!.body?.taskId !== acks[1]!.body?.taskId)
        this.violate(
          `one key answered two turns: ${acks[0]!.body?.taskId}, ${acks[1]!.body?.taskId}`,
        );
      const res = acks[0] ?? answers.find((a) => a !== null) ?? null;
      if (res && (res.status === 201 || res.status === 200)) {
        const b = res.body;
        if (!b?.taskId || !b.userMessage || !b.reply) {
          this.violate(
            `a ${res.status} that is not a TurnView: ${JSON.stringify(b).slice(0, 200)}`,
          );
          return 'new-key';
        }
        this.record.acked.push({
          key,
          content,
          taskId: b.taskId,
          userSeq: b.userMessage.seq,
          replySeq: b.reply.seq,
          reply: b.reply.content,
        });
        return 'acked';
      }
      if (res?.status === 409 && String(res.body?.message ?? '').startsWith(WENT_ON))
        return 'new-key';
      if (res?.status === 502 && ['AGENT_FAILED', 'DEAD_LETTERED'].includes(res.body?.code)) {
        const m = String(res.body.message);
        this.counts.agentFailed[m] = (this.counts.agentFailed[m] ?? 0) + 1;
        return 'new-key';
      }
      if (Date.now() - started > this.opts.giveUpMs) {
        this.record.unacked.push(content);
        this.violate(`turn "${content}" not acknowledged within ${this.opts.giveUpMs} ms`);
        return 'gave-up';
      }
      this.counts.retriesSameKey += 1;
      await sleep(this.rnd.int(200, 1000));
    }
  }

  /** One request; null for a lost connection. Records the status and flags undocumented answers. */
  private async call(
    method: string,
    path: string,
    body: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: any } | null> {
    const base = this.rnd.pick(this.bases);
    try {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${this.token}`,
          ...headers,
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.opts.hangMs),
      });
      const text = await res.text();
      let status = res.status;
      let parsed: any = null;
      if (res.headers.get('content-type')?.startsWith('text/event-stream')) {
        // The stream's `done` is the TurnView; its `error` the error body; neither: cut off.
        const last = /event: (done|error)\ndata: (.*)\n/.exec(text);
        if (!last) {
          this.counts.connectionErrors += 1;
          return null;
        }
        parsed = JSON.parse(last[2]);
        status = last[1] === 'done' ? 201 : parsed.statusCode;
      } else
        try {
          parsed = text ? JSON.parse(text) : null;
        } catch {
          parsed = text;
        }
      const tag = `${status}${parsed?.code ? ` ${parsed.code}` : ''}`;
      this.counts.statuses[tag] = (this.counts.statuses[tag] ?? 0) + 1;
      if (!documented(status, parsed))
        this.violate(`${method} ${path}: undocumented ${status} ${text.slice(0, 200)}`);
      return { status, body: parsed };
    } catch (err) {
      const e = err as Error & { cause?: { code?: string } };
      if (e.name === 'TimeoutError') {
        this.violate(`${method} ${path}: no answer within ${this.opts.hangMs} ms`);
        this.counts.statuses.hang = (this.counts.statuses.hang ?? 0) + 1;
      } else this.counts.connectionErrors += 1;
      return null;
    }
  }

  private violate(what: string): void {
    this.violations.push({ conversationId: this.record.conversationId, what });
  }
}

/** 2xx, or a typed error a client is told to expect while processes die (docs/http-api.md). */
function documented(status: number, body: any): boolean {
  if (status >= 200 && status < 300) return true;
  const typed =
    body &&
    typeof body === 'object' &&
    body.statusCode === status &&
    typeof body.message === 'string';
  if (!typed) return false;
  if (status === 409) return body.code === 'CONFLICT';
  if (status === 503) return body.code === 'UNAVAILABLE' || body.code === 'TIMEOUT';
  if (status === 502) return body.code === 'AGENT_FAILED' || body.code === 'DEAD_LETTERED';
  return false;
}
