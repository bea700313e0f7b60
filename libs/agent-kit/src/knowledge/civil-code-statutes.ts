import { articlesOf } from './statute-builder';
import type { Statute } from './statute.types';

const CIVIL_CODE = { zh: '民法典', en: 'Civil Code' };

export const CIVIL_CODE_STATUTES: Statute[] = articlesOf('civil-code', CIVIL_CODE, [
  {
    article: 188,
    domain: 'general',
    summary: {
      zh: '向人民法院请求保护民事权利的诉讼时效期间为三年,自权利人知道或者应当知道权利受到损害以及义务人之日起计算。',
      en: 'The limitation period for suing to protect civil rights is three years from when the right holder knew or should have known of the damage and of the obligor.',
    },
    keywords: '诉讼时效|时效|起诉|limitation period|sue|lawsuit|time limit',
  },
  {
    article: 509,
    domain: 'contract',
    summary: {
      zh: '当事人应当按照约定全面履行自己的义务,并遵循诚信原则,根据合同的性质、目的和交易习惯履行通知、协助、保密等义务。',
      en: 'Parties must fully perform their obligations as agreed and, in good faith, perform duties of notice, assistance and confidentiality according to the contract’s nature, purpose and trade practice.',
    },
    keywords: '履行|履约|诚信|约定|perform|performance|good faith|obligation',
  },
  {
    article: 563,
    domain: 'contract',
    summary: {
      zh: '因不可抗力致使不能实现合同目的、一方明确表示或以行为表明不履行主要债务、迟延履行主要债务经催告后在合理期限内仍未履行等情形,当事人可以解除合同。',
      en: 'A party may terminate the contract when force majeure defeats its purpose, when the other party clearly refuses to perform its main obligation, or fails to perform it within a reasonable time after being urged, among other cases.',
    },
    keywords: '解除合同|解约|退租|不可抗力|迟延履行|terminate|cancel|force majeure',
  },
  {
    article: 577,
    domain: 'contract',
    summary: {
      zh: '当事人一方不履行合同义务或者履行合同义务不符合约定的,应当承担继续履行、采取补救措施或者赔偿损失等违约责任。',
      en: 'A party that fails to perform, or performs not as agreed, is liable for breach: continued performance, remedial measures or compensation for losses.',
    },
    keywords: '违约|违约责任|不履行|赔偿损失|breach|liability|damages',
  },
  {
    article: 585,
    domain: 'contract',
    summary: {
      zh: '当事人可以约定违约金;约定的违约金低于造成的损失的,可以请求增加;过分高于造成的损失的,可以请求适当减少。',
      en: 'Parties may agree on liquidated damages; if lower than the loss they may be increased on request, and if excessively higher they may be reduced appropriately.',
    },
    keywords: '违约金|违约|罚款|liquidated damages|penalty|breach',
  },
  {
    article: 586,
    domain: 'contract',
    summary: {
      zh: '当事人可以约定一方向对方给付定金作为债权的担保;定金数额不得超过主合同标的额的百分之二十。',
      en: 'Parties may agree that one pays earnest money (dingjin) to secure the claim; it may not exceed 20% of the value of the main contract.',
    },
    keywords: '定金|订金|earnest money|down payment',
  },
  {
    article: 587,
    domain: 'contract',
    summary: {
      zh: '给付定金的一方不履行债务致使不能实现合同目的的,无权请求返还定金;收受定金的一方不履行的,应当双倍返还定金。',
      en: 'If the party that paid earnest money defaults so that the contract’s purpose fails, it cannot reclaim it; if the receiving party defaults, it must return double the amount.',
    },
    keywords: '定金|订金|双倍返还|earnest money|down payment|double',
  },
  {
    article: 595,
    domain: 'contract',
    summary: {
      zh: '买卖合同是出卖人转移标的物的所有权于买受人,买受人支付价款的合同。',
      en: 'A sales contract is one in which the seller transfers ownership of the goods to the buyer and the buyer pays the price.',
    },
    keywords:
      '买卖合同|买卖|购买|买车|购车|买房|卖家|sales contract|purchase|bought|buy|seller|car',
  },
  {
    article: 610,
    domain: 'contract',
    summary: {
      zh: '因标的物不符合质量要求,致使不能实现合同目的的,买受人可以拒绝接受标的物或者解除合同。',
      en: 'If the goods fail the quality requirements so that the purpose of the contract cannot be achieved, the buyer may refuse them or terminate the contract.',
    },
    keywords: '质量问题|质量|退货|瑕疵|故障|quality|defect|defective|faulty|return',
  },
  {
    article: 703,
    domain: 'contract',
    summary: {
      zh: '租赁合同是出租人将租赁物交付承租人使用、收益,承租人支付租金的合同。',
      en: 'A lease contract is one in which the lessor delivers the leased property to the lessee for use and benefit and the lessee pays rent.',
    },
    keywords: '租赁合同|租赁|租房|房东|租客|租金|lease|rent|rental|landlord|tenant',
  },
  {
    article: 722,
    domain: 'contract',
    summary: {
      zh: '承租人无正当理由未支付或者迟延支付租金的,出租人可以请求其在合理期限内支付;承租人逾期不支付的,出租人可以解除合同。',
      en: 'If the lessee fails to pay or delays rent without good reason, the lessor may demand payment within a reasonable time and may terminate the contract if it is still unpaid.',
    },
    keywords: '拖欠租金|欠租|房租|租金|unpaid rent|late rent|rent',
  },
  {
    article: 985,
    domain: 'general',
    summary: {
      zh: '得利人没有法律根据取得不当利益的,受损失的人可以请求得利人返还取得的利益;实务中押金被无故扣留不退的,可据此或依合同约定请求返还。',
      en: 'A person who gains an improper benefit without legal basis must return it to the person who suffered the loss; in practice a security deposit withheld without grounds can be reclaimed on this basis or under the contract.',
    },
    keywords: '押金|不退|退还|返还|不当得利|deposit|security deposit|refund|withheld',
  },
]);
