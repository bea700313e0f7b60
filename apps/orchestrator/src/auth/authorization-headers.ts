import { NextFunction, Request, Response } from 'express';

/**
 * Express middleware: every Authorization header of a request, as an array, when it carries more
 * than one. Node keeps only the first of them in `req.headers`; a proxy in front may act on the
 * last, and the two would disagree on whose request it is (RFC 9110 §11.6.2: one field only).
 * TokenVerifier refuses the array with 401.
 */
export function keepEveryAuthorization(req: Request, _res: Response, next: NextFunction): void {
  const values: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2)
    if (req.rawHeaders[i].toLowerCase() === 'authorization') values.push(req.rawHeaders[i + 1]);
  if (values.length > 1)
    (req.headers as Record<string, string | string[] | undefined>).authorization = values;
  next();
}
