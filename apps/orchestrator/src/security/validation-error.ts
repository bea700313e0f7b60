import { ValidationError } from '@nestjs/common';
import { LoomError, LoomErrorCode } from '@loom/session';

const PROPERTY = /^[A-Za-z0-9_]{1,64}$/;
/** A value of the wrong type breaks its range rules too; only the type is worth saying. */
const TYPE_RULES = new Set(['isInt', 'isNumber', 'isString', 'isBoolean', 'isObject', 'isArray']);

function describe(e: ValidationError, path: string[]): string[] {
  const broken = Object.keys(e.constraints ?? {});
  const typeRules = broken.filter((r) => TYPE_RULES.has(r));
  const rules = typeRules.length ? typeRules : broken;
  // An unknown property's name is the client's text, not ours: never repeat it.
  if (rules.includes('whitelistValidation'))
    return [`${[...path, '(unknown property)'].join('.')} is not allowed`];
  const here = [...path, PROPERTY.test(e.property) ? e.property : '(property)'];
  const own = rules.map((rule) => `${here.join('.')} fails ${rule}`);
  return [...own, ...(e.children ?? []).flatMap((c) => describe(c, here))];
}

/**
 * The global ValidationPipe's error: VALIDATION_FAILED naming each declared property and the
 * rule it broke. Built from rule names, never from class-validator's messages, so nothing the
 * client sent (a value, or the name of a property it made up) is echoed back.
 */
export function validationError(errors: ValidationError[]): LoomError {
  const parts = errors.flatMap((e) => describe(e, [])).slice(0, 10);
  return new LoomError(LoomErrorCode.VALIDATION_FAILED, parts.join('; ') || 'invalid request');
}
