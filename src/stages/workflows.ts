/** Every workflow the workers register (the bundle's entry point). */
export { prepareWorkflow, prepareProgressQuery } from './prepare/workflow';
export { checklistWorkflow, checklistProgressQuery } from './checklist/workflow';
export { sftWorkflow, sftProgressQuery } from './sft/workflow';
export { rlWorkflow, rlStatusQuery, pauseSignal, resumeSignal, stopSignal, setHyperparametersUpdate } from './rl/workflow';
export { cm2Pipeline, pipelineStatusQuery } from './pipeline/workflow';
export { evalWorkflow } from './eval/workflow';
