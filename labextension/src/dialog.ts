/**
 * The approval dialog (shows a plan and answers whether the user approved it), and
 * the confirmation before switching to Pass-through.
 */

import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { N_, trans } from './i18n';
import { PASS_THROUGH_RISK } from './labels';
import { el, isRisky, renderPlan } from './render';
import type { IPlan, IStatus } from './types';

/** What can take the focus inside a dialog, in Tab order (disabled and hidden controls cannot). */
const FOCUSABLE =
  'button, input, select, textarea, a[href], summary, [tabindex]:not([tabindex="-1"])';

/** The controls of `root` Tab visits, in document order. */
export function tabStops(root: HTMLElement): HTMLElement[] {
  return Array.from(root.querySelectorAll<HTMLElement>(FOCUSABLE)).filter(
    node =>
      !(node as HTMLButtonElement).disabled &&
      !node.closest('[hidden]') &&
      node.tabIndex >= 0
  );
}

/**
 * Keep Tab and Shift+Tab inside `dialog`, wrapping at both ends. JupyterLab's own trap
 * only wraps from its last button, which is never reached while that button is disabled
 * (a risky plan before its tick box), so Tab used to leave for `<body>`.
 */
export function trapFocus(dialog: Dialog<unknown>): void {
  dialog.node.addEventListener(
    'keydown',
    event => {
      if (event.key !== 'Tab') {
        return;
      }
      const content =
        dialog.node.querySelector<HTMLElement>('.jp-Dialog-content') ??
        dialog.node;
      const stops = tabStops(content);
      if (stops.length === 0) {
        return;
      }
      const at = stops.indexOf(document.activeElement as HTMLElement);
      const next = event.shiftKey
        ? at <= 0
          ? stops.length - 1
          : at - 1
        : at < 0 || at === stops.length - 1
          ? 0
          : at + 1;
      event.preventDefault();
      event.stopImmediatePropagation();
      stops[next].focus();
    },
    true
  );
}

/**
 * Launch `dialog` with the focus trapped in it; when it closes, the focus goes back to
 * `origin` (the control that opened it) if the dialog left it nowhere.
 */
export async function launchTrapped<T>(
  dialog: Dialog<T>,
  origin: Element | null = document.activeElement
): Promise<Dialog.IResult<T>> {
  trapFocus(dialog as Dialog<unknown>);
  try {
    return await dialog.launch();
  } finally {
    const lost =
      !document.activeElement || document.activeElement === document.body;
    if (lost && origin instanceof HTMLElement && origin.isConnected) {
      origin.focus();
    }
  }
}

/** The backend's health as the dialog needs it: null when it answers (or is not asked). */
export function unreachableReason(
  plan: IPlan,
  status: IStatus | null
): string | null {
  if (plan.backend !== 'matrixlab' || !status || status.ok) {
    return null;
  }
  return status.error || trans.__('the Runner did not answer');
}

/** How long the dialog waits for the backend's status before showing the plan anyway. */
const STATUS_WAIT_MS = 3000;

async function currentStatus(
  status: (() => Promise<IStatus>) | undefined
): Promise<IStatus | null> {
  if (!status) {
    return null;
  }
  const late = new Promise<null>(resolve =>
    setTimeout(() => resolve(null), STATUS_WAIT_MS)
  );
  return Promise.race([status().catch(() => null), late]);
}

/** The accessible name of the approve button (tests and screen readers find it by this). */
export const APPROVE_LABEL = N_('Approve this plan and run it in the sandbox');

/** The accessible name of the dialog's Files… button. */
export const FILES_LABEL = N_('Choose workspace files to hand to the run');

/** The `actions` mark of the Files… button, by which its answer is told apart. */
const FILES_ACTION = 'gitpilot-files';

/**
 * What the user decided in the approval dialog: `files` to pick more inputs, `remove`
 * to take the input of that name out (either way the caller plans again).
 */
export type PlanDecision = 'approve' | 'cancel' | 'files' | { remove: string };

