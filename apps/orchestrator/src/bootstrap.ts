import { INestApplication, UnsupportedMediaTypeException, ValidationPipe } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { json, NextFunction, Request, Response } from 'express';
import { LoomEnv } from '@loom/agent-kit';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { assertJsonDepth, MAX_JSON_DEPTH } from '@loom/security';
import { LoomError, LoomErrorCode } from '@loom/session';
import { AppModule } from './app.module';
import { HttpErrorFilter } from './errors/http-error.filter';
import { validationError } from './security/validation-error';

/** Request bodies: JSON only, at most 256 KB (413 PAYLOAD_TOO_LARGE). */
export const BODY_LIMIT = '256kb';

/** Builds the orchestrator HTTP app (used by main.ts, the embedded launcher and the e2e tests). */
export async function createOrchestrator(env: LoomEnv): Promise<INestApplication> {
  const logger = new LoomLogger(
    createPinoLogger({ service: 'orchestrator', level: env.LOG_LEVEL, format: env.LOG_FORMAT }),
  );
  const app = await NestFactory.create(AppModule.forRoot(env), { logger, bodyParser: false });
  // A body the API would not read (text/plain, a form) is refused, not silently taken as {}.
  app.use((req: Request, _res: Response, next: NextFunction) => {
    const hasBody =
      req.headers['transfer-encoding'] !== undefined ||
      Number(req.headers['content-length'] ?? 0) > 0;
    if (hasBody && !req.is('application/json'))
      return next(new UnsupportedMediaTypeException('send the body as application/json'));
    next();
  });
  // Nesting past MAX_JSON_DEPTH is 400 VALIDATION_FAILED, checked on the raw text before parsing.
  app.use(
    json({
      limit: BODY_LIMIT,
      verify: (_req, _res, buf) => {
        const text = buf.toString('utf8');
        // Every body of the API is an object. An array would reach the ValidationPipe, which
        // sets .constructor on it, and that alone drops V8 to slow array paths process-wide.
        if (text.trimStart().startsWith('['))
          throw new LoomError(LoomErrorCode.VALIDATION_FAILED, 'the body must be a JSON object');
        assertJsonDepth(text, MAX_JSON_DEPTH);
      },
    }),
  );
  // A body that is not JSON: a fixed message. Nest would answer with the parser's, which quotes
  // what was sent (a secret pasted by mistake, say) back and into the logs.
  app.use((err: unknown, _req: Request, _res: Response, next: NextFunction) =>
    next(
      (err as { type?: string })?.type === 'entity.parse.failed'
        ? new LoomError(LoomErrorCode.VALIDATION_FAILED, 'malformed JSON body')
        : err,
    ),
  );
  app.useGlobalFilters(new HttpErrorFilter());
  app.useGlobalPipes(
    new ValidationPipe({
      whitelist: true,
      forbidNonWhitelisted: true,
      transform: true,
      exceptionFactory: validationError,
    }),
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
