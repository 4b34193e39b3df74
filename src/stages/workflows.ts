/** Every workflow the workers register (the bundle's entry point). */
export { prepareWorkflow, prepareProgressQuery } from './prepare/workflow';
export { checklistWorkflow, checklistProgressQuery } from './checklist/workflow';
export { sftWorkflow, sftProgressQuery } from './sft/workflow';
export { rlWorkflow, rlStatusQuery, setHyperparametersUpdate } from './rl/workflow';
export { pauseSignal, resumeSignal, stopSignal } from '../run/control';
export { cm2Pipeline, pipelineStatusQuery } from './pipeline/workflow';
export { evalWorkflow } from './eval/workflow';
