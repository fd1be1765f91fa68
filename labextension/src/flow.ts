/**
 * Plan → approve → run, the one path every ▶ Run click and file run takes.
 */

import { showErrorMessage } from '@jupyterlab/apputils';

import { decidePlan } from './dialog';
import { trans } from './i18n';
import { OutputView } from './render';
import { newRunId, ResponseError, type SandboxClient } from './request';
import type { IPlan, IRunResult, PlanRequest } from './types';

/** Tell the user what failed, with the server's message (never raw JSON). */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The title of the dialog that says why a request could not be planned: a host that
 * cannot contain runs is not the user's mistake, and says so (the message has the fix).
 */
export function planFailureTitle(error: unknown): string {
  const code = error instanceof ResponseError ? error.code : '';
  if (code === 'containment_unavailable') {
    return trans.__('This host cannot contain the snippet');
  }
  if (code === 'network_unavailable') {
    return trans.__('This host cannot give the snippet a contained network');
  }
  // The caps on what a run may take are the administrator's (the message says which).
  if (code === 'inputs_too_large' || code === 'inputs_too_many_files') {
    return trans.__('Too much for one run: the files were not added');
  }
  if (code.startsWith('input')) {
    return trans.__('These files cannot be handed to the run');
  }
  return trans.__('The sandbox could not plan this');
}

/**
 * Asks the user for more workspace files to hand to a run (paths under the server's
 * root), told those chosen so far (the answer is added to them); null when they cancelled.
 */
export type FilePicker = (
  current: readonly string[]
) => Promise<string[] | null>;

/** What a caller may follow of a run once the user approved it. */
export interface IRunHooks {
  /** Offer Files… in the approval dialog: the picked files become the plan's `inputs`. */
  pickFiles?: FilePicker | null;
  /** The run started: `stop` ends it on the server (the view's Stop button does the same). */
  started?: (stop: () => void) => void;
  /** The run could not start or broke off: the server's (or the network's) message. */
  failed?: (message: string) => void;
}

/**
 * Stops one run: by name on the server (`DELETE runs/{run_id}`), and when that
 * cannot be done (an older server, a network fault) by closing its stream, which
 * stops it on the server too. Either way the run's view then says it was stopped.
 */
export class RunStopper {
  readonly runId = newRunId();
  readonly controller = new AbortController();
  private requested = false;

  constructor(private readonly client: SandboxClient) {}

  /** True once the user asked to stop. */
  get stopRequested(): boolean {
    return this.requested;
  }

  /** Ask the server to stop the run; idempotent. */
  stop(): void {
    if (this.requested) {
      return;
    }
    this.requested = true;
    this.client.cancelRun(this.runId).catch(() => this.controller.abort());
  }
}

/** The name an input path has in the run's folder (its base name, as the server gives it). */
export function inputName(path: string): string {
  return path.replace(/\/+$/, '').split('/').pop() ?? path;
}

/** The inputs chosen so far with a new pick added after them, each path once. */
export function addInputs(
  current: readonly string[],
  picked: readonly string[]
): string[] {
  return Array.from(new Set([...current, ...picked]));
}

/** The inputs without the one the run would see as `name`. */
export function removeInput(
  current: readonly string[],
  name: string
): string[] {
  return current.filter(path => inputName(path) !== name);
}

/** The plan the user approved, and the input paths it was planned with. */
export interface IDecidedPlan {
  plan: IPlan;
  /** Paths under the server's root (the request's `inputs`); empty for none. */
  inputs: string[];
}

/**
 * Plan `request` and show the plan until the user decides: the approved plan with its
 * inputs, or null (cancelled, blocked, or not plannable; a declined plan is dropped on
 * the server). The dialog lists the inputs, each with a remove button; Files… (with
 * `pickFiles`) adds the picked files to them. Either change drops the plan shown and plans
 * again: the inputs are part of the plan and its digest. A change the server refuses
 * (past the caps on count and bytes, a symlink out of the tree, a file gone) says why
 * and goes back to the inputs chosen before; a request whose own inputs are refused
 * (a Re-run whose file was since removed) goes on without them.
 */
export async function decideWithFiles(
  client: SandboxClient,
  request: PlanRequest,
  pickFiles: FilePicker | null
): Promise<IDecidedPlan | null> {
  let inputs: string[] = [...(request.inputs ?? [])];
  let fallback: string[] | null = inputs.length ? [] : null;
  for (;;) {
    let plan: IPlan;
    try {
      plan = await client.plan(
        inputs.length
          ? { ...request, inputs }
          : { ...request, inputs: undefined }
      );
    } catch (error) {
      await showErrorMessage(planFailureTitle(error), messageOf(error));
      if (fallback === null) {
        return null;
      }
      inputs = fallback;
      fallback = null;
      continue;
    }
    const decision = await decidePlan(
      plan,
      () => client.status(),
      pickFiles !== null
    );
    if (decision === 'approve') {
      return { plan, inputs };
    }
    // Declined, blocked, or to be planned again with other files: this plan never runs.
    await client.reject(plan.plan_id).catch(() => undefined);
    if (decision === 'cancel') {
      return null;
    }
    fallback = inputs;
    if (decision === 'files') {
      const picked = pickFiles ? await pickFiles(inputs) : null;
      if (picked !== null) {
        inputs = addInputs(inputs, picked);
      }
    } else {
      inputs = removeInput(inputs, decision.remove);
    }
  }
}

/**
 * Plan `request`, show the plan, and on Approve run it streaming into the view
 * `makeOutput` creates. Cancel (or a blocked plan) runs nothing and creates no view.
 */
export async function planAndRun(
  client: SandboxClient,
  request: PlanRequest,
  makeOutput: () => OutputView,
  hooks: IRunHooks = {}
): Promise<IRunResult | null> {
  const decided = await decideWithFiles(
    client,
    request,
    hooks.pickFiles ?? null
  );
  if (!decided) {
    return null;
  }
  const { plan, inputs } = decided;
  const view = makeOutput();
  // Its Re-run plans again with the same inputs.
  view.inputs = inputs;
  const stopper = new RunStopper(client);
  const stop = () => stopper.stop();
  view.running(stop);
  hooks.started?.(stop);
  try {
    const approval = await client.approve(plan.plan_id);
    // The token alone: the server runs exactly the plan the user approved.
    const result = await client.run(
      { approval_token: approval.approval_token, run_id: stopper.runId },
      (stream, text) => view.append(stream, text),
      stopper.controller.signal,
      item => view.display(item)
    );
    view.finish(result);
    return result;
  } catch (error) {
    if (stopper.stopRequested) {
      // The stream was closed to stop the run: the server ended it without an envelope.
      view.showStopped();
      return null;
    }
    view.fail(messageOf(error));
    hooks.failed?.(messageOf(error));
    return null;
  }
}
