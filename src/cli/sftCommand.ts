/** `cm2 sft run --config FILE`: starts (or attaches to) the cold-start SFT workflow of a run and prints its report. */
import type { Cm2Config } from '../run/config';
import { type SftReport, runStageCommand, startSft } from './stages';

export function sftRunCommand(cfg: Cm2Config, wait: boolean): Promise<void> {
  return runStageCommand<SftReport>(cfg, wait, startSft, printSftReport);
}

/** A loss curve in one line of block characters (min to max of the curve), sampled to at most `width` points. */
export function sparkline(values: readonly number[], width = 60): string {
  if (values.length === 0) return '';
  const step = Math.max(1, values.length / width);
  const sampled: number[] = [];
  for (let i = 0; i < values.length; i += step) sampled.push(values[Math.floor(i)]!);
  const lo = Math.min(...sampled);
  const hi = Math.max(...sampled);
  const bars = '▁▂▃▄▅▆▇█';
  return sampled.map((v) => bars[hi === lo ? 0 : Math.round(((v - lo) / (hi - lo)) * (bars.length - 1))]).join('');
}

const pct = (x: number) => `${(x * 100).toFixed(0)}%`;

export function printSftReport(report: SftReport, cfg: Cm2Config): void {
  const t = report.train;
  const first = t.losses[0] ?? 0;
  const last = t.losses[t.losses.length - 1] ?? 0;
  console.log(`SFT: ${t.steps} steps on ${t.backend}, ${t.params.toLocaleString('en')} parameters, ${t.examples} examples (${t.truncated} truncated, ${t.untrainable} left out), ${t.seconds.toFixed(0)} s${t.resumedFrom ? `, resumed from step ${t.resumedFrom}` : ''}`);
  console.log(`  loss ${first.toFixed(3)} → ${last.toFixed(3)}  ${sparkline(t.losses)}`);
  if (report.base && report.sft) {
    console.log(`  held-out prompts (${report.sft.prompts}):   before → after SFT`);
    console.log(`    well-formed tool call   ${pct(report.base.wellFormedShare).padStart(4)} → ${pct(report.sft.wellFormedShare)}`);
    console.log(`    correct tool name       ${pct(report.base.correctNameShare).padStart(4)} → ${pct(report.sft.correctNameShare)}`);
    console.log(`    closed <think> block    ${pct(report.base.thinkShare).padStart(4)} → ${pct(report.sft.thinkShare)}`);
  }
  console.log(`policy:     s3://${cfg.s3.bucket}/${t.finalPrefix}/ (HF checkpoint: config.json, model.safetensors, tokenizer)`);
  console.log(`report:     s3://${cfg.s3.bucket}/${report.reportKey}`);
}
