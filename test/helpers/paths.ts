/** Where a test finds the repository and its fixtures, wherever the test file sits under test/. */
import path from 'node:path';

export const REPO = path.resolve(__dirname, '..', '..');
export const FIXTURES = path.join(REPO, 'test', 'fixtures');
