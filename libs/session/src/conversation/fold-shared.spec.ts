import { foldShared } from './task.repository';

/**
 * Agents of one wave stamp a shared write before it is appended: the write that lands second
 * (and wins) can carry the earlier stamp. The key's updatedAt is when its current value became
 * current, so it never goes back as the key is overwritten.
 */
describe('foldShared: a key updatedAt under racing writers', () => {
  const write = (index: number, writer: string, value: string, updatedAt: string) => ({
    index,
    value: { key: 'finding', value, writer, updatedAt },
  });

  it('the winning write keeps its value and writer, and the key updatedAt does not go back', () => {
    const view = foldShared([
      write(1, 'labor-law', 'a', '2030-01-01T00:00:00.010Z'),
      write(2, 'contract-law', 'b', '2030-01-01T00:00:00.007Z'),
    ]);
    expect(view.finding).toEqual({
      value: 'b',
      writer: 'contract-law',
      updatedAt: '2030-01-01T00:00:00.010Z',
    });
  });

  it('keeps each write stamp when the stamps are in index order', () => {
    const view = foldShared([
      write(1, 'labor-law', 'a', '2030-01-01T00:00:00.007Z'),
      write(2, 'contract-law', 'b', '2030-01-01T00:00:00.010Z'),
    ]);
    expect(view.finding.updatedAt).toBe('2030-01-01T00:00:00.010Z');
  });

  it('a replaced write that the reader does not see does not lend its time', () => {
    const task = { conversationId: 'c', taskId: 't', executions: [] };
    const hidden = { ...write(2, 'x', 'hidden', '2030-01-01T00:00:00.020Z') };
    hidden.value = { ...hidden.value, execution: 'a_failed_attempt' } as typeof hidden.value;
    const view = foldShared([write(1, 'labor-law', 'a', '2030-01-01T00:00:00.007Z'), hidden], {
      task,
    });
    expect(view.finding).toEqual({
      value: 'a',
      writer: 'labor-law',
      updatedAt: '2030-01-01T00:00:00.007Z',
    });
  });
});
