import {
  Body,
  Controller,
  Delete,
  Get,
  Headers,
  HttpCode,
  Inject,
  Logger,
  Param,
  Post,
  Query,
  Req,
  Res,
} from '@nestjs/common';
import {
  ApiBody,
  ApiCreatedResponse,
  ApiHeader,
  ApiNoContentResponse,
  ApiOkResponse,
  ApiTags,
} from '@nestjs/swagger';
import { Request, Response } from 'express';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { redactDeep } from '@loom/security';
import { assertId, ConversationRepository, LoomError, LoomErrorCode, Owner } from '@loom/session';
import { Authenticated } from '../auth/authenticated.decorator';
import { CurrentOwner } from '../auth/owner.decorator';
import { expectedFailure, retryAfterHeader, toErrorBody } from '../errors/http-error.filter';
import { ApiErrors, ApiIdParam } from '../openapi/api-errors.decorator';
import { ConversationList, ConversationView, MessageList, TurnView } from '../openapi/views.schema';
import { TurnAdmission } from '../turn/turn-admission';
import { TurnService } from '../turn/turn.service';
import {
  CreateConversationDto,
  ListConversationsQuery,
  ListMessagesQuery,
  PostMessageDto,
} from './dto/conversation.dto';
import { MessageReadAdmission } from './message-read-admission';
import { conversationView, messageView } from './views';

/** An Idempotency-Key: 1-200 visible ASCII characters, else 400 VALIDATION_FAILED. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,200}$/;

/** A conversation's metadata, as JSON: larger is 413 PAYLOAD_TOO_LARGE. */
export const MAX_METADATA_BYTES = 16 * 1024;

@ApiTags('conversations')
@Authenticated()
@ApiErrors(401, 429, 503)
@Controller('v1/conversations')
export class ConversationsController {
  private readonly log = new Logger('ConversationsController');

  constructor(
    private readonly conversations: ConversationRepository,
    private readonly turns: TurnService,
    private readonly admission: TurnAdmission,
    private readonly reads: MessageReadAdmission,
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
  ) {}

  /**
   * A supplied id is INVALID_ID unless well-formed; creation is atomic (store.create), and an id
   * owned by anyone else is never adopted. Metadata is part of the session index: PII is
   * redacted from it always.
   */
  @Post()
  @ApiBody({ type: CreateConversationDto, required: false })
  @ApiCreatedResponse({ type: ConversationView, description: 'Created' })
  @ApiOkResponse({ type: ConversationView, description: 'The supplied id is already yours' })
  @ApiErrors(400, 413, 415)
  async create(
    @CurrentOwner() owner: Owner,
    @Body() body: CreateConversationDto,
    @Res({ passthrough: true }) res: Response,
  ) {
    if (body.conversationId !== undefined) assertId(body.conversationId, 'conversationId');
    // The conversation document, metadata included, is rewritten on every turn.
    if (body.metadata && Buffer.byteLength(JSON.stringify(body.metadata)) > MAX_METADATA_BYTES)
      throw new LoomError(
        LoomErrorCode.PAYLOAD_TOO_LARGE,
        `metadata must be at most ${MAX_METADATA_BYTES / 1024} KB of JSON`,
      );
    const { meta, created } = await this.conversations.create(
      owner,
      body.conversationId,
      redactDeep(body.metadata ?? {}, { maxDepth: 32 }),
    );
    res.status(created ? 201 : 200);
    return conversationView(meta);
  }

  @Get()
  @ApiOkResponse({ type: ConversationList })
  @ApiErrors(400)
  async list(@CurrentOwner() owner: Owner, @Query() q: ListConversationsQuery) {
    const limit = q.limit ?? 20;
    const before = q.cursor ? decodeCursor(q.cursor) : undefined;
    const { items, next } = await this.conversations.list(owner, { limit, before });
    const nextCursor = next ? encodeCursor(next.updatedAt, next.sessionId) : null;
    return { items: items.map(conversationView), nextCursor };
  }

  @Get(':id')
  @ApiIdParam('id')
  @ApiOkResponse({ type: ConversationView })
  @ApiErrors(400, 404)
  async get(@CurrentOwner() owner: Owner, @Param('id') id: string) {
    return conversationView(await this.conversations.get(owner, id));
  }

