/**
 * TensorFlow graphs built in TypeScript and run as one session call, on the native backend: for work made of many
 * small ops (a decoding step is ~40 ops per layer), a graph run costs one N-API call and ~1 µs per node, where eager
 * execution costs ~5–10 µs per op.
 *
 * The graph is a GraphDef written with tfjs-node's own compiled TensorFlow protos, wrapped in a SavedModel (tag
 * 'serve', no variables) in a temporary folder, and loaded with tfjs-node's binding (TF_LoadSessionFromSavedModel);
 * the folder is removed once loaded. Every weight is fed as an input on each run (no copies: inputs are the tfjs
 * tensors' own buffers), so the graph never holds stale weights.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';

/* eslint-disable @typescript-eslint/no-explicit-any -- google-protobuf classes generated without typings */
interface Protos {
  GraphDef: any;
  NodeDef: any;
  AttrValue: any;
  TensorShape: any;
  Tensor: any;
  VersionDef: any;
  MetaGraphDef: any;
  SignatureDef: any;
  TensorInfo: any;
  SavedModel: any;
}

function protos(): Protos {
  return require('@tensorflow/tfjs-node/dist/proto/api_pb') as Protos;
}

const DT_FLOAT = 1;
const DT_INT32 = 3;
export type GraphDtype = 'float32' | 'int32';
const dtypeCode = (d: GraphDtype): number => (d === 'float32' ? DT_FLOAT : DT_INT32);

export type AttrSpec =
  | { type: GraphDtype }
  | { b: boolean }
  | { i: number }
  | { f: number }
  | { s: string }
  | { shape: number[] | null };

/** A graph under construction. Tensor names are 'node' (output 0) or 'node:k'. */
export class GraphBuilder {
  private readonly P = protos();
  private readonly graph: any;
  private readonly names = new Set<string>();
  /** placeholders in feed order */
  readonly inputs: { name: string; dtype: GraphDtype }[] = [];

  constructor() {
    this.graph = new this.P.GraphDef();
    const versions = new this.P.VersionDef();
    versions.setProducer(1205);
    this.graph.setVersions(versions);
  }

  private attr(spec: AttrSpec): any {
    const a = new this.P.AttrValue();
    if ('type' in spec) a.setType(dtypeCode(spec.type));
    else if ('b' in spec) a.setB(spec.b);
    else if ('i' in spec) a.setI(spec.i);
    else if ('f' in spec) a.setF(spec.f);
    else if ('s' in spec) a.setS(new TextEncoder().encode(spec.s));
    else a.setShape(this.shape(spec.shape));
    return a;
  }

  private shape(dims: number[] | null): any {
    const s = new this.P.TensorShape();
    if (dims === null) s.setUnknownRank(true);
    else {
      for (const d of dims) {
        const dim = new this.P.TensorShape.Dim();
        dim.setSize(d);
        s.addDim(dim);
      }
    }
    return s;
  }

  private unique(base: string): string {
    let name = base;
    for (let k = 1; this.names.has(name); k++) name = `${base}_${k}`;
    this.names.add(name);
    return name;
  }

  /** Adds a node; returns its name (its first output). `control` are nodes that must run before it. */
  node(op: string, inputs: string[], attrs: Record<string, AttrSpec> = {}, name = op, control: string[] = []): string {
    const n = new this.P.NodeDef();
    const id = this.unique(name);
    n.setName(id);
    n.setOp(op);
    for (const i of inputs) n.addInput(i);
    for (const c of control) n.addInput(`^${c.split(':')[0]}`);
    const map = n.getAttrMap();
    for (const [k, v] of Object.entries(attrs)) map.set(k, this.attr(v));
    this.graph.addNode(n);
    return id;
  }

  /** A fed input; `shape` may have -1 for sizes that vary between runs (null: rank unknown too). */
  placeholder(name: string, dtype: GraphDtype = 'float32', shape: number[] | null = null): string {
    const id = this.node('Placeholder', [], { dtype: { type: dtype }, shape: { shape } }, name);
    this.inputs.push({ name: id, dtype });
    return id;
  }

  /** A constant tensor. */
  constant(values: ArrayLike<number>, shape: number[], dtype: GraphDtype = 'float32', name = 'const'): string {
    const t = new this.P.Tensor();
    t.setDtype(dtypeCode(dtype));
    t.setTensorShape(this.shape(shape));
    const bytes = dtype === 'float32' ? new Float32Array(Array.from(values)) : new Int32Array(Array.from(values));
    t.setTensorContent(new Uint8Array(bytes.buffer));
    const a = new this.P.AttrValue();
    a.setTensor(t);
    const n = new this.P.NodeDef();
    const id = this.unique(name);
    n.setName(id);
    n.setOp('Const');
    n.getAttrMap().set('dtype', this.attr({ type: dtype }));
    n.getAttrMap().set('value', a);
    this.graph.addNode(n);
    return id;
  }

