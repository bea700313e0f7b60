/** The token of an `Authorization: Bearer …` header (any case of the scheme, RFC 7235), else null. */
export function bearerToken(header: unknown): string | null {
  if (typeof header !== 'string' || !/^bearer /i.test(header)) return null;
  const token = header.slice(7).trim();
  return token === '' ? null : token;
}
