import 'reflect-metadata';
import { runAgent } from '@loom/agent-kit';
import { AGENT } from './agent';

runAgent(AGENT);
