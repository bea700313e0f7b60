import {
  apiKeyDetector,
  emailDetector,
  ipDetector,
  numericDetector,
  passportDetector,
  passwordDetector,
  phoneDetector,
  ssnDetector,
} from './detectors';
import type { Detector } from './types';

// "type:value" for every span a detector reports, in text order.
function found(detector: Detector, text: string): string[] {
  return detector
    .detect(text)
    .sort((a, b) => a.start - b.start)
    .map((s) => `${s.type}:${text.slice(s.start, s.end)}`);
}

describe('numericDetector', () => {
  it('finds cards, bank cards, resident ids and mainland phones by whole digit groups', () => {
    const text =
      'visa 4111 1111 1111 1111, 银行卡 6222021234567890128, 身份证 11010519491231002X, 手机 138-0013-8000';
    expect(found(numericDetector, text)).toEqual([
      'CARD:4111 1111 1111 1111',
      'BANK_CARD:6222021234567890128',
      'CN_ID:11010519491231002X',
      'PHONE:138-0013-8000',
    ]);
  });

  it('needs a bank keyword for a Luhn-valid number outside the card networks', () => {
    expect(found(numericDetector, '工行银行卡号 955880200001234562')).toEqual([
      'BANK_CARD:955880200001234562',
    ]);
    expect(found(numericDetector, 'id 955880200001234562')).toEqual([]);
  });

  it('does not cut a value out of a longer number or an identifier', () => {
    expect(found(numericDetector, '41111111111111110')).toEqual([]);
    expect(found(numericDetector, 'INV-4111111111111111')).toEqual([]);
    expect(found(numericDetector, 'x4111111111111111')).toEqual([]);
    expect(found(numericDetector, '3.4111111111111111')).toEqual([]);
  });

  it('takes the card from a run that continues with other numbers', () => {
    expect(found(numericDetector, '4111 1111 1111 1111 12 25')).toEqual([
      'CARD:4111 1111 1111 1111',
    ]);
  });

  it('rejects mixed separators and odd groupings for cards', () => {
    expect(found(numericDetector, '4111 1111-1111 1111')).toEqual([]);
    expect(found(numericDetector, '41 11 11 11 11 11 11 11')).toEqual([]);
  });

  it('honours order / invoice context and amounts', () => {
    expect(found(numericDetector, '订单号 4111111111111111')).toEqual([]);
    expect(found(numericDetector, 'order 12, call 13800138000')).toEqual(['PHONE:13800138000']);
    expect(found(numericDetector, '¥13800138000')).toEqual([]);
    expect(found(numericDetector, '13800138000 元')).toEqual([]);
  });
});

describe('phoneDetector', () => {
  it('finds +CC and NANP formats', () => {
    expect(found(phoneDetector, 'a +44 20 7946 0958 b (212) 555-0198 c 415.555.2671')).toEqual([
      'PHONE:+44 20 7946 0958',
      'PHONE:(212) 555-0198',
      'PHONE:415.555.2671',
    ]);
  });

  // How a mainland landline is most often written: the area code in brackets, full-width in
  // Chinese text. Such a number went to the logs (and, with LOOM_REDACT_STORED, to the store).
  it('finds mainland landlines with the area code in brackets', () => {
    expect(
      found(
        phoneDetector,
        '电话（010）62345678，传真 (021) 6234 5678，分机(0755)8888888。tel: (010)6234-5678',
      ),
    ).toEqual([
      'PHONE:（010）62345678',
      'PHONE:(021) 6234 5678',
      'PHONE:(0755)8888888',
      'PHONE:(010)6234-5678',
    ]);
  });

  it('leaves bracketed numbers that are no landline alone', () => {
    expect(
      found(phoneDetector, '见(001)12345678、第(010)123 号、(2024)62345678、f(010)62345678x'),
    ).toEqual([]);
  });

  it('rejects too few digits, invalid NANP numbers and time-zone offsets', () => {
    expect(found(phoneDetector, '+1 234, 123-456-7890, +08:00, +100 points')).toEqual([]);
  });
});

describe('emailDetector', () => {
  it('finds addresses and leaves handles and hosts alone', () => {
    expect(found(emailDetector, 'a.b+c@mail.example.com, @handle, root@localhost')).toEqual([
      'EMAIL:a.b+c@mail.example.com',
    ]);
  });
});

describe('ipDetector', () => {
  it('finds IPv4 and IPv6 but not versions or out-of-range octets', () => {
    expect(
      found(
        ipDetector,
        '10.0.0.1 v1.2.3.4 1.2.3.4.5 256.1.1.1 version 2.0.0.1 2001:db8::1 12:30:45',
      ),
    ).toEqual(['IP:10.0.0.1', 'IP:2001:db8::1']);
  });
});

describe('ssnDetector', () => {
  it('finds dashed SSNs and keyed undashed ones, skipping invalid areas', () => {
    expect(found(ssnDetector, '123-45-6789 999-12-3456 SSN: 078051120 987654321')).toEqual([
      'SSN:123-45-6789',
      'SSN:078051120',
    ]);
  });
});

describe('passportDetector', () => {
  it('only reports numbers shortly after a passport keyword', () => {
    expect(
      found(passportDetector, 'passport no. E12345678; E87654321; 护照号码：G12345678'),
    ).toEqual(['PASSPORT:E12345678', 'PASSPORT:G12345678']);
    expect(found(passportDetector, 'passport' + ' '.repeat(60) + 'E12345678')).toEqual([]);
  });
});

describe('apiKeyDetector', () => {
  it('finds provider token shapes and keyed secrets (value only)', () => {
    const text =
      'sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12 AKIAIOSFODNN7EXAMPLE Bearer abcdef0123456789abcdef. api_key: "0123456789abcdefABCDEF"';
    expect(found(apiKeyDetector, text)).toEqual([
      'API_KEY:sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12',
      'API_KEY:AKIAIOSFODNN7EXAMPLE',
      'API_KEY:abcdef0123456789abcdef',
      'API_KEY:0123456789abcdefABCDEF',
    ]);
  });

  it('ignores kebab-case words and short values', () => {
    expect(
      found(apiKeyDetector, 'sk-learn-is-a-library-for-machine-learning token=abc max_tokens=4096'),
    ).toEqual([]);
  });
});

describe('passwordDetector', () => {
  it('redacts the value after a keyword and a separator', () => {
    expect(
      found(passwordDetector, 'password=abc 密码是 x1y2 pwd: "a b c" password is hunter2'),
    ).toEqual(['PASSWORD:abc', 'PASSWORD:x1y2', 'PASSWORD:a b c', 'PASSWORD:hunter2']);
  });

  it('does not take ordinary words after a bare space or "is"', () => {
    expect(
      found(passwordDetector, 'password reset; the password is required; 密码是必填项'),
    ).toEqual([]);
  });
});
