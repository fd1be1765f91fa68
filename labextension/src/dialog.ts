/**
 * The approval dialog: shows a plan and answers whether the user approved it.
 */

import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { renderPlan } from './render';
import type { IPlan } from './types';

/** Show `plan`; true only when the user approved a plan that is not blocked. */
export async function confirmPlan(plan: IPlan): Promise<boolean> {
  const body = new Widget({ node: renderPlan(plan) });
  const approve = Dialog.okButton({
    label: 'Approve and run',
    ariaLabel: 'Approve this plan and run it in the sandbox'
  });
  const dialog = new Dialog({
    title: plan.blocked
      ? 'Blocked: this snippet cannot run'
      : 'Run in the sandbox?',
    body,
    buttons: [Dialog.cancelButton({ label: 'Cancel' }), approve],
    // Enter must never approve a blocked plan.
    defaultButton: plan.blocked ? 0 : 1
  });
  dialog.addClass('jp-gitpilot-plan-dialog');
  if (plan.blocked) {
    const accept =
      dialog.node.querySelector<HTMLButtonElement>('.jp-mod-accept');
    if (accept) {
      accept.disabled = true;
      accept.title = plan.blocked_reason || 'A destructive pattern matched';
    }
  }
  const answer = await dialog.launch();
  return answer.button.accept && !plan.blocked;
}