  @Delete(':id')
  @HttpCode(204)
  @ApiIdParam('id')
  @ApiNoContentResponse({
    description: 'Gone from Redis and MySQL: messages, tasks, agent sessions, summaries',
  })
  @ApiErrors(400, 404, 409)
  async remove(@CurrentOwner() owner: Owner, @Param('id') id: string): Promise<void> {
    await this.turns.remove(owner, id);
  }

  @Post(':id/messages')
  @ApiIdParam('id')
  @ApiCreatedResponse({ type: TurnView, description: 'The turn, stored (application/json)' })
  @ApiOkResponse({
    description:
      'Accept: text/event-stream: events `delta` { text }…, then `done` with the TurnView, or `error` with the error body ' +
      '(and `retryAfter`, in seconds, where a JSON answer would carry Retry-After)',
    content: { 'text/event-stream': { schema: { type: 'string' } } },
  })
  @ApiErrors(400, 404, 409, 413, 415, 502)
  @ApiHeader({
    name: 'Idempotency-Key',
    required: false,
    schema: { type: 'string', pattern: IDEMPOTENCY_KEY.source },
    description:
      'Retries with the same key and message return the first TurnView and add nothing; another message: 409. ' +
      'A turn that failed 503 or was cut off is finished or run again by such a retry, from its checkpoint, its message stored once ' +
      '(409 once a later message is in the conversation); a 502 stays',
  })
  @ApiHeader({
    name: 'Accept',
    required: false,
    description:
      'text/event-stream streams the reply: delta { text }…, then done TurnView or error',
  })
  async post(
    @CurrentOwner() owner: Owner,
    @Param('id') id: string,
    @Body() body: PostMessageDto,
    @Headers('idempotency-key') idempotencyKey: string | undefined,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    assertId(id, 'conversationId');
    if (idempotencyKey !== undefined && !IDEMPOTENCY_KEY.test(idempotencyKey)) {
      throw new LoomError(
        LoomErrorCode.VALIDATION_FAILED,
        'Idempotency-Key must be 1-200 visible ASCII characters',
      );
    }
    // Past LOOM_MAX_TURNS_IN_FLIGHT or the tenant's or user's share of it (503), or
    // LOOM_MAX_TURNS_PER_CONVERSATION (409), with Retry-After, before anything is stored or
    // streamed. The slot is held until the turn has ended and its response closed, as a page of
    // messages holds its room: an answer the client is slow to take (a streamed turn's events, up
    // to twice its reply) stays in memory until it has taken it or its connection is cut
    // (HTTP_SEND_TIMEOUT_MS); one that goes away does not end a turn that goes on.
    const release = this.admission.admit(owner, id);
    let held = 2;
    const letGo = () => --held === 0 && release();
    let closed = false;
    const onClose = () => {
      if (closed) return;
      closed = true;
      letGo();
    };
    res.once('close', onClose);
    // A client gone before this ran: its response closed already, and will not again.
    if (res.destroyed) onClose();
    try {
      return await this.runTurn(owner, id, body.content, idempotencyKey, req, res);
    } finally {
      letGo();
    }
  }

