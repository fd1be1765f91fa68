/**
 * The status bar item: "Sandbox: Local", "Sandbox: MatrixLab — unreachable",
 * "Sandbox: Local · 1 plan waiting"; a click opens the settings panel, or the
 * Pending Plans panel while agent plans wait.
 */

import { Widget } from '@lumino/widgets';

import { trans } from './i18n';
import { CLICK_TO_OPEN, statusText, statusTitle, waitingText } from './labels';
import type { SandboxModel } from './model';
import { el } from './render';

/** A keyboard-focusable status bar item bound to the shared model. */
export class SandboxStatusItem extends Widget {
  constructor(
    private readonly model: SandboxModel,
    private readonly open: () => void,
    private readonly openPlans: () => void = open
  ) {
    super();
    this.addClass('jp-gitpilot-status');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', () => this.openFor());
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        this.openFor();
      }
    });
    model.changed.connect(this.update, this);
    this.update();
  }

  private openFor(): void {
    if (this.model.waiting > 0) {
      this.openPlans();
    } else {
      this.open();
    }
  }

  /** Show the model's current text and health, and the count of waiting agent plans. */
  update(): void {
    const { status, error, waiting } = this.model;
    this.node.textContent = statusText(status, error);
    this.node.title = statusTitle(status, error);
    if (waiting > 0) {
      this.node.appendChild(
        el('span', 'jp-gitpilot-status-waiting', waitingText(waiting))
      );
      this.node.title = statusTitle(status, error).replace(
        CLICK_TO_OPEN(),
        trans._n(
          '%1 agent plan waits for your decision. Click to review.',
          '%1 agent plans wait for your decision. Click to review.',
          waiting
        )
      );
    }
    const healthy = error === null && status !== null && status.ok;
    this.node.classList.toggle('jp-mod-failed', status !== null && !healthy);
    // Pass-through runs snippets with no isolation: shown as a warning, never as a plain label.
    this.node.classList.toggle(
      'jp-mod-warn',
      error === null && status?.backend === 'off'
    );
  }

  dispose(): void {
    this.model.changed.disconnect(this.update, this);
    super.dispose();
  }
}
