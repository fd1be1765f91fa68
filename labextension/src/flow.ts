/**
 * Plan → approve → run, the one path every ▶ Run click and file run takes.
 */

import { showErrorMessage } from '@jupyterlab/apputils';

import { confirmPlan } from './dialog';
import { OutputView } from './render';
import type { SandboxClient } from './request';
import type { IRunResult, PlanRequest } from './types';

/** Tell the user what failed, with the server's message (never raw JSON). */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Plan `request`, show the plan, and on Approve run it streaming into the view
 * `makeOutput` creates. Cancel (or a blocked plan) runs nothing and creates no view.
 */
export async function planAndRun(
  client: SandboxClient,
  request: PlanRequest,
  makeOutput: () => OutputView
): Promise<IRunResult | null> {
  let plan;
  try {
    plan = await client.plan(request);
  } catch (error) {
    await showErrorMessage('Sandbox: could not plan', messageOf(error));
    return null;
  }
  if (!(await confirmPlan(plan))) {
    // Declined (or blocked): drop the plan server-side; nothing else happens.
    await client.reject(plan.plan_id).catch(() => undefined);
    return null;
  }
  const view = makeOutput();
  try {
    const approval = await client.approve(plan.plan_id);
    // The token alone: the server runs exactly the plan the user approved.
    const result = await client.run(
      { approval_token: approval.approval_token },
      (stream, text) => view.append(stream, text)
    );
    view.finish(result);
    return result;
  } catch (error) {
    view.fail(messageOf(error));
    return null;
  }
}
