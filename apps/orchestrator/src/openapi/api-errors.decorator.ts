import { applyDecorators } from '@nestjs/common';
import { ApiParam, ApiResponse } from '@nestjs/swagger';
import { ErrorBody, ID_PATTERN } from './views.schema';

/** What each error status of API.md means, by the codes it carries. */
const ERRORS: Record<number, string> = {
  400: 'VALIDATION_FAILED (a body, query or header that breaks its rules) or INVALID_ID',
  401: 'UNAUTHENTICATED: no, a malformed, an expired or a wrongly signed bearer token',
  404: "NOT_FOUND: missing, or another user's or tenant's (the same answer)",
  409: 'CONFLICT: another turn holds the conversation past the wait, LOOM_MAX_TURNS_PER_CONVERSATION of its turns are running or waiting (Retry-After), or this one was superseded (retry); or an Idempotency-Key sent with another message, or of a failed turn the conversation has gone on from (send under a new key)',
  413: 'PAYLOAD_TOO_LARGE: content over 32,000 characters, metadata over 16 KB, or a body over 384 KB or of more than 10,000 JSON values',
  415: 'UNSUPPORTED_MEDIA_TYPE: a body that is not application/json (UTF-8)',
  429: "RATE_LIMITED: the tenant's requests per window are used up (Retry-After says when to retry)",
  502: 'AGENT_FAILED: a required agent failed (the message names the model failure, never its text); DEAD_LETTERED: its request was delivered AGENT_MAX_DELIVERIES times without an answer (a poison message). Neither is worth a retry with the same Idempotency-Key',
  503: 'UNAVAILABLE (MySQL or Redis out of reach, a busy model provider: with Retry-After in seconds when it said how long to wait, a stopping orchestrator, one holding LOOM_MAX_TURNS_IN_FLIGHT turns, or LOOM_MAX_TURNS_PER_TENANT of the calling tenant, or LOOM_MAX_TURNS_PER_USER of the calling user, or reading LOOM_MAX_MESSAGES_READ_IN_FLIGHT messages, or the share of them of the calling tenant or user, or a MySQL pool too busy to queue one more statement: Retry-After says when to retry) or TIMEOUT (a required agent with no live instance, silent past AGENT_TIMEOUT_MS or still working at AGENT_MAX_EXECUTION_MS): a turn is retried with the same Idempotency-Key',
};

/** The error responses of a route, each with API.md's body `{ statusCode, code, message }`. */
export const ApiErrors = (...statuses: (keyof typeof ERRORS)[]) =>
  applyDecorators(
    ...statuses.map((status) =>
      ApiResponse({ status, description: ERRORS[status], type: ErrorBody }),
    ),
  );

/** A path parameter that is an id: anything else is 400 INVALID_ID. */
export const ApiIdParam = (name: string) =>
  ApiParam({ name, schema: { type: 'string', pattern: ID_PATTERN } });
