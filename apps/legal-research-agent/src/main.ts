import 'reflect-metadata';
import { bootstrapAgent } from '@loom/agent-kit';
import { AGENT } from './agent';

void bootstrapAgent(AGENT);
