/**
 * Renders the sample run report (test/fixtures/report-sample.json) to an HTML file, to look at the page and its
 * charts without a run:
 *   npx tsx scripts/render-sample-report.ts /tmp/report-sample.html [other-report-data.json]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderReport } from '../src/report/html';
import { ReportData } from '../src/report/reportData';

function main(): void {
  const out = process.argv[2];
  if (!out) {
    console.error('usage: npx tsx scripts/render-sample-report.ts OUT.html [REPORT-DATA.json]');
    process.exitCode = 2;
    return;
  }
  const input = process.argv[3] ?? join(__dirname, '..', 'test', 'fixtures', 'report-sample.json');
  const data = ReportData.parse(JSON.parse(readFileSync(input, 'utf8')));
  writeFileSync(out, renderReport(data));
  console.log(`wrote ${out} (from ${input})`);
}

main();
