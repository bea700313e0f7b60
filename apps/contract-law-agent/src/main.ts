import 'reflect-metadata';
import { bootstrapAgent } from '@loom/agent-kit';
import { CONTRACT_LAW_DESCRIPTOR } from './contract-law.descriptor';
import { ContractLawHandler } from './contract-law.handler';

void bootstrapAgent(CONTRACT_LAW_DESCRIPTOR, ContractLawHandler);
