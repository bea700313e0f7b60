/**
 * Takes `by` off `key`'s count in `counts`, dropping the entry once nothing is left: the maps of
 * what is held per conversation, tenant, user or address keep an entry only while it holds some.
 */
export function countDown(counts: Map<string, number>, key: string, by = 1): void {
  const left = (counts.get(key) ?? by) - by;
  if (left > 0) counts.set(key, left);
  else counts.delete(key);
}
