import { applyDecorators, UseGuards } from '@nestjs/common';
import { ApiBearerAuth } from '@nestjs/swagger';
import { TenantThrottlerGuard } from '../security/tenant-throttler.guard';
import { JwtAuthGuard } from './jwt-auth.guard';

/** Every /v1 controller: a verified JWT (tenant and user), then the tenant's rate limit. */
export const Authenticated = () =>
  applyDecorators(ApiBearerAuth(), UseGuards(JwtAuthGuard, TenantThrottlerGuard));
