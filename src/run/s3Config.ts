/** The S3 section of the config: endpoint, bucket, credential sources (names only), addressing, encryption, private CA. */
import { z } from 'zod';

/** AWS S3's own endpoints (`s3.amazonaws.com`, `s3.<region>.amazonaws.com`, `.com.cn`): virtual-hosted addressing by default. */
export const isAwsS3Endpoint = (hostname: string): boolean => /(^|\.)amazonaws\.com(\.cn)?$/i.test(hostname);
/** The region in an AWS regional endpoint's name (`s3.eu-west-1.amazonaws.com` → `eu-west-1`). */
export const awsEndpointRegion = (hostname: string): string | undefined =>
  /(?:^|\.)s3[.-](?:dualstack\.|fips\.)*([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$/i.exec(hostname)?.[1];

const urlOrUndefined = (u: string): URL | undefined => (URL.canParse(u) ? new URL(u) : undefined);

export const S3Config = z.object({
  endpoint: z.string().url().refine((u) => { const url = urlOrUndefined(u); return !!url && /^https?:$/.test(url.protocol) && url.pathname === '/' && !url.search; },
    'an http:// or https:// URL without a path (the bucket goes in `s3.bucket`)')
    .default('http://127.0.0.1:9000')
    .describe('`http(s)://host:port` of any S3-compatible server: MinIO, a private endpoint, or AWS (`https://s3.<region>.amazonaws.com`).'),
  region: z.string().default('us-east-1').describe('Region sent with every S3 request; on AWS the region of the bucket (and of a regional endpoint).'),
  bucket: z.string().min(3).default('cm2')
    .describe('Bucket of every run (`runs/<run.id>/...`) and of the LLM and judge caches; created when missing.'),
  accessKeyEnv: z.string().default('CM2_S3_ACCESS_KEY')
    .describe('Name of the environment variable holding the S3 access key (never the key itself); the first credential source tried.'),
  secretKeyEnv: z.string().default('CM2_S3_SECRET_KEY')
    .describe('Name of the environment variable holding the S3 secret key (never the key itself).'),
  credentials: z.enum(['auto', 'env', 'profile', 'container', 'instance']).default('auto')
    .describe('Where the credentials come from. `auto` takes the first that has them: the `accessKeyEnv`/`secretKeyEnv` variables, `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), the shared credentials file (`profile`), container credentials (ECS/EKS: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`), the EC2 instance role (IMDSv2). The other values pin one source (`env`: the two pairs of variables). Temporary credentials are refreshed before they expire.'),
  profile: z.string().min(1).optional()
    .describe('Profile of the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`); unset: `AWS_PROFILE`, else `default`.'),
  pathStyle: z.boolean().optional()
    .describe('Path-style addressing (`https://host/bucket/key`: MinIO, most private endpoints); `false`: virtual-hosted (`https://bucket.host/key`, AWS). Unset: virtual-hosted for `*.amazonaws.com` endpoints, else path style.'),
  sse: z.enum(['none', 'AES256', 'aws:kms']).default('none')
    .describe('Server-side encryption asked for on every write (header `x-amz-server-side-encryption`, also on multipart uploads): `AES256` (SSE-S3) or `aws:kms` (SSE-KMS). MinIO accepts either only with a KMS configured.'),
  kmsKeyId: z.string().min(1).optional()
    .describe('KMS key (id, ARN or alias) for `sse: aws:kms`; unset: the default key of the server (`aws/s3` on AWS).'),
  caFile: z.string().min(1).optional()
    .describe('PEM file of the CA certificate(s) of an `https://` endpoint with a private CA (relative to the working directory), trusted besides the built-in roots; unset: `AWS_CA_BUNDLE` when set. Certificate verification is never turned off.'),
}).superRefine((s, ctx) => {
  const host = urlOrUndefined(s.endpoint)?.hostname ?? '';
  const issue = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
  if (s.kmsKeyId && s.sse !== 'aws:kms') issue('kmsKeyId', `is only used with sse: aws:kms (sse is ${s.sse})`);
  if (s.caFile && !s.endpoint.startsWith('https:')) issue('caFile', `is set but the endpoint ${s.endpoint} is not https://`);
  const endpointRegion = awsEndpointRegion(host);
  if (endpointRegion && endpointRegion !== s.region) issue('region', `${s.region} differs from the region of the endpoint ${host} (${endpointRegion}): set s3.region: ${endpointRegion}`);
});
