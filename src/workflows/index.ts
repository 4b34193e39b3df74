/** Every workflow the workers register (the bundle's entry point). */
export { prepareWorkflow, prepareProgressQuery } from './prepare';
export { checklistWorkflow, checklistProgressQuery } from './checklist';
export { sftWorkflow, sftProgressQuery } from './sft';
export { rlWorkflow, rlStatusQuery, pauseSignal, resumeSignal, stopSignal, setHyperparametersUpdate } from './rl';
export { cm2Pipeline, pipelineStatusQuery } from './pipeline';
export { evalWorkflow } from './eval';
