import type { PiiType } from './types';

/** One labelled sentence: every PII value it holds, by type. `expected: []` means "leave untouched". */
export interface PiiCase {
  text: string;
  expected: Array<{ type: PiiType; value: string }>;
}

const t = (text: string, ...expected: Array<[PiiType, string]>): PiiCase => ({
  text,
  expected: expected.map(([type, value]) => ({ type, value })),
});
const f = (text: string): PiiCase => ({ text, expected: [] });

/*
 * Every number below is literal and was checked by hand against its rule: cards and bank cards
 * are Luhn-valid (the public test numbers of each network where one exists), resident ids carry
 * the right MOD 11-2 character (11010519491231002X is the GB 11643 sample), SSNs avoid the
 * SSA-invalid areas. Near misses change one digit of a valid value.
 */
export const TRUE_CASES: PiiCase[] = [
  // EMAIL
  t('Contact me at john.doe@example.com for details.', ['EMAIL', 'john.doe@example.com']),
  t('请发邮件到 zhang.san@qq.com，谢谢', ['EMAIL', 'zhang.san@qq.com']),
  t('Reply to alice+billing@mail.example.co.uk.', ['EMAIL', 'alice+billing@mail.example.co.uk']),
  t('用户邮箱:li_si-2024@163.com 已验证', ['EMAIL', 'li_si-2024@163.com']),
  t(
    'cc: Bob.Smith@Company.ORG; dev-team@sub.domain.io',
    ['EMAIL', 'Bob.Smith@Company.ORG'],
    ['EMAIL', 'dev-team@sub.domain.io'],
  ),
  t('<support@loom.dev>', ['EMAIL', 'support@loom.dev']),
  t('{"email":"wang.wu@example.cn"}', ['EMAIL', 'wang.wu@example.cn']),
  t('Send the report to o%27brien@example.net', ['EMAIL', 'o%27brien@example.net']),
  t('我的邮箱是user123@gmail.com请联系', ['EMAIL', 'user123@gmail.com']),
  t('mailto:first.last@university.edu.cn', ['EMAIL', 'first.last@university.edu.cn']),
  t('Email: x@y.museum', ['EMAIL', 'x@y.museum']),

  // PHONE — mainland mobile
  t('我的手机号是13800138000，请回电', ['PHONE', '13800138000']),
  t('联系电话：139 1234 5678', ['PHONE', '139 1234 5678']),
  t('请拨打 +86 138 0013 8000 联系客服', ['PHONE', '+86 138 0013 8000']),
  t('Call me at +8613800138000 tomorrow', ['PHONE', '+8613800138000']),
  t('国际格式 0086 15012345678', ['PHONE', '0086 15012345678']),
  t('手机: 186-0000-1111', ['PHONE', '186-0000-1111']),
  t('His number is 17712345678.', ['PHONE', '17712345678']),
  t('联系人王先生 19912345678（微信同号）', ['PHONE', '19912345678']),
  t('电话 +86-135-1234-5678 转人工', ['PHONE', '+86-135-1234-5678']),
  t('备用号码 0086-18912345678', ['PHONE', '0086-18912345678']),
  t(
    'Two numbers: 13812345678 and 15987654321.',
    ['PHONE', '13812345678'],
    ['PHONE', '15987654321'],
  ),
  // PHONE — landline, US, international
  t('办公室电话 010-62345678', ['PHONE', '010-62345678']),
  t('深圳座机 0755-86013388 工作日接听', ['PHONE', '0755-86013388']),
  t('上海座机 021 6234 5678', ['PHONE', '021 6234 5678']),
  t('北京办公室 010 62345678，周一到周五', ['PHONE', '010 62345678']),
  t('传真(010)62345678', ['PHONE', '(010)62345678']),
  t('前台 0755-8888 6666 转 0', ['PHONE', '0755-8888 6666']),
  t('杭州 0571 8888666', ['PHONE', '0571 8888666']),
  t('Beijing office +86 10 6234 5678', ['PHONE', '+86 10 6234 5678']),
  t('from abroad dial +86 (0)10 6234 5678', ['PHONE', '+86 (0)10 6234 5678']),
  t('GET /api/users/13800138000/profile 200', ['PHONE', '13800138000']),
  t('Call +1 (415) 555-2671 after 5pm', ['PHONE', '+1 (415) 555-2671']),
  t('Office: 415-555-2671', ['PHONE', '415-555-2671']),
  t('Reach us at (212) 555-0198.', ['PHONE', '(212) 555-0198']),
  t('Phone +1-234-567-8900 is on file', ['PHONE', '+1-234-567-8900']),
  t('London office +44 20 7946 0958', ['PHONE', '+44 20 7946 0958']),
  t('Paris: +33 1 42 68 53 00', ['PHONE', '+33 1 42 68 53 00']),
  t('Berlin +49 30 901820', ['PHONE', '+49 30 901820']),
  t('东京分部 +81 3-1234-5678', ['PHONE', '+81 3-1234-5678']),
  t('Sydney +61 2 9374 4000 (reception)', ['PHONE', '+61 2 9374 4000']),
  t('India support +91 98765 43210', ['PHONE', '+91 98765 43210']),
  t('US cell 646.555.3890', ['PHONE', '646.555.3890']),
  t('Dial 1-800-555-0199 toll free', ['PHONE', '1-800-555-0199']),

  // CARD — international networks (Luhn-valid, known IIN)
  t('我的信用卡号是 4532-0151-1283-0366', ['CARD', '4532-0151-1283-0366']),
  t('Visa card 4111 1111 1111 1111 exp 12/27', ['CARD', '4111 1111 1111 1111']),
  t('card=4012888888881881', ['CARD', '4012888888881881']),
  t('Mastercard 5555555555554444 was charged', ['CARD', '5555555555554444']),
  t('卡号 5105 1051 0510 5100 已绑定', ['CARD', '5105 1051 0510 5100']),
  t('New 2-series MC: 2223003122003222', ['CARD', '2223003122003222']),
  t('Amex 3782 822463 10005 on file', ['CARD', '3782 822463 10005']),
  t('AMEX: 371449635398431', ['CARD', '371449635398431']),
  t('Discover 6011111111111117.', ['CARD', '6011111111111117']),
  t('Discover card 6011-0009-9013-9424', ['CARD', '6011-0009-9013-9424']),
  t('JCB 3530111333300000 in Tokyo', ['CARD', '3530111333300000']),
  t('JCB卡 3566 0020 2036 0505 消费', ['CARD', '3566 0020 2036 0505']),
  t('Diners 30569309025904', ['CARD', '30569309025904']),
  t('Diners Club 3852 000002 3237', ['CARD', '3852 000002 3237']),
  t('old 13-digit Visa 4222222222222', ['CARD', '4222222222222']),
  t('用户在聊天中发送了信用卡 4532015112830366 的照片', ['CARD', '4532015112830366']),
  t('Pay with 4111-1111-1111-1111, CVV 123', ['CARD', '4111-1111-1111-1111']),
  t('建行龙卡 4367420123456781', ['CARD', '4367420123456781']),

  // BANK_CARD — UnionPay 62…, or any Luhn-valid 16–19 digits after a bank keyword
  t('银行卡号 6222021234567890128，开户行工商银行', ['BANK_CARD', '6222021234567890128']),
  t('请转账到 6225 8801 2345 6783', ['BANK_CARD', '6225 8801 2345 6783']),
  t('储蓄卡6217000012345678907', ['BANK_CARD', '6217000012345678907']),
  t('借记卡 6228-4800-1234-5671 已冻结', ['BANK_CARD', '6228-4800-1234-5671']),
  t('UnionPay card 6212261234567898 declined', ['BANK_CARD', '6212261234567898']),
  t('收款账号: 621483012345678902', ['BANK_CARD', '621483012345678902']),
  t('卡号6227001234567891，户名张三', ['BANK_CARD', '6227001234567891']),
  t('bank account 6230580012345674', ['BANK_CARD', '6230580012345674']),
  t('银联卡 6258 0712 3456 7890 121', ['BANK_CARD', '6258 0712 3456 7890 121']),
  t('工行银行卡号 955880200001234562', ['BANK_CARD', '955880200001234562']),
  t('test UnionPay 6200000000000005', ['BANK_CARD', '6200000000000005']),

  // CN_ID
  t('身份证号 11010519491231002X', ['CN_ID', '11010519491231002X']),
  t('ID: 440524188001010014', ['CN_ID', '440524188001010014']),
  t('身份证:110105199003071239,请核对', ['CN_ID', '110105199003071239']),
  t('用户 310115198506234568 已实名', ['CN_ID', '310115198506234568']),
  t('证件号码 440304199211153213', ['CN_ID', '440304199211153213']),
  t('leap-day birth 510107200002290029 is valid', ['CN_ID', '510107200002290029']),
  t('身份证 330106197809120456。', ['CN_ID', '330106197809120456']),
  t('id_card=320502200112315674', ['CN_ID', '320502200112315674']),
  t('他的身份证是42010619690101088x', ['CN_ID', '42010619690101088x']),
  t('新疆身份证 650102198808087651', ['CN_ID', '650102198808087651']),
  t('港澳居民居住证 810000199505051236', ['CN_ID', '810000199505051236']),
  t('student 110101200501010017 enrolled', ['CN_ID', '110101200501010017']),
  t('身份证 370202 19870510 2343', ['CN_ID', '370202 19870510 2343']),
  t('乘客:230103199301011116 座位 12A', ['CN_ID', '230103199301011116']),
  t('"idNumber": "520102199912310011"', ['CN_ID', '520102199912310011']),

  // PASSPORT (context-led)
  t('Passport No. E12345678', ['PASSPORT', 'E12345678']),
  t('护照号码：G12345678', ['PASSPORT', 'G12345678']),
  t('护照号 EA1234567，有效期至2030年', ['PASSPORT', 'EA1234567']),
  t('passport number: X1234567', ['PASSPORT', 'X1234567']),
  t('US passport 123456789 expires 2031', ['PASSPORT', '123456789']),
  t('Her passport (K98765432) was renewed', ['PASSPORT', 'K98765432']),
  t('我的护照是E87654321', ['PASSPORT', 'E87654321']),
  t('passport#: PA1234567', ['PASSPORT', 'PA1234567']),
  t('出示护照，号码 G87654321', ['PASSPORT', 'G87654321']),

  // SSN
  t('SSN 123-45-6789', ['SSN', '123-45-6789']),
  t('Her social security number is 078-05-1120.', ['SSN', '078-05-1120']),
  t('ssn: 219-09-9999', ['SSN', '219-09-9999']),
  t('社会安全号 536-22-1234', ['SSN', '536-22-1234']),
  t('SSN: 123456789', ['SSN', '123456789']),
  t('Social Security No. 432 11 8765', ['SSN', '432 11 8765']),
  t('applicant 665-12-3456 verified', ['SSN', '665-12-3456']),

  // IP
  t('Login from 192.168.1.1 failed', ['IP', '192.168.1.1']),
  t('服务器地址 10.0.0.5:8080', ['IP', '10.0.0.5']),
  t('gateway=172.16.254.1', ['IP', '172.16.254.1']),
  t('DNS 8.8.8.8 and 1.1.1.1', ['IP', '8.8.8.8'], ['IP', '1.1.1.1']),
  t('broadcast 255.255.255.255.', ['IP', '255.255.255.255']),
  t('来源IP：203.0.113.42', ['IP', '203.0.113.42']),
  t('client=198.51.100.7, port=443', ['IP', '198.51.100.7']),
  t('IPv6 2001:db8::8a2e:370:7334 connected', ['IP', '2001:db8::8a2e:370:7334']),
  t('full form 2001:0db8:85a3:0000:0000:8a2e:0370:7334', [
    'IP',
    '2001:0db8:85a3:0000:0000:8a2e:0370:7334',
  ]),
  t('listening on ::1 port 3000', ['IP', '::1']),
  t('link-local fe80::1ff:fe23:4567:890a', ['IP', 'fe80::1ff:fe23:4567:890a']),
  t('mapped ::ffff:192.168.1.1', ['IP', '::ffff:192.168.1.1']),
  t('[2001:db8::1]:443', ['IP', '2001:db8::1']),

  // API_KEY
  t('OPENAI key sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56', [
    'API_KEY',
    'sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56',
  ]),
  t('用这个 sk-1234567890abcdefghijABCDEFGHIJ1234567890abcdef 调用', [
    'API_KEY',
    'sk-1234567890abcdefghijABCDEFGHIJ1234567890abcdef',
  ]),
  t('anthropic sk-ant-api03-AbC123dEf456GhI789jKl012MnO345pQr678', [
    'API_KEY',
    'sk-ant-api03-AbC123dEf456GhI789jKl012MnO345pQr678',
  ]),
  t('GITHUB_TOKEN ghp_1234567890abcdefghijABCDEFGHIJ123456', [
    'API_KEY',
    'ghp_1234567890abcdefghijABCDEFGHIJ123456',
  ]),
  t('slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx', [
    'API_KEY',
    'xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx',
  ]),
  t('user token xoxp-2233445566-7788990011-abcdef123456', [
    'API_KEY',
    'xoxp-2233445566-7788990011-abcdef123456',
  ]),
  t('aws_access_key_id = AKIAIOSFODNN7EXAMPLE', ['API_KEY', 'AKIAIOSFODNN7EXAMPLE']),
  t('AWS 密钥 AKIA1234567890ABCDEF 泄露', ['API_KEY', 'AKIA1234567890ABCDEF']),
  t(
    'Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c',
    [
      'API_KEY',
      'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c',
    ],
  ),
  t('cookie jwt=eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJsb29tIiwic3ViIjoiMTIzIn0.c2lnbmF0dXJlMTIzNDU2', [
    'API_KEY',
    'eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJsb29tIiwic3ViIjoiMTIzIn0.c2lnbmF0dXJlMTIzNDU2',
  ]),
  t('Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0 was rejected', [
    'API_KEY',
    '9f8e7d6c5b4a39281706f5e4d3c2b1a0',
  ]),
  t('api_key=abcdefghijklmnopqrstuvwx1234', ['API_KEY', 'abcdefghijklmnopqrstuvwx1234']),
  t('apikey: 0123456789abcdef0123456789abcdef', ['API_KEY', '0123456789abcdef0123456789abcdef']),
  t('token = 8c6976e5b5410415bde908bd4dee15dfb167a9c8', [
    'API_KEY',
    '8c6976e5b5410415bde908bd4dee15dfb167a9c8',
  ]),
  t('secret_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"', [
    'API_KEY',
    'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
  ]),
  t('{"access_token": "ya29.A0ARrdaM8xYz1234567890abcdefGHIJ"}', [
    'API_KEY',
    'ya29.A0ARrdaM8xYz1234567890abcdefGHIJ',
  ]),
  t('stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc', ['API_KEY', 'sk_live_4eC39HqLyjWDarjtT1zdp7dc']),
  t('maps key AIzaSyA1234567890abcdefghijklmnopqrstuv', [
    'API_KEY',
    'AIzaSyA1234567890abcdefghijklmnopqrstuv',
  ]),
  t('client_secret: Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2', ['API_KEY', 'Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2']),
  t('Authorization: Basic dXNlcjpwYXNzd29yZA==', ['API_KEY', 'dXNlcjpwYXNzd29yZA==']),

  // PASSWORD (the value only)
  t('password: hunter2', ['PASSWORD', 'hunter2']),
  t('login with password=Tr0ub4dor&3 please', ['PASSWORD', 'Tr0ub4dor&3']),
  t('密码是 abc123', ['PASSWORD', 'abc123']),
  t('我的密码：Qwe!2345', ['PASSWORD', 'Qwe!2345']),
  t('密码为p@ssw0rd，别告诉别人', ['PASSWORD', 'p@ssw0rd']),
  t('My password is secret99.', ['PASSWORD', 'secret99']),
  t('pwd=abc12345', ['PASSWORD', 'abc12345']),
  t('passwd: s3cr3t!', ['PASSWORD', 's3cr3t!']),
  t('DB_PASSWORD=xyz789 in .env', ['PASSWORD', 'xyz789']),
  t('{"username":"li","password":"correct horse battery staple"}', [
    'PASSWORD',
    'correct horse battery staple',
  ]),
  t('WiFi 密码 88886666', ['PASSWORD', '88886666']),
  t('Password: letmein', ['PASSWORD', 'letmein']),
  t("password='P@55 w0rd'", ['PASSWORD', 'P@55 w0rd']),
  t('口令：Admin@2024', ['PASSWORD', 'Admin@2024']),
  t('DATABASE_URL=postgres://loom:S3cretPass@db.example.com:5432/loom', ['PASSWORD', 'S3cretPass']),
  t('redis://:p4ssw0rd@cache.internal:6379/0', ['PASSWORD', 'p4ssw0rd']),

  // Several types in one line
  t(
    '用户张三，手机13800138000，邮箱zhangsan@example.com，身份证11010519491231002X',
    ['PHONE', '13800138000'],
    ['EMAIL', 'zhangsan@example.com'],
    ['CN_ID', '11010519491231002X'],
  ),
  t(
    'User John (john@example.org, +1 415-555-2671) paid with 4111111111111111 from 203.0.113.9',
    ['EMAIL', 'john@example.org'],
    ['PHONE', '+1 415-555-2671'],
    ['CARD', '4111111111111111'],
    ['IP', '203.0.113.9'],
  ),
  t(
    'config: host=10.1.2.3 api_key=ZXhhbXBsZUtleUZvclRlc3Rpbmc5OQ password=Sup3r$ecret',
    ['IP', '10.1.2.3'],
    ['API_KEY', 'ZXhhbXBsZUtleUZvclRlc3Rpbmc5OQ'],
    ['PASSWORD', 'Sup3r$ecret'],
  ),
  t(
    '护照 E12345678，SSN 123-45-6789，银行卡 6222021234567890128',
    ['PASSPORT', 'E12345678'],
    ['SSN', '123-45-6789'],
    ['BANK_CARD', '6222021234567890128'],
  ),
  t(
    'Order 2024052012345678 was paid by card 4532015112830366; receipt to a.b@c.io',
    ['CARD', '4532015112830366'],
    ['EMAIL', 'a.b@c.io'],
  ),
  t('订单号 2024052012345678 的收货人电话 13912345678', ['PHONE', '13912345678']),
  t(
    'v1.2.3.4 deployed on 192.168.10.20 by ops@example.com',
    ['IP', '192.168.10.20'],
    ['EMAIL', 'ops@example.com'],
  ),
];