  private async runTurn(
    owner: Owner,
    id: string,
    content: string,
    idempotencyKey: string | undefined,
    req: Request,
    res: Response,
  ) {
    // Redacted (LOOM_REDACT_STORED) by the turn, after its size and Idempotency-Key checks.
    // Negotiated (q-values, case): SSE only when the client prefers it to JSON.
    if (!prefersEventStream(req)) {
      res.status(201);
      return this.turns.turn(owner, id, content, idempotencyKey);
    }
    // What can be known before the stream starts answers with its own status, not 200 + error.
    await this.turns.assertStreamable(owner, id, content, idempotencyKey);
    res
      .status(200)
      .setHeader('Content-Type', 'text/event-stream')
      .setHeader('Cache-Control', 'no-cache')
      // nginx buffers a proxied response by default, which would hold every delta back until
      // the end: this response asks it not to.
      .setHeader('X-Accel-Buffering', 'no');
    res.flushHeaders();
    // A comment now and then: a proxy that cuts idle connections keeps the stream while the turn
    // waits for its lock, for agents that stream nothing, for a model that thinks first.
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), this.env.SSE_KEEPALIVE_MS);
    res.on('close', () => clearInterval(keepAlive));
    const delta = (text: string) =>
      res.write(`event: delta\ndata: ${JSON.stringify({ text })}\n\n`);
    let sent = '';
    try {
      // Deltas arrive while the answering agent's model writes; the reply is stored once, at the end.
      const view = await this.turns.turn(owner, id, content, idempotencyKey, (_agentType, text) => {
        sent += text;
        delta(text);
      });
      // A replayed turn (same Idempotency-Key) or a stored result produced no live text, and a
      // delivery that stopped mid-answer (run again by another agent instance, whose deltas are
      // not relayed: see DeltaChannel) only the start of it: the rest of the reply follows.
      const { content: reply } = view.reply;
      if (reply.startsWith(sent)) for (const text of chunks(reply.slice(sent.length))) delta(text);
      res.write(`event: done\ndata: ${JSON.stringify(view)}\n\n`);
    } catch (err) {
      const body = toErrorBody(err);
      // The stream's status was 200: logged here as the error filter logs a JSON turn's.
      const retryAfter = retryAfterHeader(err);
      if (body.statusCode >= 500 && !expectedFailure(err))
        this.log.error(err instanceof Error ? err : String(err));
      else this.log.warn(`streamed turn failed: ${body.statusCode} ${body.code}`);
      // A JSON answer's Retry-After (a busy model provider's) cannot follow the 200: the event
      // says it, else its client would retry at once.
      const event = retryAfter ? { ...body, retryAfter: Number(retryAfter) } : body;
      res.write(`event: error\ndata: ${JSON.stringify(event)}\n\n`);
    } finally {
      clearInterval(keepAlive);
    }
    res.end();
    return undefined;
  }

  @Get(':id/messages')
  @ApiIdParam('id')
  @ApiOkResponse({ type: MessageList })
  @ApiErrors(400, 404)
  async messages(
    @CurrentOwner() owner: Owner,
    @Param('id') id: string,
    @Query() q: ListMessagesQuery,
    @Res({ passthrough: true }) res: Response,
  ) {
    const limit = q.limit ?? 50;
    // Past LOOM_MAX_MESSAGES_READ_IN_FLIGHT, or the tenant's or user's share of it (503,
    // Retry-After), before anything is read. The room is held until the response closes: the
    // page, serialized, stays in memory until the client has taken it (or its connection is cut,
    // HTTP_SEND_TIMEOUT_MS), not only while it is built.
    const release = this.reads.admit(limit, owner);
    res.once('close', release);
    // A client gone before this ran: its response closed already, and will not again.
    if (res.destroyed) release();
    await this.conversations.get(owner, id);
    const items = await this.conversations.messages(owner, id, {
      afterSeq: q.afterSeq ?? 0,
      limit,
    });
    return { items: items.map(messageView) };
  }
}

/**
 * A media range's parameters other than its weight (`q`), with their values, quoted or not. A
 * stream and a JSON answer are UTF-8 whatever `charset` a client names; matched literally, as
 * Express matches them, `text/event-stream; charset=utf-8` named no type answered here (a JSON
 * answer then), and `application/json; charset=utf-8, text/event-stream;q=0.5` was streamed.
 */
const MEDIA_PARAMS = /;\s*(?!q\s*=)[^;,=\s]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[^;,]*)/gi;

/** Whether the client prefers `text/event-stream` to `application/json` (q-values, case). */
export function prefersEventStream(req: Request): boolean {
  const accept = req.headers.accept?.replace(MEDIA_PARAMS, '');
  // Express's own negotiation (negotiator), on the header without those parameters.
  const negotiated = Object.create(req, { headers: { value: { ...req.headers, accept } } });
  return (
    (negotiated as Request).accepts(['application/json', 'text/event-stream']) ===
    'text/event-stream'
  );
}

function chunks(text: string): string[] {
  const chars = Array.from(text);
  const size = Math.max(8, Math.ceil(chars.length / 8));
  const out: string[] = [];
  for (let i = 0; i < chars.length; i += size) out.push(chars.slice(i, i + size).join(''));
  return out;
}

function encodeCursor(updatedAt: Date, sessionId: string): string {
  return Buffer.from(JSON.stringify([updatedAt.getTime(), sessionId])).toString('base64url');
}

function decodeCursor(cursor: string): { updatedAt: Date; sessionId: string } {
  try {
    const [ms, sessionId] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    // 8.64e15 ms is the last instant a Date can hold: past it the query would compare with NaN.
    if (!Number.isSafeInteger(ms) || ms < 0 || ms > 8.64e15 || typeof sessionId !== 'string')
      throw new Error('bad cursor');
    return { updatedAt: new Date(ms), sessionId: assertId(sessionId, 'cursor') };
  } catch {
    throw new LoomError(LoomErrorCode.VALIDATION_FAILED, 'invalid cursor');
  }
}
