import { parseRetireArgs } from './retire-args';

describe('npm run agents:retire arguments', () => {
  it('takes agent types, with or without --force', () => {
    expect(parseRetireArgs(['tax-law', 'vat'])).toEqual({
      help: false,
      force: false,
      types: ['tax-law', 'vat'],
    });
    expect(parseRetireArgs(['--force', 'tax-law'])).toEqual({
      help: false,
      force: true,
      types: ['tax-law'],
    });
  });

  it('answers --help with its usage, not as an agent type to retire', () => {
    expect(parseRetireArgs(['--help'])).toEqual({ help: true });
    expect(parseRetireArgs(['-h'])).toEqual({ help: true });
  });

  it('refuses no type, an unknown option and a malformed type', () => {
    expect(parseRetireArgs([])).toBeNull();
    expect(parseRetireArgs(['--force'])).toBeNull();
    expect(parseRetireArgs(['--dry-run', 'tax-law'])).toBeNull();
    expect(parseRetireArgs(['Tax Law'])).toBeNull();
  });

  it('takes a type named twice once, so it is not retired and drained twice', () => {
    expect(parseRetireArgs(['tax-law', 'vat', 'tax-law', '--force', '--force'])).toEqual({
      help: false,
      force: true,
      types: ['tax-law', 'vat'],
    });
  });
});