/**
 * Show `plan`; true only when the user approved a plan that is not blocked.
 *
 * A blocked plan cannot be approved. A plan with a high-severity warning starts on
 * Cancel, and Approve stays disabled until the user ticks "run it anyway"; Enter
 * never approves it, even on the Approve button (a click or Space does).
 */
export async function confirmPlan(
  plan: IPlan,
  status?: () => Promise<IStatus>
): Promise<boolean> {
  return (await decidePlan(plan, status)) === 'approve';
}

/**
 * Show `plan` as `confirmPlan` does; with `offerFiles`, a Files… button (first in the
 * footer) closes the dialog answering `files`, so the caller can pick inputs and plan
 * again, and each input listed has a remove button (answering `{remove: name}`): the
 * inputs are part of the plan and its digest, never changed on an approved one.
 */
export async function decidePlan(
  plan: IPlan,
  status?: () => Promise<IStatus>,
  offerFiles = false
): Promise<PlanDecision> {
  const origin = document.activeElement;
  const risky = !plan.blocked && isRisky(plan);
  const unreachable = plan.blocked
    ? null
    : unreachableReason(plan, await currentStatus(status));
  let removed: string | null = null;
  let close = () => undefined as void;
  const body = new Widget({
    node: renderPlan(
      plan,
      offerFiles
        ? name => {
            removed = name;
            close();
          }
        : undefined
    )
  });
  if (unreachable !== null) {
    const alert = el('div', 'jp-gitpilot-unreachable');
    alert.setAttribute('role', 'alert');
    alert.append(
      el(
        'p',
        '',
        trans.__(
          'The MatrixLab Runner is unreachable, so this run would fail: %1',
          unreachable
        )
      ),
      el(
        'p',
        '',
        trans.__(
          'Start the Runner (Sandbox Settings, MatrixLab Runner card, Start), or switch the sandbox to Local in Sandbox Settings, then run again.'
        )
      )
    );
    body.node.prepend(alert);
  }
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
  const files = Dialog.createButton({
    label: trans.__('Files…'),
    ariaLabel: trans.__(FILES_LABEL),
    caption: trans.__(
      'Hand workspace files to the run, read-only in its folder (you approve the new plan)'
    ),
    className: 'jp-gitpilot-files-button',
    accept: false,
    actions: [FILES_ACTION]
  });
  const buttons = [Dialog.cancelButton({ label: trans.__('Cancel') }), approve];
  const dialog = new Dialog({
    title: plan.blocked
      ? trans.__('Blocked: this snippet cannot run')
      : risky
        ? trans.__('Risky: read the warning before you run this')
        : trans.__('Run in the sandbox?'),
    body,
    buttons: offerFiles ? [files, ...buttons] : buttons,
    // Enter must never approve a blocked or risky plan, nor one whose backend does not
    // answer: Cancel is the default and has the focus.
    defaultButton:
      (offerFiles ? 1 : 0) +
      (plan.blocked || risky || unreachable !== null ? 0 : 1)
  });
  close = () => dialog.reject();
  dialog.addClass('jp-gitpilot-plan-dialog');
  if (risky || unreachable !== null) {
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
  const answer = await launchTrapped(dialog, origin);
  if (removed !== null) {
    return { remove: removed };
  }
  if (answer.button.actions.includes(FILES_ACTION)) {
    return 'files';
  }
  const approved =
    answer.button.accept && !plan.blocked && (consent ? consent.checked : true);
  return approved ? 'approve' : 'cancel';
}

/**
 * Ask before switching to Pass-through (`off`): it runs snippets on the host as the
 * server's user, with no isolation and no network block. Cancel is the default.
 */
export async function confirmPassThrough(): Promise<boolean> {
  const body = el('div', 'jp-gitpilot-off-warning');
  body.append(
    el('p', '', trans.__(PASS_THROUGH_RISK)),
    el(
      'p',
      '',
      trans.__(
        'A snippet can read and change your files and reach anything you can reach. Use it only for local development, with code you trust.'
      )
    )
  );
  const dialog = new Dialog({
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
  return (await launchTrapped(dialog)).button.accept;
}
