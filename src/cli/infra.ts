/** `cm2 infra up|down|status|install`. */
import { ensureBinaries } from '../infra/binaries';
import { infraHealth, isAlive, portsFromEnv, readInfraState, setInfraOwner, startInfra, stopInfra } from '../infra/localInfra';

export async function infraCommand(action: string, dir: string): Promise<void> {
  switch (action) {
    case 'install': {
      const bins = await ensureBinaries();
      console.log(`temporal: ${bins.temporal}\nminio:    ${bins.minio}`);
      return;
    }
    case 'up': {
      await ensureBinaries();
      const state = await startInfra({ dir, log: (l) => console.log(l), ...portsFromEnv() });
      // Up on request: no demo stops them at its end any more.
      setInfraOwner(dir, undefined);
      console.log(`Temporal:  ${state.temporal.address}\nWeb UI:    ${state.temporal.uiUrl}\nMinIO:     ${state.minio.endpoint} (console ${state.minio.consoleUrl})\nstate:     ${dir}`);
      return;
    }
    case 'down': {
      const stopped = await stopInfra(dir);
      console.log(stopped ? 'local infrastructure stopped (data kept)' : 'nothing to stop');
      return;
    }
    case 'status': {
      const state = readInfraState(dir);
      if (!state) {
        console.log('local infrastructure: not started (run `cm2 infra up`)');
        process.exitCode = 1;
        return;
      }
      const health = await infraHealth(state);
      const line = (name: string, pid: number, ok: boolean, addr: string) =>
        `${name.padEnd(9)} ${ok ? 'up  ' : 'DOWN'} pid ${pid}${isAlive(pid) ? '' : ' (gone)'}  ${addr}`;
      console.log(line('Temporal', state.temporal.pid, health.temporal, state.temporal.address));
      console.log(line('Web UI', state.temporal.pid, health.ui, state.temporal.uiUrl));
      console.log(line('MinIO', state.minio.pid, health.minio, state.minio.endpoint));
      if (!health.temporal || !health.minio) process.exitCode = 1;
      return;
    }
    default:
      throw new Error(`unknown infra action "${action}" (expected up, down, status or install)`);
  }
}
