import {
  cardNetwork,
  cnIdCheckChar,
  cnIdValid,
  ipv4Valid,
  isRealDate,
  luhnValid,
  nanpValid,
  ssnValid,
} from './checksums';

describe('luhnValid', () => {
  it.each([
    '4111111111111111',
    '4532015112830366',
    '378282246310005',
    '6222021234567890128',
    '79927398713',
  ])('accepts %s', (digits) => expect(luhnValid(digits)).toBe(true));

  it.each(['4532123456789012', '4111111111111112', '6222021234567890123', '79927398710'])(
    'rejects %s',
    (digits) => expect(luhnValid(digits)).toBe(false),
  );

  it('rejects empty, one-digit and non-digit input', () => {
    expect(luhnValid('')).toBe(false);
    expect(luhnValid('0')).toBe(false);
    expect(luhnValid('4111-1111-1111-1111')).toBe(false);
  });
});

describe('cnIdValid', () => {
  it('accepts the GB 11643 samples and a lower-case x', () => {
    expect(cnIdValid('11010519491231002X')).toBe(true);
    expect(cnIdValid('11010519491231002x')).toBe(true);
    expect(cnIdValid('440524188001010014')).toBe(true);
  });

  it('computes the MOD 11-2 check character', () => {
    expect(cnIdCheckChar('11010519491231002')).toBe('X');
    expect(cnIdCheckChar('44052418800101001')).toBe('4');
    expect(cnIdCheckChar('11010519900307123')).toBe('9');
  });

  it('rejects a bad check character', () => {
    expect(cnIdValid('110105199003071238')).toBe(false);
    expect(cnIdValid('11010519491231002Y')).toBe(false);
  });

  it('rejects impossible or future birth dates even with a matching check character', () => {
    expect(cnIdValid('110105199002301231')).toBe(false); // 1990-02-30
    expect(cnIdValid('110105199013071232')).toBe(false); // month 13
    expect(cnIdValid('110105203001011231', new Date('2025-01-01'))).toBe(false);
    expect(cnIdValid('510107200002290029')).toBe(true); // 2000-02-29 exists
  });

  it('rejects unknown province prefixes and wrong lengths', () => {
    expect(cnIdValid('990105199003071232')).toBe(false);
    expect(cnIdValid('11010519900307123')).toBe(false);
    expect(cnIdValid('1101051990030712399')).toBe(false);
  });
});

describe('isRealDate', () => {
  it('knows leap years', () => {
    expect(isRealDate(2000, 2, 29)).toBe(true);
    expect(isRealDate(1900, 2, 29)).toBe(false);
    expect(isRealDate(2024, 4, 31)).toBe(false);
    expect(isRealDate(2024, 0, 1)).toBe(false);
  });
});

describe('ssnValid', () => {
  it('applies the SSA area, group and serial rules', () => {
    expect(ssnValid('123', '45', '6789')).toBe(true);
    expect(ssnValid('000', '12', '3456')).toBe(false);
    expect(ssnValid('666', '12', '3456')).toBe(false);
    expect(ssnValid('999', '12', '3456')).toBe(false);
    expect(ssnValid('900', '12', '3456')).toBe(false);
    expect(ssnValid('123', '00', '4567')).toBe(false);
    expect(ssnValid('123', '45', '0000')).toBe(false);
  });
});

describe('nanpValid', () => {
  it('requires N11-free area codes and exchanges starting 2-9', () => {
    expect(nanpValid('415', '555')).toBe(true);
    expect(nanpValid('123', '555')).toBe(false);
    expect(nanpValid('415', '123')).toBe(false);
    expect(nanpValid('911', '555')).toBe(false);
  });
});

describe('ipv4Valid', () => {
  it('accepts octets 0-255 without leading zeros', () => {
    expect(ipv4Valid('192.168.1.1')).toBe(true);
    expect(ipv4Valid('0.0.0.0')).toBe(true);
    expect(ipv4Valid('256.1.1.1')).toBe(false);
    expect(ipv4Valid('01.2.3.4')).toBe(false);
    expect(ipv4Valid('1.2.3')).toBe(false);
    expect(ipv4Valid('1.2.3.4.5')).toBe(false);
  });
});

describe('cardNetwork', () => {
  it.each([
    ['4111111111111111', 'INTERNATIONAL'],
    ['4222222222222', 'INTERNATIONAL'],
    ['5555555555554444', 'INTERNATIONAL'],
    ['2223003122003222', 'INTERNATIONAL'],
    ['378282246310005', 'INTERNATIONAL'],
    ['6011111111111117', 'INTERNATIONAL'],
    ['3530111333300000', 'INTERNATIONAL'],
    ['30569309025904', 'INTERNATIONAL'],
    ['6222021234567890128', 'UNIONPAY'],
    ['2024052012345673', null], // order-number shape: no issuer starts 2024
    ['1714550400000', null], // epoch milliseconds
    ['9558802000012340', null],
    ['41111111111111', null], // Visa is 13, 16 or 19 digits
  ])('%s is %s', (digits, network) => expect(cardNetwork(digits)).toBe(network));
});
