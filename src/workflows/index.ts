/** Every workflow the workers register (the bundle's entry point). */
export { prepareWorkflow, prepareProgressQuery } from '../stages/prepare/workflow';
export { checklistWorkflow, checklistProgressQuery } from '../stages/checklist/workflow';
export { sftWorkflow, sftProgressQuery } from '../stages/sft/workflow';
export { rlWorkflow, rlStatusQuery, setHyperparametersUpdate } from '../stages/rl/workflow';
export { pauseSignal, resumeSignal, stopSignal, trackDoneSignal, trackStatusQuery } from '../run/control';
export { cm2Pipeline, pipelineStatusQuery } from '../stages/pipeline/workflow';
export { evalWorkflow } from '../stages/eval/workflow';
export { trackWorkflow } from '../stages/track/workflow';
