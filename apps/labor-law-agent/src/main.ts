import 'reflect-metadata';
import { bootstrapAgent } from '@loom/agent-kit';
import { LABOR_LAW_DESCRIPTOR } from './labor-law.descriptor';
import { LaborLawHandler } from './labor-law.handler';

void bootstrapAgent(LABOR_LAW_DESCRIPTOR, LaborLawHandler);
