import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { ID_PATTERN } from '@loom/session';
import { Transform } from 'class-transformer';
import {
  IsInt,
  IsObject,
  IsOptional,
  IsString,
  Max,
  MaxLength,
  Min,
  MinLength,
} from 'class-validator';

/** Plain decimal digits become a number; anything else (0x10, 1e2, " 5") stays and fails IsInt. */
const toInt = ({ value }: { value: unknown }) =>
  value === undefined || value === ''
    ? undefined
    : typeof value === 'string' && /^-?\d{1,15}$/.test(value)
      ? Number(value)
      : value;

export class CreateConversationDto {
  /** `^[A-Za-z0-9_-]{8,128}$`, else 400 INVALID_ID (checked by the controller). */
  @ApiPropertyOptional({
    pattern: ID_PATTERN.source,
    description:
      'Your own id: 200 if you already own it, 201 with a new server-issued id if anyone else holds it',
  })
  @IsOptional()
  @IsString()
  conversationId?: string;

  @ApiPropertyOptional({
    type: 'object',
    additionalProperties: true,
    description: 'Stored with the conversation',
  })
  @IsOptional()
  @IsObject()
  metadata?: Record<string, unknown>;
}

export class PostMessageDto {
  /** 1–32,000 characters; longer is 413, a lone surrogate 400 (checked by the turn). */
  @ApiProperty({
    minLength: 1,
    maxLength: 32_000,
    description: 'The user message; longer is 413, and a lone surrogate (not text) 400',
  })
  @IsString()
  @MinLength(1)
  content!: string;
}

export class ListConversationsQuery {
  @ApiPropertyOptional({ minimum: 1, maximum: 100, default: 20 })
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(100)
  limit?: number;

  @ApiPropertyOptional({ maxLength: 400, description: 'nextCursor of the previous page' })
  @IsOptional()
  @IsString()
  @MaxLength(400)
  cursor?: string;
}

export class ListMessagesQuery {
  @ApiPropertyOptional({ minimum: 0, default: 0, description: 'Messages with a greater seq' })
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(0)
  afterSeq?: number;

  @ApiPropertyOptional({ minimum: 1, maximum: 200, default: 50 })
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(200)
  limit?: number;
}
