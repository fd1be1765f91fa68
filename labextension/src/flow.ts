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
  return trans.__('The sandbox could not plan this');
}

/**
 * Asks the user for workspace files to hand to a run (paths under the server's root),
 * starting from those chosen so far; null when they cancelled.
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

/**
 * Plan `request` and show the plan until the user decides: the approved plan, or null
 * (cancelled, blocked, or not plannable; a declined plan is dropped on the server).
 * Files… (with `pickFiles`) drops the plan shown, plans again with the picked files as
 * `inputs` and shows the new plan; a pick the server refuses (a symlink out of the tree,
 * too many bytes) says why and goes back to the files chosen before.
 */
export async function decideWithFiles(
  client: SandboxClient,
  request: PlanRequest,
  pickFiles: FilePicker | null
): Promise<IPlan | null> {
  let inputs: string[] = [...(request.inputs ?? [])];
  let fallback: string[] | null = null;
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
      return plan;
    }
    // Declined, blocked, or to be planned again with other files: this plan never runs.
    await client.reject(plan.plan_id).catch(() => undefined);
    if (decision === 'cancel' || !pickFiles) {
      return null;
    }
    const picked = await pickFiles(inputs);
    fallback = inputs;
    if (picked !== null) {
      inputs = picked;
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
  const plan = await decideWithFiles(client, request, hooks.pickFiles ?? null);
  if (!plan) {
    return null;
  }
  const view = makeOutput();
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
