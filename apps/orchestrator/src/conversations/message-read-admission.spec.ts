import { MAX_ANSWER_CHARS } from '@loom/agent-kit';
import { MAX_LEGACY_MESSAGE_CHARS } from '@loom/session';
import { MAX_CONTENT } from '../turn/turn.service';

/**
 * MessageReadAdmission counts messages, not bytes: that bounds the memory of the pages read at
 * once only while every way a message is stored keeps it within the longest answer.
 */
describe('the message-count bound of GET …/messages is a byte bound', () => {
  it('no message is stored longer than an agent answer may be', () => {
    expect(MAX_CONTENT).toBeLessThanOrEqual(MAX_ANSWER_CHARS);
    expect(MAX_LEGACY_MESSAGE_CHARS).toBeLessThanOrEqual(MAX_ANSWER_CHARS);
  });
});