  /** The SavedModel bytes for this graph (signature 'serving_default' lists the inputs; outputs are named per run). */
  savedModel(outputs: string[]): Uint8Array {
    const { MetaGraphDef, SignatureDef, TensorInfo, SavedModel } = this.P;
    const meta = new MetaGraphDef();
    const info = new MetaGraphDef.MetaInfoDef();
    info.addTags('serve');
    meta.setMetaInfoDef(info);
    meta.setGraphDef(this.graph);
    const sig = new SignatureDef();
    sig.setMethodName('tensorflow/serving/predict');
    const tensorInfo = (name: string, dtype: GraphDtype): any => {
      const t = new TensorInfo();
      t.setName(name.includes(':') ? name : `${name}:0`);
      t.setDtype(dtypeCode(dtype));
      t.setTensorShape(this.shape(null));
      return t;
    };
    for (const i of this.inputs) sig.getInputsMap().set(i.name, tensorInfo(i.name, i.dtype));
    // The signature lists the tensors runs fetch ('node:k' as 'node_k'). An intermediate of a pattern oneDNN fuses
    // (MatMul + Sigmoid + Mul) no longer exists once loaded, listed or not: fetch it through an Identity node.
    for (const o of outputs) sig.getOutputsMap().set(o.replace(':', '_'), tensorInfo(o, 'float32'));
    meta.getSignatureDefMap().set('serving_default', sig);
    const model = new SavedModel();
    model.setSavedModelSchemaVersion(1);
    model.addMetaGraphs(meta);
    return model.serializeBinary() as Uint8Array;
  }
}
/* eslint-enable @typescript-eslint/no-explicit-any */

interface SessionBackend {
  binding: { runSavedModel(id: number, ids: number[], inputs: string, outputs: string): { id: number; shape: number[]; dtype: number }[] };
  getInputTensorIds(ts: tf.Tensor[]): number[];
  createOutputTensor(m: { id: number; shape: number[]; dtype: number }): tf.Tensor;
  loadSavedModelMetaGraph(path: string, tags: string): number;
  deleteSavedModel(id: number): void;
}

/** A thread count forced by an environment variable (a non-negative integer; 0: the default pool), else undefined. */
export function forcedThreads(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const v = env[name];
  return v !== undefined && v !== '' && Number.isInteger(Number(v)) && Number(v) >= 0 ? Number(v) : undefined;
}

/** A loaded graph: feed its placeholders (in the builder's order), fetch any tensors by name. */
export class GraphSession {
  private id: number | undefined;
  private readonly backend: SessionBackend;
  private readonly inputNames: string;

  /**
   * `intraOpThreads`: the size of this session's own intra-op thread pool (TensorFlow's ConfigProto
   * intra_op_parallelism_threads, passed through cm2's patch of the addon, scripts/ensure-native.mjs; a pool of its own
   * because src/model/net/backend.ts sets TF_OVERRIDE_GLOBAL_THREADPOOL=1). Left out: the process's default pool size. An
   * addon without the patch cannot take it: the session then uses the default, and `GraphSession.sessionConfig` says so.
   */
  constructor(builder: GraphBuilder, outputs: string[], opts: { intraOpThreads?: number } = {}) {
    this.backend = tf.backend() as unknown as SessionBackend;
    const dir = mkdtempSync(join(tmpdir(), 'cm2-graph-'));
    try {
      writeFileSync(join(dir, 'saved_model.pb'), builder.savedModel(outputs));
      mkdirSync(join(dir, 'variables'));
      const threads = opts.intraOpThreads && GraphSession.sessionConfig !== 'unsupported' ? opts.intraOpThreads : 0;
      if (threads) {
        try {
          this.id = this.backend.loadSavedModelMetaGraph(dir, `serve,cm2:intra_op_threads=${threads}`);
          this.intraOpThreads = threads;
          GraphSession.sessionConfig = 'supported';
        } catch (e) {
          // An unpatched addon passes the tag on to TensorFlow, which finds no meta graph with it.
          if (GraphSession.sessionConfig === 'supported' || !/tags|meta ?graph/i.test((e as Error).message)) throw e;
          GraphSession.sessionConfig = 'unsupported';
          console.warn('native TensorFlow: this addon cannot give a graph its own thread pool (compiled without cm2\'s patch: `node scripts/ensure-native.mjs --force`); decoding shares the default pool');
        }
      }
      if (this.id === undefined) this.id = this.backend.loadSavedModelMetaGraph(dir, 'serve');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    this.inputNames = builder.inputs.map((i) => `${i.name}:0`).join(',');
  }

  /** Whether the addon takes a session's thread count (unknown until a session asks for one). */
  static sessionConfig: 'unknown' | 'supported' | 'unsupported' = 'unknown';
  /** The session's own pool size; 0: the process's default pool. */
  readonly intraOpThreads: number = 0;

  /** Runs the graph on `inputs` (every placeholder, in order) and returns the `outputs` tensors ('node' or 'node:k'). */
  run(inputs: tf.Tensor[], outputs: string[]): tf.Tensor[] {
    if (this.id === undefined) throw new Error('GraphSession used after dispose');
    const ids = this.backend.getInputTensorIds(inputs);
    const out = this.backend.binding.runSavedModel(this.id, ids, this.inputNames, outputs.map((o) => (o.includes(':') ? o : `${o}:0`)).join(','));
    return out.map((m) => this.backend.createOutputTensor(m));
  }

  dispose(): void {
    if (this.id !== undefined) this.backend.deleteSavedModel(this.id);
    this.id = undefined;
  }
}
