import { MessageRole } from '../model/conversation.model';

/** One message of seed 003's old whole-document format, as far as Loom can use it. */
export interface LegacyMessage {
  role: MessageRole;
  content: string;
}

export interface ParsedLegacySession {
  messages: LegacyMessage[];
  /** Messages that could not be imported (unknown role or no text), with why and as they were. */
  skipped: Array<{ index: number; reason: string; message: unknown }>;
  /** `memory`'s other fields (e.g. a summary), kept as the `legacy:memory` value; null if none. */
  memory: Record<string, unknown> | null;
  /** Other top-level state of the document (e.g. `agent`), kept as `legacy:<key>` values. */
  state: Record<string, unknown>;
}

/**
 * The longest message imported, in characters (UTF-16 units, as `String.length`): the longest the
 * API stores, an agent's answer (agent-kit's MAX_ANSWER_CHARS). GET …/messages bounds the memory
 * of the pages it reads at once by counting their messages (LOOM_MAX_MESSAGES_READ_IN_FLIGHT),
 * which bounds bytes only while no message is longer; at 1,000,000 one page of 200 imported
 * messages was up to 200 million characters. (A longer one also took minutes to count tokens for,
 * and its row could pass max_allowed_packet.) A file holding one is refused whole, before anything
 * of it is written.
 */
export const MAX_LEGACY_MESSAGE_CHARS = 100_000;

const ROLES = new Map<string, MessageRole>([
  ['user', 'user'],
  ['assistant', 'assistant'],
]);

/**
 * The text of a legacy file: UTF-8, with or without a byte-order mark (Windows tools write one).
 * Anything else (GBK, Latin-1, UTF-16) is refused: decoded as UTF-8 it would be imported as
 * replacement characters, its text lost without a word.
 */
export function decodeLegacyFile(bytes: Uint8Array): string {
  try {
    // TextDecoder drops a leading UTF-8 BOM itself (ignoreBOM: false).
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new Error('the file is not UTF-8 text (convert it to UTF-8 first, e.g. with iconv)');
  }
}

/**
 * Parses seed 003's old format — one JSON file per session, `{ "memory": { "messages": [...] }, ... }`,
 * messages with `role` and `content` as a string or as blocks `[{ "type": "text", "text": "…" }]`.
 */
export function parseLegacySession(text: string): ParsedLegacySession {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new Error('not valid JSON');
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc))
    throw new Error('the document is not a JSON object');
  const { memory, ...state } = doc as Record<string, unknown>;
  const { messages: list, ...memoryRest } = (memory ?? {}) as Record<string, unknown>;
  if (!Array.isArray(list)) throw new Error('memory.messages is missing or not a list');
  const messages: LegacyMessage[] = [];
  const skipped: ParsedLegacySession['skipped'] = [];
  list.forEach((raw, index) => {
    const m = raw as { role?: unknown; content?: unknown };
    const role = typeof m?.role === 'string' ? ROLES.get(m.role.toLowerCase()) : undefined;
    const content = textOf(m?.content);
    if (content.length > MAX_LEGACY_MESSAGE_CHARS)
      throw new Error(`message ${index + 1} is over ${MAX_LEGACY_MESSAGE_CHARS} characters`);
    if (!role)
      skipped.push({
        index,
        reason: `role ${JSON.stringify(m?.role)} is not user or assistant`,
        message: raw,
      });
    else if (!content) skipped.push({ index, reason: 'no text content', message: raw });
    else messages.push({ role, content });
  });
  const rest = Object.keys(memoryRest).length ? memoryRest : null;
  return { messages, skipped, state, memory: rest };
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((b) =>
      b && typeof b === 'object' && (b as { type?: unknown }).type === 'text'
        ? String((b as { text?: unknown }).text ?? '')
        : '',
    )
    .filter(Boolean)
    .join('\n');
}
