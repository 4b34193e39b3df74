// Types of scripts/ensure-native.mjs (plain Node, run before the npm dependencies exist), for TypeScript importers.
export type NativeKind = 'cpu' | 'gpu';
export type NativeWant = 'auto' | 'cpu' | 'gpu' | 'off';

/** What ensureNative() records in node_modules/.cm2-native.json. */
export interface NativeInstallStatus {
  ok: boolean;
  backend: 'tfjs-node' | 'tfjs-node-gpu' | null;
  tensorflow: string;
  checkedAt: string;
  want?: NativeWant;
  kind?: NativeKind | null;
  reason?: string;
  package?: string;
  /** ok installs: the revision of cm2's patch the addon was compiled with (ADDON_REV) */
  addon?: string;
  libDir?: string;
  cudaLibraryDirs?: string[];
  /** GPU builds: the devices TensorFlow created when loaded (empty: it computes on the CPU). */
  gpuDevices?: string[];
}

export const TF_VERSION: string;
export const statusFile: string;
export const RETRY_AFTER_MS: number;
export const ADDON_REV: string;
export const KINDS: Record<NativeKind, { pkg: string; wheel: string; backend: 'tfjs-node' | 'tfjs-node-gpu' }>;
export const WANTS: readonly NativeWant[];

export function cacheRoot(env?: NodeJS.ProcessEnv): string;
export function libraryDir(kind: NativeKind, env?: NodeJS.ProcessEnv): string;
/** TensorFlow's C library and headers for `kind` in the project cache (fetched from PyPI once); returns the folder. */
export function ensureLibraries(kind: NativeKind, log: (line: string) => void): string;
export function andCudaRequirements(metadata: string): string[];
export function parseWant(value: string | undefined): { want: NativeWant; error?: undefined } | { want?: undefined; error: string };
export function resolveKind(opts: { want: NativeWant; platform: string; arch: string; gpuVisible: () => boolean }): { kind: NativeKind; reason?: undefined } | { kind: null; reason: string };
export function reusableStatus(
  prev: NativeInstallStatus | undefined,
  opts: { kind: NativeKind; want: NativeWant; libDir: string; now?: number; addonExists: boolean; libDirComplete: boolean },
): 'ready' | 'failed-recently' | undefined;
export function createdGpuDevices(log: string): string[];
export function bindingPatch(source: string): string;
export function gpuVisible(): boolean;
export function cudaLibraryDirs(libDir: string): string[];
export function readStatus(file?: string): NativeInstallStatus | undefined;
export function writeStatus<T extends NativeInstallStatus>(status: T, file?: string): T;
export function ensureNative(opts?: { quiet?: boolean; force?: boolean }): NativeInstallStatus;
