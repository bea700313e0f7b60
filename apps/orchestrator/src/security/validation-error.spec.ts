import type { ValidationError } from '@nestjs/common';
import { validationError } from './validation-error';

const err = (
  property: string,
  constraints: Record<string, string>,
  children: ValidationError[] = [],
) => ({ property, constraints, children }) as ValidationError;

describe('validationError', () => {
  it('names declared properties and rules, never values or made-up property names', () => {
    const e = validationError([
      err('content', {
        isString: 'content must be a string, got sk_live_4eC39HqLyjWDarjtT1zdp7dc',
      }),
      err('sk_live_4eC39HqLyjWDarjtT1zdp7dc', {
        whitelistValidation: 'property sk_live… should not exist',
      }),
      err('metadata', {}, [err('x y', { isInt: 'bad' })]),
    ]);
    expect(e.code).toBe('VALIDATION_FAILED');
    expect(e.message).toBe(
      'content fails isString; (unknown property) is not allowed; metadata.(property) fails isInt',
    );
    expect(e.message).not.toContain('sk_live');
  });

  it('names only the type rule when the value is of the wrong type', () => {
    const both = { max: 'm', min: 'm', isInt: 'i' };
    expect(validationError([err('limit', both)]).message).toBe('limit fails isInt');
    expect(validationError([err('limit', { max: 'm' })]).message).toBe('limit fails max');
  });
});
