import { articlesOf } from './statute-builder';
import type { Statute } from './statute.types';

const LABOR_CONTRACT_LAW = { zh: '劳动合同法', en: 'Labor Contract Law' };
const LABOR_ARBITRATION_LAW = {
  zh: '劳动争议调解仲裁法',
  en: 'Labor Dispute Mediation and Arbitration Law',
};

export const LABOR_STATUTES: Statute[] = [
  ...articlesOf('labor-contract-law', LABOR_CONTRACT_LAW, [
    {
      article: 10,
      domain: 'labor',
      summary: {
        zh: '建立劳动关系应当订立书面劳动合同;已建立劳动关系但未同时订立的,应当自用工之日起一个月内订立。',
        en: 'An employment relationship requires a written labor contract; if none was signed when work began, it must be signed within one month of the first day of work.',
      },
      keywords:
        '劳动合同|书面劳动合同|签合同|入职|employment contract|labor contract|labour contract|written contract|sign',
    },
    {
      article: 19,
      domain: 'labor',
      summary: {
        zh: '试用期与合同期限挂钩:三个月以上不满一年的不超过一个月,一年以上不满三年的不超过二个月,三年以上及无固定期限的不超过六个月;同一用人单位与同一劳动者只能约定一次试用期。',
        en: 'Probation is capped by the contract term: one month for 3 months to under a year, two months for 1 to under 3 years, six months for 3 years or more or open-ended terms; only one probation per employer and employee.',
      },
      keywords: '试用期|转正|probation|trial period',
    },
    {
      article: 23,
      domain: 'labor',
      summary: {
        zh: '用人单位可与负有保密义务的劳动者约定竞业限制条款,并在解除或终止劳动合同后的竞业限制期限内按月给予经济补偿;劳动者违反约定的,应按约定支付违约金。',
        en: 'An employer may agree a non-compete clause with employees bound to confidentiality and must pay monthly compensation during the restriction period after the contract ends; an employee who breaches it pays the agreed penalty.',
      },
      keywords:
        '竞业限制|竞业|竞业协议|保密|商业秘密|non-compete|noncompete|confidentiality|trade secret',
    },
    {
      article: 24,
      domain: 'labor',
      summary: {
        zh: '竞业限制的人员限于高级管理人员、高级技术人员和其他负有保密义务的人员;范围、地域、期限由双方约定,解除或终止劳动合同后的竞业限制期限不得超过二年。',
        en: 'Non-compete obligations may bind only senior managers, senior technical staff and others with confidentiality duties; scope, area and term are agreed, and the restriction may not exceed two years after the contract ends.',
      },
      keywords:
        '竞业限制|竞业|竞业协议|竞业期限|两年|non-compete|noncompete|restriction period|two years',
    },
    {
      article: 26,
      domain: 'labor',
      summary: {
        zh: '以欺诈、胁迫手段或乘人之危订立或变更的,用人单位免除自己法定责任、排除劳动者权利的,或违反法律强制性规定的劳动合同,无效或部分无效。',
        en: 'A labor contract is wholly or partly invalid if made or changed by fraud, coercion or exploiting hardship, if the employer excludes its own legal liability or the employee’s rights, or if it violates mandatory law.',
      },
      keywords:
        '劳动合同|无效|欺诈|胁迫|霸王条款|employment contract|labor contract|invalid|void|unfair term',
    },
    {
      article: 38,
      domain: 'labor',
      summary: {
        zh: '用人单位未按约定提供劳动保护或劳动条件、未及时足额支付劳动报酬、未依法缴纳社会保险费等情形下,劳动者可以解除劳动合同。',
        en: 'An employee may terminate the contract if the employer fails to provide the agreed protection or conditions, to pay wages in full and on time, or to pay social insurance, among other cases.',
      },
      keywords: '拖欠工资|欠薪|社保|社会保险|辞职|unpaid wages|social insurance|resign|quit',
    },
    {
      article: 39,
      domain: 'labor',
      summary: {
        zh: '劳动者在试用期间被证明不符合录用条件、严重违反规章制度、严重失职造成重大损害等情形的,用人单位可以解除劳动合同,无需支付经济补偿。',
        en: 'The employer may terminate the contract if the employee fails the probation requirements, seriously breaches workplace rules or causes major damage through serious dereliction of duty, among other cases; no severance is due.',
      },
      keywords:
        '开除|辞退|解雇|严重违反|规章制度|dismissal|dismissed|fired|misconduct|company rules',
    },
    {
      article: 40,
      domain: 'labor',
      summary: {
        zh: '劳动者患病或非因工负伤后不能从事原工作、不能胜任工作经培训或调岗仍不能胜任、客观情况发生重大变化致合同无法履行的,用人单位提前三十日书面通知或额外支付一个月工资后,可以解除劳动合同。',
        en: 'If the employee cannot work after illness or a non-work injury, stays incompetent after training or reassignment, or a major change of circumstances makes the contract impossible to perform, the employer may terminate with 30 days’ written notice or one month’s extra pay.',
      },
      keywords: '辞退|解雇|不能胜任|提前通知|代通知金|dismissal|fired|notice|incompetent',
    },
    {
      article: 46,
      domain: 'labor',
      summary: {
        zh: '劳动者依第三十八条解除、用人单位提出协商解除、依第四十条或第四十一条解除、固定期限劳动合同期满终止(用人单位维持或提高条件续订而劳动者不同意的除外)等情形,用人单位应当支付经济补偿。',
        en: 'The employer owes severance when the employee terminates under Article 38, when the employer proposes a negotiated termination, terminates under Article 40 or 41, or lets a fixed-term contract expire (unless the employee refuses renewal on equal or better terms), among other cases.',
      },
      keywords: '经济补偿|补偿|辞退|裁员|合同到期|severance|compensation|laid off|layoff',
    },
    {
      article: 47,
      domain: 'labor',
      summary: {
        zh: '经济补偿按劳动者在本单位工作的年限,每满一年支付一个月工资;六个月以上不满一年的按一年计算,不满六个月的支付半个月工资。',
        en: 'Severance is one month’s wage per full year of service; six months or more counts as a full year, and under six months earns half a month’s wage.',
      },
      keywords: '经济补偿|补偿金|工作年限|赔多少|severance|years of service|compensation',
    },
    {
      article: 82,
      domain: 'labor',
      summary: {
        zh: '用人单位自用工之日起超过一个月不满一年未与劳动者订立书面劳动合同的,应当向劳动者每月支付二倍的工资。',
        en: 'An employer that has not signed a written labor contract more than one month but less than a year after work began must pay the employee double wages for each such month.',
      },
      keywords:
        '二倍工资|双倍工资|没签|未签|书面劳动合同|double wages|double pay|no written contract',
    },
    {
      article: 87,
      domain: 'labor',
      summary: {
        zh: '用人单位违反本法规定解除或者终止劳动合同的,应当依照第四十七条规定的经济补偿标准的二倍向劳动者支付赔偿金。',
        en: 'An employer that terminates a labor contract unlawfully must pay damages at twice the severance standard of Article 47.',
      },
      keywords:
        '违法解除|违法辞退|赔偿金|无故辞退|unlawful dismissal|wrongful dismissal|wrongful termination',
    },
  ]),
  ...articlesOf('labor-dispute-arbitration-law', LABOR_ARBITRATION_LAW, [
    {
      article: 27,
      domain: 'labor',
      summary: {
        zh: '劳动争议申请仲裁的时效期间为一年,从当事人知道或者应当知道其权利被侵害之日起计算。',
        en: 'The limitation period for labor dispute arbitration is one year from when the party knew or should have known that its rights were infringed.',
      },
      keywords: '劳动仲裁|仲裁|劳动争议|时效|arbitration|labor dispute|time limit',
    },
  ]),
];
