/** `cm2 prepare --config FILE`: starts (or attaches to) the stage workflow and follows its progress. */
import type { Cm2Config } from '../run/config';
import { type PrepareReport, runStageCommand, startPrepare } from './stages';

export function prepareCommand(cfg: Cm2Config, wait: boolean): Promise<void> {
  return runStageCommand<PrepareReport>(cfg, wait, startPrepare, printPrepareReport);
}

export function printPrepareReport(report: PrepareReport, cfg: Cm2Config): void {
  console.log(`imported ${report.total} examples (${report.importErrors} malformed rows)`);
  for (const s of report.steps) {
    const reasons = Object.entries(s.reasons).map(([k, v]) => `${k}:${v}`).join(' ');
    console.log(`  ${s.name.padEnd(18)} ${String(s.kept).padStart(6)} kept ${String(s.dropped).padStart(5)} dropped ${s.failed ? `(${s.failed} failed) ` : ''}${reasons}`);
  }
  console.log(`cold-start: ${report.coldStart.count} → s3://${cfg.s3.bucket}/${report.coldStart.key}`);
  console.log(`RL:         ${report.rl.count} → s3://${cfg.s3.bucket}/${report.rl.key}`);
  console.log(`LLM usage:  ${report.usage.calls} calls, ${report.usage.promptTokens + report.usage.completionTokens} tokens, $${report.usage.costUsd.toFixed(4)}`);
  console.log(`report:     s3://${cfg.s3.bucket}/${report.reportKey}`);
}
