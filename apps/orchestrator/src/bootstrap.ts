import { INestApplication, ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { json } from 'express';
import { LoomEnv } from '@loom/agent-kit';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { AppModule } from './app.module';
import { HttpErrorFilter } from './errors/http-error.filter';

/** Builds the orchestrator HTTP app (used by main.ts, the embedded launcher and the e2e tests). */
export async function createOrchestrator(env: LoomEnv): Promise<INestApplication> {
  const logger = new LoomLogger(
    createPinoLogger({ service: 'orchestrator', level: env.LOG_LEVEL, format: env.LOG_FORMAT }),
  );
  const app = await NestFactory.create(AppModule.forRoot(env), { logger, bodyParser: false });
  app.use(json({ limit: '256kb' }));
  app.useGlobalFilters(new HttpErrorFilter());
  app.useGlobalPipes(
    new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true, transform: true }),
  );
  app.enableShutdownHooks();
  const doc = new DocumentBuilder()
    .setTitle('Loom orchestrator')
    .setVersion('0.1.0')
    .addBearerAuth()
    .build();
  SwaggerModule.setup('docs', app, SwaggerModule.createDocument(app, doc));
  return app;
}
