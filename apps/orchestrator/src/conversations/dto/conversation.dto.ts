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

const toInt = ({ value }: { value: unknown }) =>
  value === undefined || value === '' ? undefined : Number(value);

export class CreateConversationDto {
  /** `^[A-Za-z0-9_-]{8,128}$`, else 400 INVALID_ID (checked by the controller). */
  @IsOptional() @IsString() conversationId?: string;

  @IsOptional() @IsObject() metadata?: Record<string, unknown>;
}

export class PostMessageDto {
  /** 1–32,000 characters; longer is 413 PAYLOAD_TOO_LARGE (checked by the turn). */
  @IsString() @MinLength(1) content!: string;
}

export class ListConversationsQuery {
  @IsOptional() @Transform(toInt) @IsInt() @Min(1) @Max(100) limit?: number;
  @IsOptional() @IsString() @MaxLength(400) cursor?: string;
}

export class ListMessagesQuery {
  @IsOptional() @Transform(toInt) @IsInt() @Min(0) afterSeq?: number;
  @IsOptional() @Transform(toInt) @IsInt() @Min(1) @Max(200) limit?: number;
}
