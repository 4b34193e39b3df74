/**
 * The failure converter used with the payload codec: a failure's message and stack trace travel as an encoded
 * payload (so the codec encrypts them), not as plaintext fields of the history. Loaded by path
 * (`failureConverterPath`) by the client, the workers and the workflow bundle.
 */
import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
