/**
 * The approval dialog (shows a plan and answers whether the user approved it), and
 * the confirmation before switching to Pass-through.
 */

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { N_, trans } from './i18n';
import { el, isRisky, renderPlan } from './render';
import type { IPlan } from './types';

/** The accessible name of the approve button (tests and screen readers find it by this). */
export const APPROVE_LABEL = N_('Approve this plan and run it in the sandbox');

/**
 * Show `plan`; true only when the user approved a plan that is not blocked.
 *
 * A blocked plan cannot be approved. A plan with a high-severity warning starts on
 * Cancel, and Approve stays disabled until the user ticks "run it anyway"; Enter
 * never approves it, even on the Approve button (a click or Space does).
 */
export async function confirmPlan(plan: IPlan): Promise<boolean> {
  const risky = !plan.blocked && isRisky(plan);
  const body = new Widget({ node: renderPlan(plan) });
  let consent: HTMLInputElement | null = null;
  if (risky) {
    const label = el('label', 'jp-gitpilot-consent');
    consent = el('input');
    consent.type = 'checkbox';
    consent.name = 'consent';
    label.append(
      consent,
      el(
        'span',
        '',
        trans.__(
          'I have read the high-severity warning and want to run this anyway'
        )
      )
    );
    body.node.appendChild(label);
  }
  const approve = (risky ? Dialog.warnButton : Dialog.okButton)({
    label: risky ? trans.__('Run anyway') : trans.__('Approve and run'),
    ariaLabel: trans.__(APPROVE_LABEL)
  });
  const dialog = new Dialog({
    title: plan.blocked
      ? trans.__('Blocked: this snippet cannot run')
      : risky
        ? trans.__('Risky: read the warning before you run this')
        : trans.__('Run in the sandbox?'),
    body,
    buttons: [Dialog.cancelButton({ label: trans.__('Cancel') }), approve],
    // Enter must never approve a blocked or risky plan: Cancel is the default and has the focus.
    defaultButton: plan.blocked || risky ? 0 : 1
  });
  dialog.addClass('jp-gitpilot-plan-dialog');
  if (risky) {
    dialog.addClass('jp-mod-risky');
  }
  const accept = dialog.node.querySelector<HTMLButtonElement>('.jp-mod-accept');
  if (accept && plan.blocked) {
    accept.disabled = true;
    accept.title =
      plan.blocked_reason || trans.__('A destructive pattern matched');
  }
  if (accept && consent) {
    const box = consent;
    const sync = () => {
      accept.disabled = !box.checked;
      accept.title = box.checked
        ? ''
        : trans.__(
            'Tick the box above first: this plan has a high-severity warning'
          );
    };
    box.addEventListener('change', sync);
    sync();
    // Runs before the dialog's own key handler (registered later, on attach).
    dialog.node.addEventListener(
      'keydown',
      event => {
        if (event.key === 'Enter' && document.activeElement !== dialog.node) {
          const target = document.activeElement;
          if (target === accept || target === box) {
            // Enter neither approves nor dismisses here: it is too easy to press by habit.
            event.preventDefault();
            event.stopImmediatePropagation();
          }
        }
      },
      true
    );
  }
  const answer = await dialog.launch();
  return (
    answer.button.accept && !plan.blocked && (consent ? consent.checked : true)
  );
}

/**
 * Ask before switching to Pass-through (`off`): it runs snippets on the host as the
 * server's user, with no isolation and no network block. Cancel is the default.
 */
export async function confirmPassThrough(): Promise<boolean> {
  const body = el('div', 'jp-gitpilot-off-warning');
  body.append(
    el(
      'p',
      '',
      trans.__(
        "Pass-through has no isolation: every snippet runs directly on the server's host, as you, and the network is not blocked."
      )
    ),
    el(
      'p',
      '',
      trans.__(
        'A snippet can read and change your files and reach anything you can reach. Use it only for local development, with code you trust.'
      )
    )
  );
  const answer = await showDialog({
    title: trans.__('Run snippets with no isolation?'),
    body: new Widget({ node: body }),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({
        label: trans.__('Switch to Pass-through'),
        ariaLabel: trans.__('Switch to Pass-through: no isolation')
      })
    ],
    defaultButton: 0
  });
  return answer.button.accept;
}