export const FALSE_CASES: PiiCase[] = [
  // The seed's own example: not Luhn-valid, so not a card
  f('我的信用卡号是 4532-1234-5678-9012'),
  // Order, invoice and tracking numbers
  f('订单号 2024052012345678 已发货'),
  f('order no. 2024052012345678 shipped'),
  f('Order #4532015112830366 has shipped'),
  f('订单编号：20240520123456789012'),
  f('发票号码 04403210 发票代码 144032009110'),
  f('Invoice INV-2024-000123 due 2024-06-30'),
  f('运单号 SF1234567890123 已签收'),
  f('Tracking number 1Z999AA10123456784'),
  f('快递单号 773012345678901'),
  f('交易流水号 4200001234202405201234567890'),
  f('ticket 13800138000 closed'),
  f('Reference 4111111111111111 refers to the batch, not a card'),
  // Luhn-invalid cards and near misses
  f('card 4111 1111 1111 1112'),
  f('4532015112830367 is a typo'),
  f('5555555555554440'),
  f('卡号 6222021234567890123'),
  f('银行卡 6225880123456780'),
  f('378282246310006'),
  f('Luhn-valid but no issuer: 1234567890123452'),
  f('also 9999888877776668 and 8888000011112224'),
  f('number 2024052012345673 is Luhn-valid but 2024 is no IIN'),
  f('sixteen digits 1234 5678 9012 3456'),
  // Bad resident ids
  f('身份证 110105199003071238'),
  f('身份证 11010519491231002Y'),
  f('110105199002301231 (Feb 30)'),
  f('990105199003071232 region 99'),
  f('born in the future 110105203001011231'),
  f('month 13: 110105199013071232'),
  f('18 digits 123456789012345678'),
  f('编号 202405201234567890'),
  // Timestamps and dates
  f('epoch ms 1714550400000'),
  f('createdAt=1714550400123'),
  f('unix 1714550400'),
  f('2024-05-01 12:00:00'),
  f('2024-05-01T12:00:00.000+08:00'),
  f('日期 2024/05/01 时间 23:59:59'),
  f('ts=20240501120000'),
  f('date 01.05.2024'),
  f('2024年5月1日 12:00'),
  f('批次 0520 20240520 入库'),
  f('(2024)京0105民初12345号'),
  f('案号 (2023) 粤0305 民初 23456 号'),
  f('订单号 0571 88886666 已取消'),
  f('金额 010 62345678 元'),
  f('编号 011 62345678'),
  f('共 010 12345678 条记录'),
  // Versions
  f('upgrade to v1.2.3'),
  f('version 1.2.3.4.5'),
  f('release 1.2.3.4.5 is out'),
  f('v1.2.3.4'),
  f('version 10.0.0.1'),
  f('版本号 2.1.0.3'),
  f('Chrome 120.0.6099.109'),
  f('Windows 10.0.19045.4291'),
  f('node 20.11.1'),
  // Amounts
  f('金额 ¥12,345.67'),
  f('total $1,234,567.89'),
  f('共计 13800138000 元'),
  f('¥4532015112830366'),
  f('balance 4111111111111111 USD'),
  f('余额 12345678901.23'),
  // Invalid SSNs
  f('999-12-3456'),
  f('000-12-3456'),
  f('666-12-3456'),
  f('123-00-4567'),
  f('123-45-0000'),
  f('900-55-1234 is an ITIN range'),
  // Invalid IPs and IP look-alikes
  f('256.1.1.1'),
  f('192.168.1'),
  f('01.02.03.04'),
  f('1.2.3.4.5.6'),
  f('300.400.500.600'),
  f('time 12:30:45'),
  f('MAC 00:1a:2b:3c:4d:5e'),
  f('std::vector<int> and Foo::Bar::baz'),
  f('ratio 3:2:1'),
  // Plain numbers in prose
  f('The population was 1402112000 in 2020.'),
  f('It took 12345678901234567890 cycles'),
  f('编号 123456789'),
  f('see RFC 7231 section 6.5.1'),
  f('ISBN 978-7-111-54742-6'),
  f('phone extension 123'),
  f('room 1380, floor 13'),
  f('GUID 550e8400-e29b-41d4-a716-446655440000'),
  f('sha1 8843d7f92416211de9ebb963ff4ce28125932878'),
  f('+5 degrees and +100 points'),
  f('Basic instructions for everyone'),
  f('https://example.com:8080/v1/users/profile'),
  f('due 12/25/2024, ref 4111111111111111/2'),
  f('download 4111111111111111.0 MB'),
  // Near misses for secrets and passwords
  f('the sk-learn library'),
  f('task-manager-service-worker-pool-v2'),
  f('max_tokens=4096'),
  f('token=short'),
  f('password reset link sent'),
  f('Forgot password? Click here.'),
  f('密码错误，请重试'),
  f('密码是必填项'),
  f('the password policy requires 12 characters'),
  f('Bearer of bad news'),
  f('AKIA is the prefix of AWS keys'),
  // Near misses for passports and emails
  f('error E12345678 without context'),
  f('passport photo size 35x45 mm'),
  f('护照照片要求白底'),
  f('user@localhost'),
  f('follow @loom_dev on X'),
  f('email at example dot com'),
];

/** All labelled cases: at least 200, of which the false ones must come back byte-identical. */
export const PII_CORPUS: PiiCase[] = [...TRUE_CASES, ...FALSE_CASES];
