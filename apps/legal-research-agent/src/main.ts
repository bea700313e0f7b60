import 'reflect-metadata';
import { bootstrapAgent } from '@loom/agent-kit';
import { LEGAL_RESEARCH_DESCRIPTOR } from './legal-research.descriptor';
import { LegalResearchHandler } from './legal-research.handler';

void bootstrapAgent(LEGAL_RESEARCH_DESCRIPTOR, LegalResearchHandler);
